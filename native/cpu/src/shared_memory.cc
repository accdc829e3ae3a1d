#include "pdng/shared_memory.h"

#include <cerrno>
#include <cstring>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pdng/kernel.h"

namespace pdng {

namespace {

// Live allocations by address, for locate(). Allocations are made and freed on the building thread
// and looked up on the communication thread, hence the mutex.
std::mutex& registry_mutex() {
  static std::mutex* m = new std::mutex();
  return *m;
}
std::map<uintptr_t, const SharedAllocation*>& registry() {
  static auto* r = new std::map<uintptr_t, const SharedAllocation*>();
  return *r;
}

std::string errno_text() { return std::strerror(errno); }

int64_t page_rounded(int64_t nbytes) {
  const int64_t page = sysconf(_SC_PAGESIZE);
  return (std::max<int64_t>(nbytes, 1) + page - 1) / page * page;
}

constexpr size_t kMaxPeerMappings = 64;

}  // namespace

SharedAllocation::SharedAllocation(int64_t nbytes, const char* name) : size_(page_rounded(nbytes)) {
  fd_ = memfd_create(name, MFD_CLOEXEC);
  PDNG_CHECK(fd_ >= 0, "memfd_create of " + std::to_string(nbytes) + " shared bytes failed: " + errno_text());
  if (ftruncate(fd_, size_) != 0) {
    const std::string why = errno_text();
    close(fd_);
    throw Error("cannot size a shared file to " + std::to_string(size_) + " bytes: " + why);
  }
  void* p = mmap(nullptr, static_cast<size_t>(size_), PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  if (p == MAP_FAILED) {
    const std::string why = errno_text();
    close(fd_);
    throw Error("cannot map " + std::to_string(size_) + " shared bytes: " + why);
  }
  data_ = static_cast<uint8_t*>(p);  // zero-filled, as a fresh file is
  struct stat st {};
  fstat(fd_, &st);
  inode_ = static_cast<uint64_t>(st.st_ino);
  std::lock_guard<std::mutex> lock(registry_mutex());
  registry()[reinterpret_cast<uintptr_t>(data_)] = this;
}

SharedAllocation::~SharedAllocation() {
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    registry().erase(reinterpret_cast<uintptr_t>(data_));
  }
  munmap(data_, static_cast<size_t>(size_));
  close(fd_);
}

bool shared_memory::locate(const void* p, int64_t nbytes, SharedLocation* where) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto& r = registry();
  auto it = r.upper_bound(address);  // the first allocation starting after p
  if (it == r.begin()) return false;
  --it;
  const SharedAllocation* a = it->second;
  const uintptr_t begin = it->first;
  if (address + static_cast<uintptr_t>(nbytes) > begin + static_cast<uintptr_t>(a->size())) return false;
  where->fd = a->fd();
  where->inode = a->inode();
  where->size = a->size();
  where->offset = static_cast<int64_t>(address - begin);
  return true;
}

PeerMappings::~PeerMappings() {
  for (auto& entry : mappings_) munmap(entry.second.data, static_cast<size_t>(entry.second.size));
}

uint8_t* PeerMappings::map(int pid, int fd, uint64_t inode, int64_t size) {
  const auto key = std::make_tuple(pid, fd, inode);
  auto it = mappings_.find(key);
  if (it != mappings_.end() && it->second.size == size) {
    it->second.last_use = ++uses_;
    return it->second.data;
  }
  if (it != mappings_.end()) {  // the peer resized nothing in place: a new file reused the number
    munmap(it->second.data, static_cast<size_t>(it->second.size));
    mappings_.erase(it);
  }
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  // stat before open: the path must be the peer's anonymous file, never something whose open could
  // block or act (a FIFO, a device) should the pid name another process.
  struct stat st {};
  PDNG_CHECK(stat(path.c_str(), &st) == 0, "cannot see " + path + " (process " + std::to_string(pid) +
                                               "'s shared memory): " + errno_text());
  PDNG_CHECK(S_ISREG(st.st_mode) && static_cast<uint64_t>(st.st_ino) == inode && st.st_size == size,
             path + " is not the shared memory process " + std::to_string(pid) + " announced");
  const int local = open(path.c_str(), O_RDWR | O_CLOEXEC);
  PDNG_CHECK(local >= 0, "cannot open " + path + " (process " + std::to_string(pid) + "'s shared memory): " +
                             errno_text());
  void* p = mmap(nullptr, static_cast<size_t>(size), PROT_READ | PROT_WRITE, MAP_SHARED, local, 0);
  const std::string why = p == MAP_FAILED ? errno_text() : "";
  close(local);  // the mapping holds the file
  PDNG_CHECK(p != MAP_FAILED, "cannot map " + path + ": " + why);
  if (mappings_.size() >= kMaxPeerMappings) {  // evict the least recently used
    auto oldest = mappings_.begin();
    for (auto m = mappings_.begin(); m != mappings_.end(); ++m)
      if (m->second.last_use < oldest->second.last_use) oldest = m;
    munmap(oldest->second.data, static_cast<size_t>(oldest->second.size));
    mappings_.erase(oldest);
  }
  mappings_[key] = {static_cast<uint8_t*>(p), size, ++uses_};
  return static_cast<uint8_t*>(p);
}

}  // namespace pdng
