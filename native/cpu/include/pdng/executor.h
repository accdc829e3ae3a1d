// The executor of the native CPU backend: runs a planned function, one step at a time.
//
// The Python side plans everything (node order, arena offsets, which buffers are
// views of others) and builds an Executor through this API; run() then only binds
// input pointers and calls kernels, with no allocation. Collectives run on a
// communication thread: a Start step packs a bucket into its contiguous region
// and hands it to the thread, and the compute steps go on; a Wait step, placed by
// the planner before the first reader of the bucket, blocks until it is reduced.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "pdng/kernel.h"
#include "pdng/shared_memory.h"

namespace pdng {

// Collectives, in place on one contiguous region. Implementations: MPI (native) or a
// callback into the Python transport (any transport, any collective node).
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Whether allreduce() handles this dtype and reduction; if not, the fallback runs the node.
  virtual bool supports_allreduce(DType dtype, const std::string& reduction) const = 0;
  virtual void allreduce(void* data, int64_t count, DType dtype, const std::string& reduction) = 0;
  // The same from `in` into `out` (distinct, not overlapping): a bucket of one tensor that lives
  // outside its region (a function input) is reduced straight into the region, with no pack copy.
  virtual void allreduce(const void* in, void* out, int64_t count, DType dtype, const std::string& reduction) {
    std::memcpy(out, in, static_cast<size_t>(count) * dtype_size(dtype));
    allreduce(out, count, dtype, reduction);
  }
  // ZeRO-1's halves of an allreduce, from `in` into a separate `out`; `count` is the elements of
  // one rank's slice. A communicator that returns false from supports_sharded leaves them to the fallback.
  virtual bool supports_sharded(DType dtype, const std::string& reduction) const { return false; }
  virtual void reduce_scatter(const void* in, void* out, int64_t count, DType dtype, const std::string& reduction) {
    throw Error("this communicator has no native reduce_scatter");
  }
  virtual void allgather(const void* in, void* out, int64_t count, DType dtype) {
    throw Error("this communicator has no native allgather");
  }
  // For a communicator without supports_sharded: the pair over shared memory within the node, if it
  // can. Collective; true if done, false (on every rank alike) leaves it to the fallback.
  virtual bool sharded_over_node(bool reduce_scatter, const void* in, void* out, int64_t count, DType dtype,
                                 const std::string& reduction) {
    return false;
  }
  // How allreduce() reaches the other ranks, for logs and tests.
  virtual std::string describe() const { return "native"; }
  // Whether the executor should place its arena in memory the other ranks of the node can map
  // (shared_memory.h), so that allreduce() reduces its buckets there in place.
  virtual bool wants_shared_arena() const { return false; }

  // The compressed AllReduce of float32 (compress "bf16" or "fp16", reduction sum or avg): the scheme
  // of paddle_ngraph/distributed/compress.py, the same bits. Where not supported, the fallback runs it.
  virtual bool supports_compressed_allreduce(const std::string& reduction, const std::string& compress) const {
    return false;
  }
  virtual void compressed_allreduce(float* data, int64_t count, const std::string& reduction,
                                    const std::string& compress) {
    throw Error("this communicator has no compressed AllReduce");
  }
};

// Runs one whole collective node (any op type) given its bound inputs and outputs.
// Used for what the Communicator does not support; set by the Python side.
using CollectiveFallback = void (*)(void* context, int node_index, int n_in, void* const* in_ptrs, int n_out,
                                    void* const* out_ptrs, char* error, int error_len);

class Executor {
 public:
  Executor();
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // --- building (once per shape signature) ---------------------------------------------
  void set_arena_size(int64_t nbytes);
  int add_arena_buffer(int64_t offset, int64_t nbytes);
  int add_input_buffer(int input_index, int64_t nbytes);
  // Where new values of input `input_index` are written (a parameter updated in place): the
  // input's own memory, unless the run is given other memory for it (run's `outputs`).
  int add_output_buffer(int input_index, int64_t nbytes);
  int add_constant_buffer(const void* data, int64_t nbytes);  // copied
  int add_view_buffer(int base_buffer, int64_t byte_offset, int64_t nbytes);
  // A compute step; creates its kernel now (throws Error naming the node).
  void add_compute(const NodeInfo& node, const std::vector<int>& in, const std::vector<int>& out);
  // A collective: inputs are packed into `region` (outputs are views of it), then reduced on the
  // communication thread. Returns its index for add_wait.
  int add_collective_start(const NodeInfo& node, int node_index, const std::vector<int>& in,
                           const std::vector<int>& out, int region,
                           const std::vector<std::string>& tensor_names = {});
  void add_collective_wait(int collective);
  void set_results(const std::vector<int>& buffers);
  void set_num_inputs(int n) { num_inputs_ = n; }
  // Before the first run: moves the arena into shared memory if the communicator wants it there.
  void set_communicator(std::shared_ptr<Communicator> comm);
  // The communicator of the collectives whose "group" attribute is `group` (global ranks); those
  // of a group without one go through the fallback.
  void set_group_communicator(const std::vector<int64_t>& group, std::shared_ptr<Communicator> comm);
  std::string communicator_description() const { return comm_ ? comm_->describe() : "none"; }
  void set_fallback(CollectiveFallback fn, void* context) {
    fallback_ = fn;
    fallback_context_ = context;
  }
  // Before the kernels are added: oneDNN primitives take the thread count current at their creation.
  // After each in-place AllReduce, check its float outputs for NaN and Inf (an Error names the tensor).
  void set_check_finite(bool on) { check_finite_ = on; }
  void set_threads(int n) {
    threads_ = n;
    if (n > 0) set_num_threads(n);
  }

  // --- running --------------------------------------------------------------------------
  // Throws Error naming the node. Safe to call without the GIL, from any thread: the step runs on
  // the process's one compute thread (executor.cc, ComputeThread), or with one thread (set_threads(1))
  // on the calling thread, serialized with that thread's steps.
  // `outputs` (nullptr: the inputs): per input, the memory its output buffers resolve to in this
  // run. An elastic commit keeps the parameters' memory as it is and has the next step write the
  // updated values elsewhere, so that committing copies nothing.
  void run(void* const* inputs, int n_inputs, void* const* outputs = nullptr);
  void* result_data(int i) const;
  int64_t arena_bytes() const { return arena_size_; }
  int num_steps() const { return static_cast<int>(steps_.size()); }
  // Seconds the last run spent blocked in Wait steps, and spent in collectives on the thread:
  // the hidden share of communication is 1 - wait / comm.
  double last_wait_seconds() const { return wait_seconds_; }
  double last_comm_seconds() const { return comm_seconds_; }
  // Collectives handed to the communication thread, and finished by it, since construction. Read
  // by the stall watchdog from another thread while a step runs (relaxed atomics: counts only).
  int64_t collectives_submitted() const { return submitted_.load(std::memory_order_relaxed); }
  int64_t collectives_completed() const { return completed_.load(std::memory_order_relaxed); }
  // Per-step wall time of the last run (seconds; Wait steps included), when profiling is on.
  void set_profiling(bool on) { profiling_ = on; }
  const std::vector<double>& step_seconds() const { return step_seconds_; }
  // Timeline (PADDLE_NGRAPH_TIMELINE): when on, each run records when every step began and ended
  // on the compute thread, and when each collective's transfer began and ended on the
  // communication thread. Seconds of std::chrono::steady_clock (CLOCK_MONOTONIC: Python's
  // time.monotonic() reads the same clock). Off, the cost is one bool test per step.
  void set_tracing(bool on) { tracing_ = on; }
  // [begin0, end0, begin1, end1, ...] per step of the last run, in step order.
  const std::vector<double>& step_trace() const { return step_trace_; }
  // [begin, end] of the transfer per collective (add_collective_start order) of the last run.
  const std::vector<double>& collective_trace() const { return collective_trace_; }

 private:
  enum class BufferKind { Arena, Input, Output, Constant, View };
  struct Buffer {
    BufferKind kind;
    int64_t offset = 0;  // arena offset or byte offset into `base`
    int64_t nbytes = 0;
    int index = -1;      // input index or base buffer
    std::vector<uint8_t> storage;
  };
  struct Collective {
    NodeInfo node;
    int node_index;
    std::vector<int> in, out;
    int region;
    std::vector<std::string> tensor_names;  // one per output, for error messages
    // Fixed at build, so that running it allocates nothing: the reduction and compress attributes,
    // the elements of an in-place bucket, and whether compute steps lie between its Start and its
    // Wait (if none, the thread could not overlap it with anything: the compute thread runs it).
    std::string reduction, compress;
    int64_t count = 0;
    bool overlaps = true;
    // The node's "group" attribute (empty: every rank), served by its group communicator if one
    // is set, else by the fallback; an AllGather along an axis other than 0 always by the fallback.
    std::vector<int64_t> group;
    bool gathers_other_axis = false;
    // Written by whichever thread runs it (under mutex_), read after done.
    bool done = false;
    bool traced = false;  // set by the Start step: the thread records its transfer's times
    // Set by the Start step when the bucket's one input lies outside its region (a function input):
    // the reduction reads it there instead of from a packed copy.
    const void* unpacked = nullptr;
    std::string error;
  };
  enum class StepKind { Compute, Start, Wait };
  struct Step {
    StepKind kind;
    NodeInfo node;  // for Compute
    std::unique_ptr<Kernel> kernel;
    std::vector<int> in, out;
    int collective = -1;
    std::vector<Tensor> in_tensors, out_tensors;  // prepared once, data rebound per run
  };

  void run_here(void* const* inputs, int n_inputs, void* const* outputs);
  // Collectives of one run: started (queued) and waited for; a failure with some started and not
  // waited for leaves them in flight (fail_in_flight).
  struct InFlight {
    int started = 0, waited = 0;
    bool pending() const { return started > waited; }
  };
  // Packs collective ``index``'s bucket and queues it; returns when the pack ended (0 untraced).
  double start_collective(int index, bool tracing);
  // Waits for collective ``index`` and raises its error (or a non-finite value's, with check_finite).
  void finish_collective(int index, InFlight& flight);
  void* resolve(int buffer) const;
  void bind();
  void comm_loop();
  // Runs the collective at the front of the queue on the calling thread; mutex_ held on entry and exit.
  void run_front(std::unique_lock<std::mutex>& lock, bool on_comm_thread);
  void run_collective(Collective& c);
  // The native communicator of `c` (of its group, or of every rank), or nullptr: the fallback runs it.
  Communicator* native_communicator(const Collective& c) const;
  void wait_for(int collective);
  // A run fails with collectives queued or running: no further runs; the communication thread
  // still runs what is queued, as the other ranks expect.
  void fail_in_flight();

  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, FreeDeleter> arena_storage_;
  std::unique_ptr<SharedAllocation> shared_arena_;  // instead of arena_storage_, for the communicator
  uint8_t* arena_ = nullptr;
  int64_t arena_size_ = 0;
  std::vector<Buffer> buffers_;
  std::vector<void*> resolved_;
  std::vector<Step> steps_;
  std::vector<Collective> collectives_;
  std::vector<int> results_;
  int num_inputs_ = 0;
  void* const* inputs_ = nullptr;
  void* const* outputs_ = nullptr;
  int threads_ = 0;

  std::shared_ptr<Communicator> comm_;
  std::map<std::vector<int64_t>, std::shared_ptr<Communicator>> group_comms_;
  CollectiveFallback fallback_ = nullptr;
  void* fallback_context_ = nullptr;

  std::thread comm_thread_;
  std::mutex mutex_;
  // Two conditions, so that finishing a collective wakes only the thread that needs it: work_cv_
  // wakes the communication thread (work queued, stopping), done_cv_ the compute thread at a Wait.
  std::condition_variable work_cv_, done_cv_;
  std::deque<int> queue_;
  // A collective is being run (by the communication thread or by the compute thread at a Wait).
  // Collectives run one at a time, in queue order: the same order on every rank.
  bool running_ = false;
  int waiting_for_ = -1;  // the collective the compute thread sleeps on in a Wait, if any
  bool stopping_ = false;
  bool broken_ = false;  // a run failed with collectives in flight: refuse further runs
  double wait_seconds_ = 0, comm_seconds_ = 0;
  std::atomic<int64_t> submitted_{0}, completed_{0};
  bool profiling_ = false;
  bool check_finite_ = false;
  void check_finite(const Collective& c) const;
  std::vector<double> step_seconds_;
  bool tracing_ = false;
  // Sized at the start of a traced run (no allocation after the first); the communication thread
  // writes a collective's pair before marking it done, the compute thread reads after its Wait.
  std::vector<double> step_trace_, collective_trace_;
};

}  // namespace pdng
