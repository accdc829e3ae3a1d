// Memory that the other processes of the node can map: anonymous files (memfd_create) mapped
// MAP_SHARED, which a peer opens through /proc/<pid>/fd/<fd> and maps too. The executor puts its
// arena there when its communicator reduces within the node over shared memory (node_allreduce.h),
// so that a peer reads and writes the gradient buckets in place: no copy into a staging buffer.
//
// Anonymous files vanish with the last process that holds them: nothing is left in /dev/shm when a
// rank is killed. The identity of a peer's file (inode, and a random token written at its start for
// the probe) is checked before it is mapped, so a stale /proc entry can never be mistaken for it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>

namespace pdng {

// One anonymous shared file, mapped in this process. Registered while alive, so that
// SharedMemory::locate finds which allocation a pointer lies in.
class SharedAllocation {
 public:
  // Throws Error if the kernel refuses (no memfd_create, out of memory).
  explicit SharedAllocation(int64_t nbytes, const char* name = "pdng-arena");
  ~SharedAllocation();
  SharedAllocation(const SharedAllocation&) = delete;
  SharedAllocation& operator=(const SharedAllocation&) = delete;

  uint8_t* data() const { return data_; }
  int64_t size() const { return size_; }
  int fd() const { return fd_; }
  uint64_t inode() const { return inode_; }

 private:
  uint8_t* data_ = nullptr;
  int64_t size_ = 0;  // the mapped size: nbytes rounded up to whole pages
  int fd_ = -1;
  uint64_t inode_ = 0;
};

// Where a pointer lies, as a peer names it: the owner's file and the offset in it.
struct SharedLocation {
  int fd = -1;
  uint64_t inode = 0;
  int64_t size = 0;    // of the whole file
  int64_t offset = 0;  // of the pointer
};

namespace shared_memory {
// Finds the live allocation holding [p, p + nbytes); false if none does.
bool locate(const void* p, int64_t nbytes, SharedLocation* where);
}  // namespace shared_memory

// The files of other processes mapped into this one, by (pid, fd, inode); kept until evicted (a
// mapping keeps the peer's memory alive after the peer frees it, so the cache is bounded).
class PeerMappings {
 public:
  ~PeerMappings();
  // The peer's file mapped here; throws Error naming the pid and fd if it cannot be opened or is
  // not the file described (another inode, another size).
  uint8_t* map(int pid, int fd, uint64_t inode, int64_t size);

 private:
  struct Mapping {
    uint8_t* data;
    int64_t size;
    uint64_t last_use;
  };
  std::map<std::tuple<int, int, uint64_t>, Mapping> mappings_;
  uint64_t uses_ = 0;
};

}  // namespace pdng
