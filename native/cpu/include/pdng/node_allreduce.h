// AllReduce (and ZeRO-1's ReduceScatter and AllGather) among the processes of one node over shared
// memory, on buffers that each rank holds in a SharedAllocation (the executor's arena): no staging
// copy, no message.
//
// Every rank announces its buffer in a control block that all ranks map; once all have arrived,
// the bucket is cut in chunks that any arrived rank takes (an atomic counter): a chunk is reduced
// from every rank's buffer in rank order, and the result written to every rank's buffer. Which rank
// computes a chunk changes nothing in its bits, so results are identical on every rank and from
// run to run. A rank that is descheduled (its communication thread waiting for a core that its
// compute thread holds) does not hold the others up: they take its chunks, and it only has to see
// the end. Waits spin for a few microseconds, then sleep on a futex: no core is taken from compute.
//
// The control block's counters only grow (each call's chunks and arrivals continue the last call's
// numbering), so no reset can race with a late rank; announcements alternate between two sets of
// slots, so a rank that runs ahead into the next call never overwrites what a late one reads.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "pdng/kernel.h"
#include "pdng/shared_memory.h"

namespace pdng {

class NodeAllreduce {
 public:
  // gather(mine, all, bytes): every rank's `bytes` bytes, in rank order (an MPI_Allgather).
  using Gather = std::function<void(const void* mine, void* all, int bytes)>;

  // Collective: every rank calls it, at the same point of its sequence of collectives. Returns the
  // shared-memory path if every rank wants it and can map every other rank's memory (one node, the
  // same user, /proc visible); otherwise null, with the reason (the same on every rank) in *why.
  static std::unique_ptr<NodeAllreduce> setup(int rank, int size, bool wanted, const Gather& gather,
                                              std::string* why);
  ~NodeAllreduce();

  bool supports(DType dtype, const std::string& reduction) const;
  // In place on `data` (count elements). Collective. Returns false, on every rank alike, when some
  // rank's buffer is not in shared memory: the caller then reduces it another way. Throws Error
  // (on every rank) if the ranks disagree on the bucket, and if a peer ends while it waits.
  bool allreduce(void* data, int64_t count, DType dtype, const std::string& reduction);
  // ZeRO-1's pair, the same way: `count` is each rank's shard. ReduceScatter reduces the ranks'
  // inputs (count * size elements) and leaves shard r in rank r's `out`; AllGather concatenates the
  // ranks' inputs (count elements) in rank order into every rank's `out`; its inputs need not be in
  // shared memory, only its outputs. ReduceScatter's inputs and outputs must not overlap, as MPI's.
  // AllGather copies, so it takes any dtype supports() takes with "sum".
  bool reduce_scatter(const void* in, void* out, int64_t count, DType dtype, const std::string& reduction);
  bool allgather(const void* in, void* out, int64_t count, DType dtype);

  int size() const { return size_; }

 private:
  struct Control;
  struct Slot;
  enum Kind : int32_t { kAllReduce = 0, kReduceScatter = 1, kAllGather = 2 };
  NodeAllreduce() = default;
  static int64_t control_bytes(int size);  // the control block and its two sets of slots
  Slot& slot(uint64_t call, int rank) const;
  // Waits until done() is true: spins briefly, then sleeps on the control block's futex, checking
  // that the peers are alive and that no rank has aborted.
  void wait_until(const std::function<bool()>& done, const char* what, Kind kind, int64_t count, DType dtype);
  // One call of any kind: announce, wait for all, take chunks until none is left, wait for the end.
  bool run(Kind kind, void* in, void* out, int64_t count, DType dtype, const std::string& reduction);
  void run_chunk(Kind kind, DType dtype, int64_t count, uint64_t index, int64_t chunk_elements,
                 uint64_t chunks_per_shard, int32_t reduction);
  void wake();
  // inputs_ and outputs_ of this call: this rank's own, and the peers' announced ones mapped here.
  void map_peers(uint64_t call, void* in, void* out);
  [[noreturn]] void abort(const std::string& message);
  void check_aborted() const;

  int rank_ = 0, size_ = 1;
  std::vector<int> pids_;
  std::unique_ptr<SharedAllocation> own_;  // rank 0: the control block; others: their probe
  PeerMappings control_mapping_, peers_;
  Control* control_ = nullptr;
  uint64_t calls_ = 0, chunk_base_ = 0;
  std::vector<uint8_t*> inputs_, outputs_;  // per rank, for the call being run
  std::mutex mutex_;  // one call at a time in this process, as the ranks' sequences must match
};

// The shared-memory path of one transport in this process, which every executor's communicator of
// that transport shares: set up by the first AllReduce that asks for it, a point every rank reaches
// at the same place in its sequence of collectives, whether or not it wants the path (the setup is
// collective). Afterwards the same on every rank: the path, or null (the transport's own AllReduce).
// How many collectives of `kind` ("AllReduce", "ReduceScatter" or "AllGather") this process has run
// over shared memory, on any transport: which path a collective took, for tests and tools.
int64_t node_collectives_run(const std::string& kind);

class SharedNodePath {
 public:
  NodeAllreduce* get(int rank, int size, bool wanted, const NodeAllreduce::Gather& gather);
  // What a communicator says it does: `transport` names its own AllReduce, used without the path.
  std::string describe(const std::string& transport);

 private:
  std::mutex mutex_;
  bool set_up_ = false;
  std::unique_ptr<NodeAllreduce> path_;
  std::string why_;
};

}  // namespace pdng
