#include "pdng/function_communicator.h"

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

class FunctionCommunicator : public Communicator {
 public:
  FunctionCommunicator(int rank, int size, AllreduceFn allreduce, LastErrorFn last_error)
      : rank_(rank), size_(size), allreduce_(allreduce), last_error_(last_error) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  bool supports_allreduce(DType dtype, const std::string& reduction) const override {
    if (abi_dtype(dtype) < 0 || abi_reduction(reduction) < 0) return false;
    return reduction != "avg" || dtype == DType::Float32 || dtype == DType::Float64;
  }

  void allreduce(void* data, int64_t count, DType dtype, const std::string& reduction) override {
    allreduce(data, data, count, dtype, reduction);
  }

  // The function takes a send and a receive buffer (oneCCL's allreduce reads one and writes the other).
  void allreduce(const void* in, void* data, int64_t count, DType dtype, const std::string& reduction) override {
    if (allreduce_(in, data, static_cast<size_t>(count), abi_dtype(dtype), abi_reduction(reduction)) != 0)
      throw Error("rank " + std::to_string(rank_) + ": allreduce of " + std::to_string(count) + " " +
                  dtype_name(dtype) + " elements failed: " + (last_error_ ? last_error_() : "unknown error"));
    if (reduction == "avg") {
      if (dtype == DType::Float32) divide<float>(data, count, size_);
      else divide<double>(data, count, size_);
    }
  }

 private:
  int rank_, size_;
  AllreduceFn allreduce_;
  LastErrorFn last_error_;
};

}  // namespace

std::shared_ptr<Communicator> make_function_communicator(int rank, int size, AllreduceFn allreduce,
                                                         LastErrorFn last_error) {
  PDNG_CHECK(allreduce != nullptr, "no allreduce function");
  return std::make_shared<FunctionCommunicator>(rank, size, allreduce, last_error);
}

}  // namespace pdng
