#include "pdng/executor.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>

namespace pdng {

namespace {
constexpr int64_t kAlignment = 64;  // cache line, and what oneDNN prefers

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string where(const NodeInfo& node) { return "while executing node '" + node.name + "' (" + node.op_type + "): "; }
}  // namespace

Executor::Executor() { comm_thread_ = std::thread([this] { comm_loop(); }); }

Executor::~Executor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  // A thread stuck in a collective whose peers died cannot be joined; the process is ending then.
  if (broken_) comm_thread_.detach();
  else comm_thread_.join();
}

void Executor::set_arena_size(int64_t nbytes) {
  arena_size_ = nbytes;
  arena_storage_.assign(static_cast<size_t>(nbytes + kAlignment), 0);
  auto address = reinterpret_cast<uintptr_t>(arena_storage_.data());
  arena_ = arena_storage_.data() + ((kAlignment - address % kAlignment) % kAlignment);
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

 private:
  ComputeThread() {
    thread_ = std::thread([this] { loop(); });
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

void Executor::run(void* const* inputs, int n_inputs) {
  ComputeThread::instance().call([&] { run_here(inputs, n_inputs); });
}

void Executor::run_here(void* const* inputs, int n_inputs) {
  PDNG_CHECK(!broken_, "this executable failed earlier with collectives in flight and cannot run again");
  PDNG_CHECK(n_inputs == num_inputs_,
             "the function takes " + std::to_string(num_inputs_) + " inputs, got " + std::to_string(n_inputs));
  if (threads_ > 0) set_num_threads(threads_);
  inputs_ = inputs;
  bind();  // inputs may move between steps; binding is a pass over pointers, no allocation
  wait_seconds_ = 0;
  comm_seconds_ = 0;
  int started = 0, waited = 0;
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
          if (started > waited) broken_ = true;
          throw Error(where(step.node) + e.what());
        }
        break;
      case StepKind::Start: {
        Collective& c = collectives_[step.collective];
        // Pack the bucket into its region (a no-op where the planner placed an input there already).
        for (size_t i = 0; c.region >= 0 && i < c.in.size(); ++i) {
          void* src = resolved_[c.in[i]];
          void* dst = resolved_[c.out[i]];
          if (src != dst) std::memcpy(dst, src, static_cast<size_t>(buffers_[c.out[i]].nbytes));
        }
        c.done = false;
        c.traced = tracing;
        c.error.clear();
        // The pack ends where the thread may begin: the trace must not show the transfer first.
        if (tracing) packed = now_seconds();
        {
          std::lock_guard<std::mutex> lock(mutex_);
          queue_.push_back(step.collective);
        }
        submitted_.fetch_add(1, std::memory_order_relaxed);
        cv_.notify_all();
        ++started;
        break;
      }
      case StepKind::Wait: {
        double t0 = now_seconds();
        wait_for(step.collective);
        wait_seconds_ += now_seconds() - t0;
        ++waited;
        const Collective& c = collectives_[step.collective];
        if (!c.error.empty()) {
          if (started > waited) broken_ = true;
          throw Error(where(c.node) + c.error);
        }
        if (check_finite_ && c.region >= 0) {
          try {
            check_finite(c);
          } catch (const std::exception& e) {
            if (started > waited) broken_ = true;
            throw Error(where(c.node) + e.what());
          }
        }
        break;
      }
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

void Executor::wait_for(int collective) {
  std::unique_lock<std::mutex> lock(mutex_);
  cv_.wait(lock, [&] { return collectives_[collective].done; });
}

void Executor::comm_loop() {
  for (;;) {
    int index;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
      if (stopping_ && queue_.empty()) return;
      index = queue_.front();
      queue_.pop_front();
    }
    Collective& c = collectives_[index];
    const bool tracing = c.traced;
    double t0 = now_seconds();
    std::string error;
    try {
      run_collective(c);
    } catch (const std::exception& e) {
      error = e.what();
    }
    double elapsed = now_seconds() - t0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      comm_seconds_ += elapsed;
      if (tracing) {
        collective_trace_[2 * index] = t0;
        collective_trace_[2 * index + 1] = t0 + elapsed;
      }
      c.error = error;
      c.done = true;
    }
    completed_.fetch_add(1, std::memory_order_relaxed);
    cv_.notify_all();
  }
}

void Executor::run_collective(Collective& c) {
  const bool one_process = !comm_ || comm_->size() == 1;
  if (c.node.op_type == "AllReduce" && c.region >= 0) {
    const std::string reduction = c.node.attrs.get_string("reduction");
    if (one_process) return;  // every reduction over one rank is the identity (avg: sum / 1)
    const TensorDesc& first = c.node.inputs.at(0);
    const std::string compress = c.node.attrs.has("compress") ? c.node.attrs.get_string("compress") : "none";
    if (compress != "none") {
      if (first.dtype == DType::Float32 && comm_->supports_compressed_allreduce(reduction, compress)) {
        int64_t count = 0;
        for (const auto& d : c.node.inputs) count += d.numel();
        comm_->compressed_allreduce(static_cast<float*>(resolved_[c.region]), count, reduction, compress);
        return;
      }
    } else if (comm_->supports_allreduce(first.dtype, reduction)) {
      int64_t count = 0;
      for (const auto& d : c.node.inputs) count += d.numel();
      comm_->allreduce(resolved_[c.region], count, first.dtype, reduction);
      return;
    }
  }
  const bool sharded = c.node.op_type == "ReduceScatter" || c.node.op_type == "AllGather";
  if (sharded && !one_process && c.region < 0 && c.in.size() == 1 && c.out.size() == 1) {
    const TensorDesc& in = c.node.inputs.at(0);
    const std::string reduction = c.node.op_type == "AllGather" ? "sum" : c.node.attrs.get_string("reduction");
    if (comm_->supports_sharded(in.dtype, reduction)) {
      if (c.node.op_type == "ReduceScatter")
        comm_->reduce_scatter(resolved_[c.in[0]], resolved_[c.out[0]], c.node.outputs.at(0).numel(), in.dtype, reduction);
      else
        comm_->allgather(resolved_[c.in[0]], resolved_[c.out[0]], in.numel(), in.dtype);
      return;
    }
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
