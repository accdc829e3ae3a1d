#include "pdng/node_allreduce.h"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <fstream>
#include <random>

#include <immintrin.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

namespace pdng {

namespace {

constexpr uint64_t kMagic = 0x70646e672d6e6f64ULL;  // "pdng-nod"
constexpr int64_t kChunkBytes = 64 << 10;  // a chunk: what one rank reduces at a time
constexpr int kMessageBytes = 1024;
// Spinning before sleeping: long enough for a peer that is running to arrive, short enough not to
// matter to a compute thread that needs this core.
constexpr auto kSpin = std::chrono::microseconds(20);
constexpr long kSleepNanos = 100 * 1000 * 1000;  // between checks that the peers are alive

enum Reduction : int32_t { kSum = 0, kAvg = 1, kProd = 2, kMin = 3, kMax = 4, kUnknown = -1 };

Reduction reduction_code(const std::string& r) {
  if (r == "sum") return kSum;
  if (r == "avg") return kAvg;
  if (r == "prod") return kProd;
  if (r == "min") return kMin;
  if (r == "max") return kMax;
  return kUnknown;
}

const char* reduction_name(int32_t code) {
  static const char* names[] = {"sum", "avg", "prod", "min", "max"};
  return code >= 0 && code <= kMax ? names[code] : "?";
}

// m elements: reduced over the n sources in rank order (each from `src_offset` elements in), then
// written to each of the `ndst` destinations (from `dst_offset`). In blocks that stay in L1, so that
// each buffer is read and written once. An AllReduce chunk has every rank's buffer as source and
// destination; a ReduceScatter chunk only its owner's shard as destination.
template <class T>
void reduce_range(uint8_t* const* src, int n, int64_t src_offset, uint8_t* const* dst, int ndst, int64_t dst_offset,
                  int64_t count, int32_t reduction) {
  constexpr int64_t kBlock = 2048 / sizeof(T) * 4;  // 8 KB
  T block[kBlock];
  for (int64_t b = 0; b < count; b += kBlock) {
    const int64_t m = std::min(kBlock, count - b);
    std::memcpy(block, reinterpret_cast<const T*>(src[0]) + src_offset + b, static_cast<size_t>(m) * sizeof(T));
    for (int r = 1; r < n; ++r) {
      const T* x = reinterpret_cast<const T*>(src[r]) + src_offset + b;
      switch (reduction) {
        case kSum:
        case kAvg:
          for (int64_t i = 0; i < m; ++i) block[i] = block[i] + x[i];
          break;
        case kProd:
          for (int64_t i = 0; i < m; ++i) block[i] = block[i] * x[i];
          break;
        case kMin:
          for (int64_t i = 0; i < m; ++i) block[i] = x[i] < block[i] ? x[i] : block[i];
          break;
        case kMax:
          for (int64_t i = 0; i < m; ++i) block[i] = x[i] > block[i] ? x[i] : block[i];
          break;
      }
    }
    if (reduction == kAvg) {  // as MpiCommunicator's divide: sum / size, the same bits
      const T size = static_cast<T>(n);
      for (int64_t i = 0; i < m; ++i) block[i] = block[i] / size;
    }
    for (int r = 0; r < ndst; ++r)
      std::memcpy(reinterpret_cast<T*>(dst[r]) + dst_offset + b, block, static_cast<size_t>(m) * sizeof(T));
  }
}

void reduce_range(DType dtype, uint8_t* const* src, int n, int64_t src_offset, uint8_t* const* dst, int ndst,
                  int64_t dst_offset, int64_t count, int32_t reduction) {
  switch (dtype) {
    case DType::Float32: return reduce_range<float>(src, n, src_offset, dst, ndst, dst_offset, count, reduction);
    case DType::Float64: return reduce_range<double>(src, n, src_offset, dst, ndst, dst_offset, count, reduction);
    case DType::Int32: return reduce_range<int32_t>(src, n, src_offset, dst, ndst, dst_offset, count, reduction);
    case DType::Int64: return reduce_range<int64_t>(src, n, src_offset, dst, ndst, dst_offset, count, reduction);
    default: throw Error(std::string("no shared-memory collective of ") + dtype_name(dtype));
  }
}

const char* kind_name(int32_t kind) {
  static const char* names[] = {"AllReduce", "ReduceScatter", "AllGather"};
  return kind >= 0 && kind <= 2 ? names[kind] : "?";
}

std::atomic<int64_t> collectives_run[3];  // by kind, over shared memory, in this process

uint64_t boot_id_hash() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  return std::hash<std::string>()(id);
}

// Whether the process is gone (or a zombie waiting to be reaped by its launcher).
bool process_ended(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) return true;
  std::string line;
  std::getline(in, line);
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  const char state = line[paren + 2];
  return state == 'Z' || state == 'X';
}

// What each rank tells the others at setup.
struct Record {
  int32_t pid;
  int32_t fd;
  uint64_t inode;
  int64_t size;
  uint64_t token;
  uint64_t boot;
  int32_t wanted;
  int32_t padding;
};

struct Verdict {
  int32_t ok;
  char message[256];
};

}  // namespace

struct NodeAllreduce::Control {
  uint64_t magic;
  uint64_t token;  // the first two words of every rank's probe too
  int32_t size;
  alignas(64) std::atomic<uint64_t> arrived;      // arrivals over all calls: call k (from 1) is complete at k * size
  alignas(64) std::atomic<uint64_t> next_chunk;   // chunks taken, over all calls
  alignas(64) std::atomic<uint64_t> chunks_done;  // chunks finished, over all calls
  alignas(64) std::atomic<uint32_t> epoch;        // the futex word: bumped when a wait may be over
  std::atomic<uint32_t> sleepers;                 // waiters in futex_wait: wake() skips the syscall if none
  alignas(64) std::atomic<int32_t> aborted;       // 0, or 1 + the rank that aborted
  char message[kMessageBytes];
};

struct NodeAllreduce::Slot {
  alignas(64) std::atomic<uint64_t> call;  // written last: the call these fields describe
  SharedLocation in, out;                  // the same for an AllReduce, which runs in place
  int64_t count;
  int32_t kind;
  int32_t dtype;
  int32_t reduction;
  int32_t shareable;
};

static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "the control block's atomics must be lock-free to be shared between processes");

int64_t NodeAllreduce::control_bytes(int size) {
  const int64_t header = (static_cast<int64_t>(sizeof(Control)) + 63) / 64 * 64;
  return header + 2 * size * static_cast<int64_t>(sizeof(Slot));
}

NodeAllreduce::Slot& NodeAllreduce::slot(uint64_t call, int rank) const {
  const int64_t header = (static_cast<int64_t>(sizeof(Control)) + 63) / 64 * 64;
  auto* slots = reinterpret_cast<Slot*>(reinterpret_cast<uint8_t*>(control_) + header);
  return slots[(call % 2) * size_ + rank];
}

std::unique_ptr<NodeAllreduce> NodeAllreduce::setup(int rank, int size, bool wanted, const Gather& gather,
                                                    std::string* why) {
  std::unique_ptr<NodeAllreduce> self(new NodeAllreduce());
  self->rank_ = rank;
  self->size_ = size;
  std::random_device random;
  const uint64_t token = (static_cast<uint64_t>(random()) << 32) ^ random() ^ static_cast<uint64_t>(getpid());
  Record mine{getpid(), -1, 0, 0, token, boot_id_hash(), wanted ? 1 : 0, 0};
  Verdict verdict{1, {0}};
  try {
    // Rank 0's file is the control block; the others' a probe that proves they can be mapped.
    self->own_ = std::make_unique<SharedAllocation>(rank == 0 ? control_bytes(size) : 4096, "pdng-node");
    auto* header = reinterpret_cast<uint64_t*>(self->own_->data());
    header[0] = kMagic;
    header[1] = token;
    if (rank == 0) reinterpret_cast<Control*>(self->own_->data())->size = size;
    mine.fd = self->own_->fd();
    mine.inode = self->own_->inode();
    mine.size = self->own_->size();
  } catch (const std::exception& e) {
    verdict.ok = 0;
    std::snprintf(verdict.message, sizeof(verdict.message), "rank %d cannot make shared memory: %s", rank, e.what());
  }
  std::vector<Record> all(size);
  gather(&mine, all.data(), sizeof(Record));
  for (int q = 0; q < size && verdict.ok; ++q) {
    if (!all[q].wanted) {
      verdict.ok = 0;
      std::snprintf(verdict.message, sizeof(verdict.message), "switched off on rank %d", q);
    } else if (all[q].boot != all[0].boot) {
      verdict.ok = 0;
      std::snprintf(verdict.message, sizeof(verdict.message), "ranks 0 and %d run on different hosts", q);
    } else if (all[q].fd < 0) {
      verdict.ok = 0;
      std::snprintf(verdict.message, sizeof(verdict.message), "rank %d has no shared memory", q);
    }
  }
  if (verdict.ok) {
    PeerMappings probes;
    for (int q = 0; q < size && verdict.ok; ++q) {
      if (q == rank) continue;
      try {
        const auto* header = reinterpret_cast<const uint64_t*>(probes.map(all[q].pid, all[q].fd, all[q].inode, all[q].size));
        PDNG_CHECK(header[0] == kMagic && header[1] == all[q].token, "its shared memory holds something else");
      } catch (const std::exception& e) {
        verdict.ok = 0;
        std::snprintf(verdict.message, sizeof(verdict.message), "rank %d cannot map rank %d's memory: %s", rank, q,
                      e.what());
      }
    }
  }
  std::vector<Verdict> verdicts(size);
  gather(&verdict, verdicts.data(), sizeof(Verdict));
  for (const Verdict& v : verdicts) {
    if (!v.ok) {
      *why = v.message;  // the lowest failing rank's: the same on every rank
      return nullptr;
    }
  }
  for (const Record& r : all) self->pids_.push_back(r.pid);
  if (rank == 0) {
    self->control_ = reinterpret_cast<Control*>(self->own_->data());
  } else {
    self->control_ = reinterpret_cast<Control*>(self->control_mapping_.map(all[0].pid, all[0].fd, all[0].inode, all[0].size));
    self->own_.reset();  // the probe has served
  }
  self->inputs_.resize(size);
  self->outputs_.resize(size);
  why->clear();
  return self;
}

NodeAllreduce::~NodeAllreduce() = default;

bool NodeAllreduce::supports(DType dtype, const std::string& reduction) const {
  const bool numeric = dtype == DType::Float32 || dtype == DType::Float64 || dtype == DType::Int32 || dtype == DType::Int64;
  const Reduction r = reduction_code(reduction);
  // Integer avg floors in the Python transport; it keeps it.
  return numeric && r != kUnknown && (r != kAvg || dtype == DType::Float32 || dtype == DType::Float64);
}

void NodeAllreduce::check_aborted() const {
  const int32_t who = control_->aborted.load();
  if (who != 0) throw Error(std::string(control_->message, strnlen(control_->message, kMessageBytes)));
}

void NodeAllreduce::abort(const std::string& message) {
  int32_t none = 0;
  if (control_->aborted.compare_exchange_strong(none, -1)) {  // -1: the message is being written
    std::snprintf(control_->message, kMessageBytes, "%s", message.c_str());
    control_->aborted.store(rank_ + 1);
  }
  wake();
  throw Error(message);
}

void NodeAllreduce::wake() {
  control_->epoch.fetch_add(1);
  if (control_->sleepers.load() > 0)
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&control_->epoch), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

void NodeAllreduce::wait_until(const std::function<bool()>& done, const char* what, Kind kind, int64_t count,
                               DType dtype) {
  if (done()) return;
  const auto spin_end = std::chrono::steady_clock::now() + kSpin;
  do {
    for (int i = 0; i < 32; ++i) _mm_pause();
    if (done()) return;
  } while (std::chrono::steady_clock::now() < spin_end);
  for (;;) {
    control_->sleepers.fetch_add(1);
    const uint32_t epoch = control_->epoch.load();
    if (done() || control_->aborted.load() > 0) {
      control_->sleepers.fetch_sub(1);
      if (done()) return;
      check_aborted();
    }
    timespec timeout{0, kSleepNanos};
    const long rc = syscall(SYS_futex, reinterpret_cast<uint32_t*>(&control_->epoch), FUTEX_WAIT, epoch, &timeout,
                            nullptr, 0);
    const bool timed_out = rc == -1 && errno == ETIMEDOUT;
    control_->sleepers.fetch_sub(1);
    if (done()) return;
    if (control_->aborted.load() > 0) check_aborted();
    if (timed_out) {
      for (int q = 0; q < size_; ++q) {
        if (q != rank_ && process_ended(pids_[q]))
          abort("rank " + std::to_string(q) + " (pid " + std::to_string(pids_[q]) + ") ended while rank " +
                std::to_string(rank_) + " waited for it " + what + " " + (kind == kReduceScatter ? "a " : "an ") +
                kind_name(kind) + " of " + std::to_string(count) +
                " " + dtype_name(dtype) + " elements over shared memory");
      }
    }
  }
}

void NodeAllreduce::map_peers(uint64_t call, void* in, void* out) {
  for (int q = 0; q < size_; ++q) {
    if (q == rank_) {
      inputs_[q] = static_cast<uint8_t*>(in);
      outputs_[q] = static_cast<uint8_t*>(out);
      continue;
    }
    const Slot& s = slot(call, q);
    try {
      outputs_[q] = peers_.map(pids_[q], s.out.fd, s.out.inode, s.out.size) + s.out.offset;
      if (in == out) inputs_[q] = outputs_[q];  // an AllReduce: the same buffer, mapped once
      else inputs_[q] = s.in.fd < 0 ? nullptr : peers_.map(pids_[q], s.in.fd, s.in.inode, s.in.size) + s.in.offset;
    } catch (const std::exception& e) {
      abort("rank " + std::to_string(rank_) + " cannot map rank " + std::to_string(q) + "'s buffers: " + e.what());
    }
  }
}

bool NodeAllreduce::allreduce(void* data, int64_t count, DType dtype, const std::string& reduction) {
  return run(kAllReduce, data, data, count, dtype, reduction);
}

bool NodeAllreduce::reduce_scatter(const void* in, void* out, int64_t count, DType dtype, const std::string& reduction) {
  return run(kReduceScatter, const_cast<void*>(in), out, count, dtype, reduction);
}

bool NodeAllreduce::allgather(const void* in, void* out, int64_t count, DType dtype) {
  return run(kAllGather, const_cast<void*>(in), out, count, dtype, "sum");
}

void NodeAllreduce::run_chunk(Kind kind, DType dtype, int64_t count, uint64_t index, int64_t chunk_elements,
                              uint64_t chunks_per_shard, int32_t reduction) {
  if (kind == kAllReduce) {
    const int64_t begin = static_cast<int64_t>(index) * chunk_elements;
    const int64_t m = std::min(count, begin + chunk_elements) - begin;
    reduce_range(dtype, inputs_.data(), size_, begin, outputs_.data(), size_, begin, m, reduction);
    return;
  }
  // Chunks do not straddle shards: chunk `index` is piece `index % chunks_per_shard` of shard
  // `index / chunks_per_shard`, whose `count` elements are rank `shard`'s output (ReduceScatter) or
  // input (AllGather).
  const int shard = static_cast<int>(index / chunks_per_shard);
  const int64_t begin = static_cast<int64_t>(index % chunks_per_shard) * chunk_elements;
  const int64_t m = std::min(count, begin + chunk_elements) - begin;
  const int64_t in_shard = static_cast<int64_t>(shard) * count + begin;
  if (kind == kReduceScatter) {
    reduce_range(dtype, inputs_.data(), size_, in_shard, &outputs_[shard], 1, begin, m, reduction);
  } else {  // AllGather: rank `shard`'s piece, already in its own output (see run()), to the others'
    const size_t element = dtype_size(dtype);
    const uint8_t* piece = outputs_[shard] + in_shard * element;
    for (int r = 0; r < size_; ++r)
      if (r != shard) std::memcpy(outputs_[r] + in_shard * element, piece, static_cast<size_t>(m) * element);
  }
}

bool NodeAllreduce::run(Kind kind, void* in, void* out, int64_t count, DType dtype, const std::string& reduction) {
  std::lock_guard<std::mutex> lock(mutex_);
  check_aborted();
  const uint64_t call = ++calls_;
  const int64_t element = static_cast<int64_t>(dtype_size(dtype));
  // Elements of this rank's input and output: `count` is the per-rank shard of the sharded kinds.
  const int64_t in_count = kind == kReduceScatter ? count * size_ : count;
  const int64_t out_count = kind == kAllGather ? count * size_ : count;
  Slot& mine = slot(call, rank_);
  bool shareable;
  if (kind == kAllGather) {
    // Each rank's piece goes first into its own place in its output, which the others copy from:
    // only the outputs need be shared. (ZeRO-1 gathers the optimizer's updated slices, which it
    // keeps outside the arena.)
    uint8_t* own_place = static_cast<uint8_t*>(out) + static_cast<int64_t>(rank_) * count * element;
    if (own_place != in) std::memmove(own_place, in, static_cast<size_t>(count * element));
    mine.in = SharedLocation();
    shareable = shared_memory::locate(out, out_count * element, &mine.out);
  } else if (kind == kAllReduce) {  // in place: one buffer, looked up once
    shareable = shared_memory::locate(in, in_count * element, &mine.in);
    mine.out = mine.in;
  } else {
    shareable = shared_memory::locate(in, in_count * element, &mine.in) &&
                shared_memory::locate(out, out_count * element, &mine.out);
  }
  mine.count = count;
  mine.kind = kind;
  mine.dtype = static_cast<int32_t>(dtype);
  mine.reduction = reduction_code(reduction);
  mine.shareable = shareable ? 1 : 0;
  mine.call.store(call, std::memory_order_release);

  const int64_t chunk_elements = std::max<int64_t>(1, kChunkBytes / element);
  const uint64_t chunks_per_shard = static_cast<uint64_t>((count + chunk_elements - 1) / chunk_elements);
  const uint64_t chunks = kind == kAllReduce ? chunks_per_shard : chunks_per_shard * static_cast<uint64_t>(size_);
  const uint64_t all_arrived = call * static_cast<uint64_t>(size_);
  if (control_->arrived.fetch_add(1) + 1 == all_arrived) {
    // The last to arrive wakes the sleepers to share the work if there is enough of it; a small
    // bucket it reduces alone, and they wake only at the end.
    if (chunks > 2) wake();
  } else {
    wait_until([&] { return control_->arrived.load() >= all_arrived; }, "to arrive at", kind, count, dtype);
  }

  bool everyone_shares = true;
  for (int q = 0; q < size_; ++q) {
    const Slot& s = slot(call, q);
    PDNG_CHECK(s.call.load(std::memory_order_acquire) == call, "shared-memory collective: rank " + std::to_string(q) +
                                                                  " announced another call (internal error)");
    if (s.kind != mine.kind || s.count != count || s.dtype != mine.dtype || s.reduction != mine.reduction)
      throw Error("the ranks disagree on a collective: rank " + std::to_string(rank_) + " runs " + kind_name(kind) +
                  " of " + std::to_string(count) + " " + dtype_name(dtype) + " elements (" + reduction + "), rank " +
                  std::to_string(q) + " " + kind_name(s.kind) + " of " + std::to_string(s.count) + " " +
                  dtype_name(static_cast<DType>(s.dtype)) + " elements (" + reduction_name(s.reduction) + ")");
    everyone_shares = everyone_shares && s.shareable;
  }
  if (!everyone_shares) return false;  // decided from the same slots on every rank
  const uint64_t first = chunk_base_, last = chunk_base_ + chunks;
  uint64_t next = control_->next_chunk.load();
  // A rank that comes late may find every chunk taken, and its peers may have left the call (and
  // even ended): it maps them only if there is work left, which keeps them in the call.
  if (next < last) map_peers(call, in, out);
  while (next < last) {
    if (!control_->next_chunk.compare_exchange_weak(next, next + 1)) continue;  // `next` reloaded
    run_chunk(kind, dtype, count, next - first, chunk_elements, chunks_per_shard, mine.reduction);
    if (control_->chunks_done.fetch_add(1) + 1 == last) wake();
    next = control_->next_chunk.load();
  }
  wait_until([&] { return control_->chunks_done.load() >= last; }, "to finish", kind, count, dtype);
  chunk_base_ = last;
  collectives_run[kind].fetch_add(1, std::memory_order_relaxed);
  return true;
}

int64_t node_collectives_run(const std::string& kind) {
  for (int32_t k = 0; k < 3; ++k)
    if (kind == kind_name(k)) return collectives_run[k].load(std::memory_order_relaxed);
  throw Error("no collective kind '" + kind + "' (AllReduce, ReduceScatter or AllGather)");
}

NodeAllreduce* SharedNodePath::get(int rank, int size, bool wanted, const NodeAllreduce::Gather& gather) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!set_up_) {
    set_up_ = true;
    path_ = NodeAllreduce::setup(rank, size, wanted, gather, &why_);
  }
  return path_.get();
}

std::string SharedNodePath::describe(const std::string& transport) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!set_up_)
    return transport + ", or shared memory if every rank can map the others' (decided at the first AllReduce)";
  if (path_) return "shared memory among the " + std::to_string(path_->size()) + " ranks of the node";
  return transport + " (no shared memory: " + why_ + ")";
}

}  // namespace pdng
