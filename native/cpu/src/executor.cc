#include "pdng/executor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>

#include <pthread.h>
#include <sys/mman.h>

#ifdef _OPENMP
#include <omp.h>
#endif

namespace pdng {

namespace {
constexpr int64_t kAlignment = 64;  // cache line, and what oneDNN prefers
constexpr int64_t kHugePage = int64_t{2} << 20;
constexpr int64_t kHugeArena = int64_t{4} << 20;

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string where(const NodeInfo& node) { return "while executing node '" + node.name + "' (" + node.op_type + "): "; }

// Names the calling thread (at most 15 characters), so that per-thread CPU time can be told apart
// in /proc/self/task/*/comm (paddle_ngraph/backends/cpu/thread_times.py) and in top -H or perf.
// Named by the thread that starts it, before anyone can look: a thread that names itself may not have
// been scheduled yet when /proc/self/task is read (thread_times.py, the per-thread CPU report).
void name_thread(std::thread& thread, const char* name) { pthread_setname_np(thread.native_handle(), name); }
}  // namespace

Executor::Executor() {
  comm_thread_ = std::thread([this] { comm_loop(); });
  name_thread(comm_thread_, "pdng-comm");
}

Executor::~Executor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_cv_.notify_all();
  // A thread stuck in a collective whose peers died cannot be joined; the process is ending then.
  if (broken_) comm_thread_.detach();
  else comm_thread_.join();
}

void Executor::set_arena_size(int64_t nbytes) {
  arena_size_ = nbytes;
  // Large arenas on transparent huge pages, as NumPy does for its arrays from 4 MB (THP is often
  // "madvise" only): on 4 KB pages a 16 MB AllReduce bucket ran 1.2-1.4x slower than mpi4py on a
  // NumPy array (tools/bench_allreduce.py, 2 ranks), and the kernels pay the same TLB misses.
  const bool huge = nbytes >= kHugeArena;
  const size_t alignment = huge ? kHugePage : kAlignment;
  const size_t size = (static_cast<size_t>(std::max<int64_t>(nbytes, 1)) + alignment - 1) / alignment * alignment;
  void* memory = nullptr;
  PDNG_CHECK(posix_memalign(&memory, alignment, size) == 0,
             "cannot allocate an arena of " + std::to_string(nbytes) + " bytes");
  arena_storage_.reset(static_cast<uint8_t*>(memory));
#ifdef MADV_HUGEPAGE
  if (huge) madvise(memory, size, MADV_HUGEPAGE);  // a hint: without THP it does nothing
#endif
  std::memset(memory, 0, size);
  arena_ = arena_storage_.get();
}

void Executor::set_communicator(std::shared_ptr<Communicator> comm) {
  comm_ = std::move(comm);
  if (comm_ && comm_->wants_shared_arena() && !shared_arena_) {
    // Nothing has run yet: the arena holds no values, and buffers resolve against arena_ at each run.
    shared_arena_ = std::make_unique<SharedAllocation>(arena_size_);
#ifdef MADV_HUGEPAGE
    // As for the private arena (a hint: shared memory gets huge pages only where shmem_enabled allows).
    if (arena_size_ >= kHugeArena) madvise(shared_arena_->data(), static_cast<size_t>(shared_arena_->size()), MADV_HUGEPAGE);
#endif
    arena_ = shared_arena_->data();
    arena_storage_.reset();
  }
}

int Executor::add_arena_buffer(int64_t offset, int64_t nbytes) {
  PDNG_CHECK(offset >= 0 && offset + nbytes <= arena_size_,
             "arena buffer [" + std::to_string(offset) + ", +" + std::to_string(nbytes) + ") outside the arena of " +
                 std::to_string(arena_size_) + " bytes");
  buffers_.push_back({BufferKind::Arena, offset, nbytes, -1, {}});
  return static_cast<int>(buffers_.size()) - 1;
}

int Executor::add_input_buffer(int input_index, int64_t nbytes) {
  buffers_.push_back({BufferKind::Input, 0, nbytes, input_index, {}});
  return static_cast<int>(buffers_.size()) - 1;
}

int Executor::add_output_buffer(int input_index, int64_t nbytes) {
  buffers_.push_back({BufferKind::Output, 0, nbytes, input_index, {}});
  return static_cast<int>(buffers_.size()) - 1;
}

int Executor::add_constant_buffer(const void* data, int64_t nbytes) {
  Buffer b{BufferKind::Constant, 0, nbytes, -1, {}};
  b.storage.resize(static_cast<size_t>(nbytes) + kAlignment);
  buffers_.push_back(std::move(b));
  const int index = static_cast<int>(buffers_.size()) - 1;
  std::memcpy(resolve(index), data, static_cast<size_t>(nbytes));  // at the aligned address resolve() gives
  return index;
}

int Executor::add_view_buffer(int base, int64_t byte_offset, int64_t nbytes) {
  PDNG_CHECK(base >= 0 && base < static_cast<int>(buffers_.size()), "view of an unknown buffer");
  PDNG_CHECK(byte_offset + nbytes <= buffers_[base].nbytes, "view outside its base buffer");
  buffers_.push_back({BufferKind::View, byte_offset, nbytes, base, {}});
  return static_cast<int>(buffers_.size()) - 1;
}

void Executor::add_compute(const NodeInfo& node, const std::vector<int>& in, const std::vector<int>& out) {
  Step step;
  step.kind = StepKind::Compute;
  step.node = node;
  try {
    step.kernel = create_kernel(node);
  } catch (const std::exception& e) {
    throw Error("while compiling node '" + node.name + "' (" + node.op_type + "): " + e.what());
  }
  step.in = in;
  step.out = out;
  for (size_t i = 0; i < in.size(); ++i) step.in_tensors.push_back({nullptr, node.inputs.at(i)});
  for (size_t i = 0; i < out.size(); ++i) step.out_tensors.push_back({nullptr, node.outputs.at(i)});
  steps_.push_back(std::move(step));
}

int Executor::add_collective_start(const NodeInfo& node, int node_index, const std::vector<int>& in,
                                   const std::vector<int>& out, int region,
                                   const std::vector<std::string>& tensor_names) {
  Collective c;
  c.tensor_names = tensor_names;
  c.reduction = node.attrs.has("reduction") ? node.attrs.get_string("reduction") : "sum";
  c.compress = node.attrs.has("compress") ? node.attrs.get_string("compress") : "none";
  for (const auto& d : node.inputs) c.count += d.numel();
  if (node.attrs.has("group")) c.group = node.attrs.get_ints("group");
  c.gathers_other_axis = node.attrs.has("axis") && node.attrs.get_ints("axis").at(0) != 0;
  c.node = node;
  c.node_index = node_index;
  c.in = in;
  c.out = out;
  c.region = region;
  collectives_.push_back(std::move(c));
  Step step;
  step.kind = StepKind::Start;
  step.collective = static_cast<int>(collectives_.size()) - 1;
  steps_.push_back(std::move(step));
  return step.collective;
}

void Executor::add_collective_wait(int collective) {
  // The steps between the Start and this Wait are all added by now.
  bool overlaps = false;
  for (auto it = steps_.rbegin(); it != steps_.rend(); ++it) {
    if (it->kind == StepKind::Start && it->collective == collective) break;
    overlaps = overlaps || it->kind == StepKind::Compute;
  }
  collectives_.at(collective).overlaps = overlaps;
  Step step;
  step.kind = StepKind::Wait;
  step.collective = collective;
  steps_.push_back(std::move(step));
}

void Executor::set_results(const std::vector<int>& buffers) { results_ = buffers; }

void* Executor::resolve(int buffer) const {
  const Buffer& b = buffers_.at(buffer);
  switch (b.kind) {
    case BufferKind::Arena: return arena_ + b.offset;
    case BufferKind::Input: return inputs_[b.index];
    case BufferKind::Output: return outputs_[b.index];
    case BufferKind::Constant: {
      auto address = reinterpret_cast<uintptr_t>(b.storage.data());
      return const_cast<uint8_t*>(b.storage.data()) + ((kAlignment - address % kAlignment) % kAlignment);
    }
    case BufferKind::View: return static_cast<uint8_t*>(resolve(b.index)) + b.offset;
  }
  return nullptr;
}

void Executor::bind() {
  resolved_.resize(buffers_.size());
  for (size_t i = 0; i < buffers_.size(); ++i) resolved_[i] = resolve(static_cast<int>(i));
  for (auto& step : steps_) {
    for (size_t i = 0; i < step.in.size(); ++i) step.in_tensors[i].data = resolved_[step.in[i]];
    for (size_t i = 0; i < step.out.size(); ++i) step.out_tensors[i].data = resolved_[step.out[i]];
  }
}

void* Executor::result_data(int i) const { return resolved_.at(results_.at(i)); }

namespace {

// Every step of every executor runs on this one thread. Callers come from anywhere: Paddle's
// executor calls its kernels from a pool of worker threads, and an OpenMP runtime keeps one team
// of workers per calling thread, each spinning after its parallel regions: four callers meant four
// teams on two cores and steps 1.8x slower (measured). One caller, one team.
class ComputeThread {
 public:
  static ComputeThread& instance() {
    static ComputeThread* thread = new ComputeThread();  // never destroyed: it may outlive statics
    return *thread;
  }

  // Runs job on the compute thread and waits; rethrows what it threw.
  void call(const std::function<void()>& job) {
    if (std::this_thread::get_id() == thread_.get_id()) return job();  // already on it
    std::unique_lock<std::mutex> caller(call_mutex_);  // one job at a time
    std::exception_ptr error;
    bool done = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job_ = [&] {
        try {
          job();
        } catch (...) {
          error = std::current_exception();
        }
      };
      done_ = &done;
    }
    cv_.notify_all();
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return done; });
    }
    if (error) std::rethrow_exception(error);
  }

  // Runs job on the calling thread, serialized with the compute thread's jobs, with OpenMP limited to
  // one thread there (restored after): a one-thread step creates no OpenMP team, so the reason for
  // the compute thread does not apply, and skipping its two hand-offs saves 10-20 us per step on a
  // busy machine (tools/bench_allreduce.py, 2 ranks).
  void call_here(const std::function<void()>& job) {
    if (std::this_thread::get_id() == thread_.get_id()) return job();
    std::lock_guard<std::mutex> caller(call_mutex_);
#ifdef _OPENMP
    const int saved = omp_get_max_threads();
    omp_set_num_threads(1);
    struct Restore {
      int n;
      ~Restore() { omp_set_num_threads(n); }
    } restore{saved};
#endif
    job();
  }

 private:
  ComputeThread() {
    thread_ = std::thread([this] { loop(); });
    name_thread(thread_, "pdng-compute");
    thread_.detach();
  }

  void loop() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return static_cast<bool>(job_); });
        job = std::move(job_);
        job_ = nullptr;
      }
      job();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        *done_ = true;
      }
      cv_.notify_all();
    }
  }

  std::thread thread_;
  std::mutex call_mutex_, mutex_;
  std::condition_variable cv_;
  std::function<void()> job_;
  bool* done_ = nullptr;
};

}  // namespace

void Executor::run(void* const* inputs, int n_inputs, void* const* outputs) {
  if (threads_ == 1) ComputeThread::instance().call_here([&] { run_here(inputs, n_inputs, outputs); });
  else ComputeThread::instance().call([&] { run_here(inputs, n_inputs, outputs); });
}

void Executor::run_here(void* const* inputs, int n_inputs, void* const* outputs) {
  PDNG_CHECK(!broken_, "this executable failed earlier with collectives in flight and cannot run again");
  PDNG_CHECK(n_inputs == num_inputs_,
             "the function takes " + std::to_string(num_inputs_) + " inputs, got " + std::to_string(n_inputs));
  if (threads_ > 0) set_num_threads(threads_);
  inputs_ = inputs;
  outputs_ = outputs != nullptr ? outputs : inputs;
  bind();  // inputs may move between steps; binding is a pass over pointers, no allocation
  wait_seconds_ = 0;
  comm_seconds_ = 0;
  InFlight flight;
  if (profiling_) step_seconds_.assign(steps_.size(), 0.0);
  const bool tracing = tracing_;  // fixed for the whole run: the communication thread reads it too
  if (tracing) {
    step_trace_.assign(2 * steps_.size(), 0.0);
    collective_trace_.assign(2 * collectives_.size(), 0.0);
  }
  for (size_t index = 0; index < steps_.size(); ++index) {
    auto& step = steps_[index];
    const double step_start = profiling_ || tracing ? now_seconds() : 0.0;
    double packed = 0.0;  // a Start step's end in the trace
    switch (step.kind) {
      case StepKind::Compute:
        try {
          step.kernel->run(step.in_tensors, step.out_tensors);
        } catch (const std::exception& e) {
          if (flight.pending()) fail_in_flight();
          throw Error(where(step.node) + e.what());
        }
        break;
      case StepKind::Start:
        packed = start_collective(step.collective, tracing);
        ++flight.started;
        break;
      case StepKind::Wait:
        finish_collective(step.collective, flight);
        break;
    }
    if (profiling_ || tracing) {
      const double step_end = now_seconds();
      if (profiling_) step_seconds_[index] = step_end - step_start;
      if (tracing) {
        step_trace_[2 * index] = step_start;
        step_trace_[2 * index + 1] = step.kind == StepKind::Start ? packed : step_end;
      }
    }
  }
}

double Executor::start_collective(int index, bool tracing) {
  Collective& c = collectives_[index];
  // Pack the bucket into its region (a no-op where the planner placed an input there already).
  // A lone uncompressed input elsewhere is not copied: the AllReduce reads it in place.
  c.unpacked = nullptr;
  if (c.region >= 0 && c.in.size() == 1 && c.compress == "none" && c.node.op_type == "AllReduce" &&
      native_communicator(c) != nullptr &&
      resolved_[c.in[0]] != resolved_[c.out[0]]) {
    c.unpacked = resolved_[c.in[0]];
  } else {
    for (size_t i = 0; c.region >= 0 && i < c.in.size(); ++i) {
      void* src = resolved_[c.in[i]];
      void* dst = resolved_[c.out[i]];
      if (src != dst) std::memcpy(dst, src, static_cast<size_t>(buffers_[c.out[i]].nbytes));
    }
  }
  c.done = false;
  c.traced = tracing;
  c.error.clear();
  // The pack ends where the thread may begin: the trace must not show the transfer first.
  const double packed = tracing ? now_seconds() : 0.0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(index);
  }
  submitted_.fetch_add(1, std::memory_order_relaxed);
  // Nothing to overlap with (its Wait comes before any compute): the compute thread runs it at
  // the Wait, and waking the communication thread would only cost a wake-up on a core that
  // another rank may be computing on (unless that thread is busy: it then takes it in turn).
  if (c.overlaps) work_cv_.notify_one();
  return packed;
}

void Executor::finish_collective(int index, InFlight& flight) {
  double t0 = now_seconds();
  wait_for(index);
  wait_seconds_ += now_seconds() - t0;
  ++flight.waited;
  const Collective& c = collectives_[index];
  if (!c.error.empty()) {
    if (flight.pending()) fail_in_flight();
    throw Error(where(c.node) + c.error);
  }
  if (check_finite_ && c.region >= 0) {
    try {
      check_finite(c);
    } catch (const std::exception& e) {
      if (flight.pending()) fail_in_flight();
      throw Error(where(c.node) + e.what());
    }
  }
}

namespace {
template <class T>
int64_t first_non_finite(const T* p, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isfinite(p[i])) return i;
  return -1;
}
}  // namespace

void Executor::check_finite(const Collective& c) const {
  for (size_t k = 0; k < c.out.size(); ++k) {
    const TensorDesc& d = c.node.outputs.at(k);
    const void* data = resolved_[c.out[k]];
    int64_t bad = -1;
    double value = 0;
    if (d.dtype == DType::Float32) {
      bad = first_non_finite(static_cast<const float*>(data), d.numel());
      if (bad >= 0) value = static_cast<const float*>(data)[bad];
    } else if (d.dtype == DType::Float64) {
      bad = first_non_finite(static_cast<const double*>(data), d.numel());
      if (bad >= 0) value = static_cast<const double*>(data)[bad];
    }
    if (bad >= 0) {
      const std::string name = k < c.tensor_names.size() ? c.tensor_names[k] : "output " + std::to_string(k);
      throw Error("non-finite value " + std::to_string(value) + " in '" + name + "' (element " + std::to_string(bad) +
                  " of " + d.str() + ") after AllReduce of bucket '" + c.node.attrs.get_string("bucket") + "'");
    }
  }
}

void Executor::fail_in_flight() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    broken_ = true;
  }
  work_cv_.notify_one();
}

// Blocks (no spinning: the core may be another rank's) until the collective is done. If none is
// running and some are queued, the compute thread runs the front one itself instead of waking the
// communication thread and sleeping: one hand-off less on the critical path, and the queue order,
// the same on every rank, is kept. Collectives thus come from two threads, never at once (MPI needs
// MPI_THREAD_SERIALIZED, which make_mpi_communicator checks).
void Executor::wait_for(int collective) {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!collectives_[collective].done) {
    if (!running_ && !queue_.empty()) {
      run_front(lock, false);
    } else {
      waiting_for_ = collective;
      done_cv_.wait(lock);
      waiting_for_ = -1;
    }
  }
  // Later collectives queued while this thread ran one: the communication thread, told of them at
  // their Start, found it busy and went back to sleep.
  if (!running_ && !queue_.empty()) work_cv_.notify_one();
}

void Executor::run_front(std::unique_lock<std::mutex>& lock, bool on_comm_thread) {
  const int index = queue_.front();
  queue_.pop_front();
  running_ = true;
  lock.unlock();
  Collective& c = collectives_[index];
  const bool tracing = c.traced;
  const double t0 = now_seconds();
  std::string error;
  try {
    run_collective(c);
  } catch (const std::exception& e) {
    error = e.what();
  }
  const double elapsed = now_seconds() - t0;
  lock.lock();
  comm_seconds_ += elapsed;
  if (tracing) {
    collective_trace_[2 * index] = t0;
    collective_trace_[2 * index + 1] = t0 + elapsed;
  }
  c.error = error;
  c.done = true;
  running_ = false;
  completed_.fetch_add(1, std::memory_order_relaxed);
  // Only the collective the compute thread waits for wakes it: the queue is FIFO, so before that one
  // the communication thread goes on with the next by itself.
  if (on_comm_thread && index == waiting_for_) done_cv_.notify_one();
}

void Executor::comm_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    work_cv_.wait(lock, [&] { return stopping_ || (!running_ && !queue_.empty()); });
    if (!running_ && !queue_.empty()) run_front(lock, true);
    else if (stopping_) return;
  }
}

Communicator* Executor::native_communicator(const Collective& c) const {
  if (c.group.empty()) return comm_.get();
  auto found = group_comms_.find(c.group);
  return found == group_comms_.end() ? nullptr : found->second.get();
}

void Executor::set_group_communicator(const std::vector<int64_t>& group, std::shared_ptr<Communicator> comm) {
  PDNG_CHECK(!group.empty(), "a group communicator needs the group's ranks");
  group_comms_[group] = std::move(comm);
}

void Executor::run_collective(Collective& c) {
  Communicator* comm = native_communicator(c);
  // Without a native communicator (the group's, or the job's for a transport without a native link)
  // the fallback (the transport, in Python) reduces: only it knows how many ranks there are. Taking
  // "no communicator" for one process would skip the collective, silently.
  // Neither a communicator nor a fallback: there is no transport, hence one process.
  const bool via_fallback = c.gathers_other_axis || (comm == nullptr && fallback_ != nullptr);
  const bool one_process = comm == nullptr ? fallback_ == nullptr : comm->size() == 1;
  if (via_fallback) {
    // Packed into its region by the Start step (never left in place): the fallback below reads it.
  } else if (c.node.op_type == "AllReduce" && c.region >= 0) {
    const TensorDesc& first = c.node.inputs.at(0);
    if (c.unpacked != nullptr) {
      if (!one_process && comm->supports_allreduce(first.dtype, c.reduction)) {
        comm->allreduce(c.unpacked, resolved_[c.region], c.count, first.dtype, c.reduction);
        return;
      }
      // Everything else reads the packed region.
      std::memcpy(resolved_[c.region], c.unpacked, static_cast<size_t>(c.count) * dtype_size(first.dtype));
    }
    if (one_process) return;  // every reduction over one rank is the identity (avg: sum / 1)
    if (c.compress != "none") {
      if (first.dtype == DType::Float32 && comm->supports_compressed_allreduce(c.reduction, c.compress)) {
        comm->compressed_allreduce(static_cast<float*>(resolved_[c.region]), c.count, c.reduction, c.compress);
        return;
      }
    } else if (comm->supports_allreduce(first.dtype, c.reduction)) {
      comm->allreduce(resolved_[c.region], c.count, first.dtype, c.reduction);
      return;
    }
  }
  const bool sharded = c.node.op_type == "ReduceScatter" || c.node.op_type == "AllGather";
  if (sharded && !via_fallback && !one_process && c.region < 0 && c.in.size() == 1 && c.out.size() == 1) {
    const TensorDesc& in = c.node.inputs.at(0);
    const std::string& reduction = c.reduction;  // "sum" for AllGather, which has none
    if (comm->supports_sharded(in.dtype, reduction)) {
      if (c.node.op_type == "ReduceScatter")
        comm->reduce_scatter(resolved_[c.in[0]], resolved_[c.out[0]], c.node.outputs.at(0).numel(), in.dtype, reduction);
      else
        comm->allgather(resolved_[c.in[0]], resolved_[c.out[0]], in.numel(), in.dtype);
      return;
    }
    const bool scatter = c.node.op_type == "ReduceScatter";
    const int64_t count = scatter ? c.node.outputs.at(0).numel() : in.numel();
    if (comm->sharded_over_node(scatter, resolved_[c.in[0]], resolved_[c.out[0]], count, in.dtype, reduction)) return;
  }
  PDNG_CHECK(fallback_ != nullptr, "no communicator can run collective " + c.node.op_type);
  std::vector<void*> in(c.in.size()), out(c.out.size());
  for (size_t i = 0; i < c.out.size(); ++i) out[i] = resolved_[c.out[i]];
  // With a region, the outputs already hold the packed inputs: the fallback reads and writes them.
  for (size_t i = 0; i < c.in.size(); ++i) in[i] = c.region >= 0 ? out[i] : resolved_[c.in[i]];
  char error[4096] = {0};
  fallback_(fallback_context_, c.node_index, static_cast<int>(in.size()), in.data(), static_cast<int>(out.size()),
            out.data(), error, sizeof(error) - 1);
  if (error[0]) throw Error(error);
}

}  // namespace pdng
