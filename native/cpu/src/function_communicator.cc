#include "pdng/function_communicator.h"

#include <cstring>
#include <vector>

#include "pdng/node_allreduce.h"

namespace pdng {

namespace {

int abi_dtype(DType dtype) {
  switch (dtype) {
    case DType::Float32: return 0;
    case DType::Float64: return 1;
    case DType::Int32: return 4;
    case DType::Int64: return 5;
    default: return -1;  // half types: the Python transport computes their sums in float32
  }
}

int abi_reduction(const std::string& reduction) {
  if (reduction == "sum" || reduction == "avg") return 0;
  if (reduction == "prod") return 1;
  if (reduction == "min") return 2;
  if (reduction == "max") return 3;
  return -1;
}

template <class T>
void divide(void* data, int64_t count, int size) {
  T* p = static_cast<T*>(data);
  const T n = static_cast<T>(size);
  for (int64_t i = 0; i < count; ++i) p[i] = p[i] / n;  // as the Python transports' avg: sum / size
}

// The shared-memory path within the node, one per process, for every executor's communicator.
SharedNodePath& node_path_of_functions() {
  static SharedNodePath* path = new SharedNodePath();  // never destroyed: the transport may end first
  return *path;
}

class FunctionCommunicator : public Communicator {
 public:
  FunctionCommunicator(int rank, int size, AllreduceFn allreduce, LastErrorFn last_error, bool shared_memory)
      : rank_(rank), size_(size), allreduce_(allreduce), last_error_(last_error), shared_memory_(shared_memory) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  bool supports_allreduce(DType dtype, const std::string& reduction) const override {
    if (abi_dtype(dtype) < 0 || abi_reduction(reduction) < 0) return false;
    return reduction != "avg" || dtype == DType::Float32 || dtype == DType::Float64;
  }

  bool wants_shared_arena() const override { return shared_memory_ && size_ > 1; }

  std::string describe() const override {
    return node_path_of_functions().describe("the transport's allreduce");
  }

  void allreduce(void* data, int64_t count, DType dtype, const std::string& reduction) override {
    // Every rank takes the same branch: the path and supports() are the same everywhere, and
    // NodeAllreduce::allreduce returns false on every rank alike.
    NodeAllreduce* path = node_path(dtype, reduction);
    if (path != nullptr && path->allreduce(data, count, dtype, reduction)) return;
    allreduce(data, data, count, dtype, reduction);
  }

  // The function takes a send and a receive buffer (oneCCL's allreduce reads one and writes the other).
  void allreduce(const void* in, void* data, int64_t count, DType dtype, const std::string& reduction) override {
    if (in != data && node_path(dtype, reduction) != nullptr) {
      // The shared-memory path reduces in place, in shared memory: the copy into the region first.
      std::memcpy(data, in, static_cast<size_t>(count) * dtype_size(dtype));
      return allreduce(data, count, dtype, reduction);
    }
    if (allreduce_(in, data, static_cast<size_t>(count), abi_dtype(dtype), abi_reduction(reduction)) != 0)
      throw Error("rank " + std::to_string(rank_) + ": allreduce of " + std::to_string(count) + " " +
                  dtype_name(dtype) + " elements failed: " + (last_error_ ? last_error_() : "unknown error"));
    if (reduction == "avg") {
      if (dtype == DType::Float32) divide<float>(data, count, size_);
      else divide<double>(data, count, size_);
    }
  }

  // oneCCL's reduce_scatter and allgather stay with the Python transport (the fallback); within a
  // node, shared memory serves them here.
  bool sharded_over_node(bool reduce_scatter, const void* in, void* out, int64_t count, DType dtype,
                         const std::string& reduction) override {
    NodeAllreduce* path = node_path(dtype, reduction);
    if (path == nullptr) return false;
    return reduce_scatter ? path->reduce_scatter(in, out, count, dtype, reduction) : path->allgather(in, out, count, dtype);
  }

 private:
  NodeAllreduce* node_path(DType dtype, const std::string& reduction) {
    // The setup's gather through the transport's own allreduce: a sum of int64 words in which every
    // rank fills only its own record, the others' left zero, is the concatenation of the records.
    auto gather = [this](const void* mine, void* all, int bytes) {
      const size_t words = (static_cast<size_t>(bytes) + 7) / 8;
      std::vector<int64_t> buffer(words * size_, 0);
      std::memcpy(buffer.data() + words * rank_, mine, static_cast<size_t>(bytes));
      if (allreduce_(buffer.data(), buffer.data(), buffer.size(), abi_dtype(DType::Int64), 0) != 0)
        throw Error("rank " + std::to_string(rank_) + ": the allreduce that sets up the shared-memory path failed: " +
                    (last_error_ ? last_error_() : "unknown error"));
      for (int r = 0; r < size_; ++r)
        std::memcpy(static_cast<char*>(all) + static_cast<size_t>(r) * bytes, buffer.data() + words * r,
                    static_cast<size_t>(bytes));
    };
    NodeAllreduce* path = node_path_of_functions().get(rank_, size_, shared_memory_, gather);
    return path != nullptr && path->supports(dtype, reduction) ? path : nullptr;
  }

  int rank_, size_;
  AllreduceFn allreduce_;
  LastErrorFn last_error_;
  bool shared_memory_;
};

}  // namespace

std::shared_ptr<Communicator> make_function_communicator(int rank, int size, AllreduceFn allreduce,
                                                         LastErrorFn last_error, bool shared_memory) {
  PDNG_CHECK(allreduce != nullptr, "no allreduce function");
  return std::make_shared<FunctionCommunicator>(rank, size, allreduce, last_error, shared_memory);
}

}  // namespace pdng
