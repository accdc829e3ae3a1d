#include "pdng/mpi_communicator.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "pdng/half_codec.h"
#include "pdng/node_allreduce.h"

#ifdef PDNG_WITH_MPI
#include <mpi.h>
#if __has_include(<mpi-ext.h>)
#include <mpi-ext.h>  // Open MPI's extensions: ULFM's MPIX_Comm_revoke where built with it
#endif
#endif

namespace pdng {

#ifdef PDNG_WITH_MPI
namespace {

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
    case DType::Int32: return MPI_INT32_T;
    case DType::Int64: return MPI_INT64_T;
    default: return MPI_DATATYPE_NULL;
  }
}

MPI_Op mpi_op(const std::string& reduction) {
  if (reduction == "sum" || reduction == "avg") return MPI_SUM;
  if (reduction == "prod") return MPI_PROD;
  if (reduction == "min") return MPI_MIN;
  if (reduction == "max") return MPI_MAX;
  return MPI_OP_NULL;
}

// fn(begin, end) over [0, n) in blocks, on OpenMP threads when there is enough work.
template <class Fn>
void in_blocks(int64_t n, const Fn& fn) {
  const int64_t block = int64_t{1} << 16;
  const int64_t blocks = (n + block - 1) / block;
  // Serial on purpose: the communication thread runs beside the compute thread, whose cores it should not take.
  for (int64_t k = 0; k < blocks; ++k) fn(k * block, std::min(n, (k + 1) * block));
}

template <class T>
void divide(void* data, int64_t count, int size) {
  // The same arithmetic as the Python transports' avg (sum / size), so that results agree bitwise.
  // Serial: an OpenMP region here would start a second team of spinning workers for this thread.
  T* p = static_cast<T*>(data);
  const T n = static_cast<T>(size);
  for (int64_t i = 0; i < count; ++i) p[i] = p[i] / n;
}

// Under fault tolerance (mpirun --with-ft ulfm) a collective with a dead rank fails on some survivors
// only, while others may wait in it for ever: the first to see the failure revokes the communicator,
// which ends the collective on every survivor (the elastic transport then shrinks the group).
void revoke_on_process_failure(int rc, MPI_Comm comm) {
#if defined(OMPI_HAVE_MPI_EXT_FTMPI) && OMPI_HAVE_MPI_EXT_FTMPI
  int error_class = 0;
  MPI_Error_class(rc, &error_class);
  if (comm != MPI_COMM_NULL && (error_class == MPIX_ERR_PROC_FAILED || error_class == MPIX_ERR_PROC_FAILED_PENDING ||
                                error_class == MPIX_ERR_REVOKED)) {
    MPIX_Comm_revoke(comm);
  }
#else
  (void)rc;
  (void)comm;
#endif
}

void check(int rc, const char* call, int rank, int64_t count, DType dtype, MPI_Comm comm = MPI_COMM_NULL) {
  if (rc == MPI_SUCCESS) return;
  revoke_on_process_failure(rc, comm);
  char text[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw Error("rank " + std::to_string(rank) + ": " + call + " of " + std::to_string(count) + " " +
              dtype_name(dtype) + " elements failed: " + text);
}

// The shared-memory path of flat AllReduce: one per process, for every executor's communicator.
SharedNodePath& node_path_of_mpi() {
  static SharedNodePath* path = new SharedNodePath();  // never destroyed: MPI may be finalized by then
  return *path;
}

class MpiCommunicator : public Communicator {
 public:
  // node == MPI_COMM_NULL: flat on `world` (over shared memory, if `shared_memory`, `world` is
  // MPI_COMM_WORLD and every rank can map the others'). Otherwise hierarchical over the node's
  // communicator (rank 0 = leader) and, on leaders, the leaders' communicator. A `world` other than
  // MPI_COMM_WORLD is a group of the job's ranks (ir/groups.py), always flat MPI.
  MpiCommunicator(MPI_Comm world, MPI_Comm node, MPI_Comm leaders, bool shared_memory)
      : world_(world), node_(node), leaders_(leaders), shared_memory_(shared_memory) {
    MPI_Comm_rank(world_, &rank_);
    MPI_Comm_size(world_, &size_);
    if (node_ != MPI_COMM_NULL) MPI_Comm_rank(node_, &node_rank_);
    if (leaders_ != MPI_COMM_NULL) MPI_Comm_size(leaders_, &leaders_size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  bool supports_allreduce(DType dtype, const std::string& reduction) const override {
    if (mpi_type(dtype) == MPI_DATATYPE_NULL || mpi_op(reduction) == MPI_OP_NULL) return false;
    // Integer avg floors; the Python transport does it.
    return reduction != "avg" || dtype == DType::Float32 || dtype == DType::Float64;
  }

  bool wants_shared_arena() const override {
    return shared_memory_ && node_ == MPI_COMM_NULL && world_ == MPI_COMM_WORLD && size_ > 1;
  }

  std::string describe() const override {
    if (world_ != MPI_COMM_WORLD) return "MPI_Allreduce on a group of " + std::to_string(size_) + " ranks";
    if (node_ == MPI_COMM_NULL) return node_path_of_mpi().describe("MPI_Allreduce on MPI_COMM_WORLD");
    int node_size = 0;
    MPI_Comm_size(node_, &node_size);
    return "hierarchical: rank " + std::to_string(node_rank_) + " of " + std::to_string(node_size) +
           " in its node, " + (node_rank_ == 0 ? "leader of " + std::to_string(leaders_size_) + " nodes" : "not a leader");
  }

  bool supports_compressed_allreduce(const std::string& reduction, const std::string& compress) const override {
    return (reduction == "sum" || reduction == "avg") && (compress == "bf16" || compress == "fp16");
  }

  // The scheme of paddle_ngraph/distributed/compress.py: 16-bit chunks exchanged by MPI_Alltoall, each
  // rank sums its chunk in float32 in rank order, rounds it to 16 bits once, MPI_Allgather. Every
  // element's result depends only on the N inputs, so every rank (and the reference) has the same bits.
  void compressed_allreduce(float* data, int64_t count, const std::string& reduction,
                            const std::string& compress) override {
    const HalfFormat format = compress == "bf16" ? HalfFormat::BF16 : HalfFormat::FP16;
    const int n = size_;
    // Segments keep each rank's chunk below 2^28 elements (MPI counts are int); elements are independent,
    // so segmenting does not change any result.
    const int64_t max_segment = (int64_t{1} << 28) * n;
    for (int64_t done = 0; done < count; done += max_segment) {
      const int64_t segment = std::min(max_segment, count - done);
      const int64_t chunk = (segment + n - 1) / n;
      float* x = data + done;
      send_.resize(static_cast<size_t>(chunk * n));
      recv_.resize(send_.size());
      mine_.resize(static_cast<size_t>(chunk));
      sum_.resize(static_cast<size_t>(chunk));
      uint16_t* send = send_.data();
      const uint16_t* recv = recv_.data();
      uint16_t* mine = mine_.data();
      float* sum = sum_.data();
      in_blocks(segment, [&](int64_t b, int64_t e) { encode_half(x + b, send + b, e - b, format); });
      std::fill(send + segment, send + chunk * n, uint16_t{0});  // the padding encodes 0.0
      check(MPI_Alltoall(send, static_cast<int>(chunk), MPI_UINT16_T, recv_.data(), static_cast<int>(chunk),
                         MPI_UINT16_T, world_), ("MPI_Alltoall of the " + compress + " AllReduce").c_str(), rank_, count,
            DType::Float32, world_);
      const float divisor = static_cast<float>(n);
      const bool avg = reduction == "avg";
      in_blocks(chunk, [&](int64_t b, int64_t e) {
        decode_half(recv + b, sum + b, e - b, format);
        for (int r = 1; r < n; ++r) accumulate_half(recv + r * chunk + b, sum + b, e - b, format);  // rank order
        if (avg)
          for (int64_t i = b; i < e; ++i) sum[i] = sum[i] / divisor;  // as the uncompressed avg: sum / size
        encode_half(sum + b, mine + b, e - b, format);
      });
      check(MPI_Allgather(mine, static_cast<int>(chunk), MPI_UINT16_T, send, static_cast<int>(chunk), MPI_UINT16_T,
                          world_), ("MPI_Allgather of the " + compress + " AllReduce").c_str(), rank_, count,
            DType::Float32, world_);
      in_blocks(segment, [&](int64_t b, int64_t e) { decode_half(send + b, x + b, e - b, format); });
    }
  }

  void allreduce(void* data, int64_t count, DType dtype, const std::string& reduction) override {
    reduce(nullptr, data, count, dtype, reduction);
  }

  void allreduce(const void* in, void* out, int64_t count, DType dtype, const std::string& reduction) override {
    if (node_ != MPI_COMM_NULL) return Communicator::allreduce(in, out, count, dtype, reduction);
    // The shared-memory path reduces in place, in shared memory: the copy into the region first.
    if (node_path(dtype, reduction) != nullptr) return Communicator::allreduce(in, out, count, dtype, reduction);
    reduce(in, out, count, dtype, reduction);
  }

  bool supports_sharded(DType dtype, const std::string& reduction) const override {
    return supports_allreduce(dtype, reduction);
  }

  void reduce_scatter(const void* in, void* out, int64_t count, DType dtype, const std::string& reduction) override {
    // Over shared memory when every rank's buffers are there; the same on every rank, as in reduce().
    NodeAllreduce* path = node_path(dtype, reduction);
    if (path != nullptr && path->reduce_scatter(in, out, count, dtype, reduction)) return;
    PDNG_CHECK(count <= INT32_MAX, "reduce_scatter of more than 2^31 elements per rank");
    check(MPI_Reduce_scatter_block(in, out, static_cast<int>(count), mpi_type(dtype), mpi_op(reduction), world_),
          "MPI_Reduce_scatter_block", rank_, count * size_, dtype, world_);
    if (reduction == "avg") {
      if (dtype == DType::Float32) divide<float>(out, count, size_);
      else divide<double>(out, count, size_);
    }
  }

  void allgather(const void* in, void* out, int64_t count, DType dtype) override {
    NodeAllreduce* path = node_path(dtype, "sum");  // a copy: any dtype the path can sum
    if (path != nullptr && path->allgather(in, out, count, dtype)) return;
    PDNG_CHECK(count <= INT32_MAX, "allgather of more than 2^31 elements per rank");
    check(MPI_Allgather(in, static_cast<int>(count), mpi_type(dtype), out, static_cast<int>(count), mpi_type(dtype),
                        world_),
          "MPI_Allgather", rank_, count, dtype, world_);
  }

 private:
  // The process's shared-memory path, if flat, usable and able to reduce this; set up on first use.
  NodeAllreduce* node_path(DType dtype, const std::string& reduction) {
    // The shared-memory path is the process's, among every rank of the job: not a group's.
    if (node_ != MPI_COMM_NULL || world_ != MPI_COMM_WORLD) return nullptr;
    auto gather = [](const void* mine, void* all, int bytes) {
      const int rc = MPI_Allgather(mine, bytes, MPI_BYTE, all, bytes, MPI_BYTE, MPI_COMM_WORLD);
      PDNG_CHECK(rc == MPI_SUCCESS, "MPI_Allgather while setting up the shared-memory AllReduce failed");
    };
    NodeAllreduce* path = node_path_of_mpi().get(rank_, size_, shared_memory_, gather);
    return path != nullptr && path->supports(dtype, reduction) ? path : nullptr;
  }

  // in == nullptr: in place on `data`. Otherwise from `in` into `data` (flat MPI_Allreduce only).
  void reduce(const void* in, void* data, int64_t count, DType dtype, const std::string& reduction) {
    if (in == nullptr) {
      // Every rank takes the same branch: the path and supports() are the same everywhere, and
      // allreduce() returns false on every rank alike.
      NodeAllreduce* path = node_path(dtype, reduction);
      if (path != nullptr && path->allreduce(data, count, dtype, reduction)) return;
    }
    // MPI counts are int: reduce in chunks below 2^31 elements.
    const int64_t chunk = (int64_t{1} << 30);
    auto* bytes = static_cast<char*>(data);
    const auto* in_bytes = static_cast<const char*>(in);
    for (int64_t done = 0; done < count; done += chunk) {
      int n = static_cast<int>(std::min(chunk, count - done));
      // The blocking call: Open MPI's tuned allreduce (MPI_Iallreduce goes through libnbc: measured
      // 1.7x slower at 16 and 64 MB with tools/bench_allreduce.py). While it waits for a slower peer it does not spin a core away from
      // this rank's compute thread: import_mpi sets mpi_yield_when_idle (see distributed/mpi.py).
      char* part = bytes + done * dtype_size(dtype);
      const void* send = in ? static_cast<const void*>(in_bytes + done * dtype_size(dtype)) : MPI_IN_PLACE;
      if (node_ == MPI_COMM_NULL) {
        check(MPI_Allreduce(send, part, n, mpi_type(dtype), mpi_op(reduction), world_),
              "MPI_Allreduce", rank_, count, dtype, world_);
      } else {
        hierarchical(part, n, dtype, reduction, count);
      }
    }
    if (reduction == "avg") {
      if (dtype == DType::Float32) divide<float>(data, count, size_);
      else divide<double>(data, count, size_);
    }
  }

  // Only the leaders' allreduce crosses hosts; within a node the reduce and the broadcast go over
  // shared memory. Every rank ends with its leader's bits, so results are identical on all ranks.
  void hierarchical(char* part, int n, DType dtype, const std::string& reduction, int64_t count) {
    const MPI_Datatype type = mpi_type(dtype);
    const MPI_Op op = mpi_op(reduction);
    if (node_rank_ == 0) {
      check(MPI_Reduce(MPI_IN_PLACE, part, n, type, op, 0, node_), "MPI_Reduce (node)", rank_, count, dtype);
      if (leaders_size_ > 1)
        check(MPI_Allreduce(MPI_IN_PLACE, part, n, type, op, leaders_), "MPI_Allreduce (leaders)", rank_, count,
              dtype);
    } else {
      check(MPI_Reduce(part, nullptr, n, type, op, 0, node_), "MPI_Reduce (node)", rank_, count, dtype);
    }
    check(MPI_Bcast(part, n, type, 0, node_), "MPI_Bcast (node)", rank_, count, dtype);
  }

  MPI_Comm world_ = MPI_COMM_WORLD, node_ = MPI_COMM_NULL, leaders_ = MPI_COMM_NULL;
  bool shared_memory_ = false;
  int rank_ = 0, size_ = 1, node_rank_ = 0, leaders_size_ = 0;
  // Scratch of the compressed AllReduce, reused: only the communication thread calls it.
  std::vector<uint16_t> send_, recv_, mine_;
  std::vector<float> sum_;
};

}  // namespace

bool mpi_available() { return true; }

namespace {
void check_mpi_ready() {
  int initialized = 0, finalized = 0, level = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  PDNG_CHECK(initialized && !finalized, "MPI is not initialized (import mpi4py.MPI first) or already finalized");
  MPI_Query_thread(&level);
  PDNG_CHECK(level >= MPI_THREAD_SERIALIZED,
             "MPI was initialized with a thread level below MPI_THREAD_SERIALIZED; the communication thread "
             "needs at least that (mpi4py requests MPI_THREAD_MULTIPLE by default)");
}

// Open MPI's MPI_Comm is a pointer; mpi4py hands it over as an integer (MPI._handleof).
static_assert(sizeof(MPI_Comm) == sizeof(uintptr_t), "MPI_Comm must be a handle the size of a pointer");
MPI_Comm as_comm(uintptr_t h) { return h ? reinterpret_cast<MPI_Comm>(h) : MPI_COMM_NULL; }
}  // namespace

std::shared_ptr<Communicator> make_mpi_communicator(uintptr_t node_comm, uintptr_t leaders_comm, bool shared_memory) {
  check_mpi_ready();
  PDNG_CHECK(node_comm || !leaders_comm, "a leaders communicator needs a node communicator");
  return std::make_shared<MpiCommunicator>(MPI_COMM_WORLD, as_comm(node_comm), as_comm(leaders_comm), shared_memory);
}

std::shared_ptr<Communicator> make_mpi_group_communicator(uintptr_t group_comm) {
  check_mpi_ready();
  PDNG_CHECK(group_comm != 0, "a group communicator needs its MPI_Comm");
  return std::make_shared<MpiCommunicator>(as_comm(group_comm), MPI_COMM_NULL, MPI_COMM_NULL, false);
}

#else

bool mpi_available() { return false; }

std::shared_ptr<Communicator> make_mpi_communicator(uintptr_t, uintptr_t, bool) {
  throw Error("the CPU backend was built without Open MPI's headers: no native MPI path");
}

std::shared_ptr<Communicator> make_mpi_group_communicator(uintptr_t) {
  throw Error("the CPU backend was built without Open MPI's headers: no native MPI path");
}

#endif

}  // namespace pdng
