// paddle_ngraph's oneCCL transport: oneCCL (Intel's successor of MLSL) behind a C ABI.
#include "pdng_ccl.h"

#include <sched.h>
#include <time.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "oneapi/ccl.hpp"

namespace {

std::string g_error;
std::shared_ptr<ccl::kvs> g_kvs;
std::optional<ccl::communicator> g_comm;
int g_rank = -1;

// A group's store and, once its members joined, its communicator.
struct Group {
  std::shared_ptr<ccl::kvs> kvs;
  std::optional<ccl::communicator> comm;
};
std::vector<std::unique_ptr<Group>> g_groups;

const char* dtype_name(int dtype) {
  switch (dtype) {
    case PDNG_FLOAT32: return "float32";
    case PDNG_FLOAT64: return "float64";
    case PDNG_FLOAT16: return "float16";
    case PDNG_BFLOAT16: return "bfloat16";
    case PDNG_INT32: return "int32";
    case PDNG_INT64: return "int64";
    case PDNG_UINT8: return "uint8";
  }
  return "unknown";
}

// Exhaustive switches: a dtype or reduction added to the enums must be handled here.
bool to_ccl(int dtype, ccl::datatype* out) {
  switch (static_cast<pdng_dtype>(dtype)) {
    case PDNG_FLOAT32: *out = ccl::datatype::float32; return true;
    case PDNG_FLOAT64: *out = ccl::datatype::float64; return true;
    case PDNG_FLOAT16: *out = ccl::datatype::float16; return true;
    case PDNG_BFLOAT16: *out = ccl::datatype::bfloat16; return true;
    case PDNG_INT32: *out = ccl::datatype::int32; return true;
    case PDNG_INT64: *out = ccl::datatype::int64; return true;
    case PDNG_UINT8: *out = ccl::datatype::uint8; return true;
  }
  return false;
}

bool to_ccl(pdng_reduction reduction, ccl::reduction* out) {
  switch (reduction) {
    case PDNG_SUM: *out = ccl::reduction::sum; return true;
    case PDNG_PROD: *out = ccl::reduction::prod; return true;
    case PDNG_MIN: *out = ccl::reduction::min; return true;
    case PDNG_MAX: *out = ccl::reduction::max; return true;
  }
  return false;
}

int fail(const std::string& what) {
  g_error = "rank " + std::to_string(g_rank) + ": " + what;
  return 1;
}

// How a rank waits for its operation. With CCL_WORKER_OFFLOAD=0 (ccl.py's default) the waiting thread
// drives progress inside wait() and test(), and wait() polls without a pause: with more ranks than
// cores, a polling rank holds a core that the rank it waits for needs. PDNG_CCL_WAIT picks:
//   spin   event.wait(), as oneCCL does;
//   yield  test(), then sched_yield() between tests: a runnable thread on this core goes first;
//   sleep  (default) test() with sched_yield() for the first polls, then 20 us sleeps: the core is
//          free while a peer is late (the other ranks' compute, or a rank of this job sharing it).
enum class WaitMode { Spin, Yield, Sleep };

WaitMode wait_mode() {
  const char* v = std::getenv("PDNG_CCL_WAIT");
  const std::string mode = v ? v : "sleep";
  if (mode == "spin") return WaitMode::Spin;
  if (mode == "yield") return WaitMode::Yield;
  return WaitMode::Sleep;
}

void finish(ccl::event event) {
  static const WaitMode mode = wait_mode();
  if (mode == WaitMode::Spin) {
    event.wait();
    return;
  }
  constexpr int kYields = 64;
  const timespec pause{0, 20000};
  for (int polls = 0; !event.test(); ++polls) {
    if (mode == WaitMode::Yield || polls < kYields) sched_yield();
    else nanosleep(&pause, nullptr);
  }
}

// Runs ``body`` (one collective) with the dtype converted; its exceptions become the error.
template <typename F>
int with_dtype(const char* op, int dtype, F&& body) {
  ccl::datatype dt;
  if (!to_ccl(dtype, &dt)) return fail(std::string(op) + ": unsupported dtype code " + std::to_string(dtype));
  try {
    body(dt);
    return 0;
  } catch (const std::exception& e) {
    return fail(std::string(op) + " of " + dtype_name(dtype) + " failed: " + e.what());
  }
}

template <typename F>
int guarded(const char* op, int dtype, F&& body) {
  if (!g_comm) return fail(std::string(op) + ": the oneCCL communicator is not created");
  return with_dtype(op, dtype, std::forward<F>(body));
}

// The communicator of group ``slot``, or nullptr (after fail()) when there is none.
ccl::communicator* group_comm(int slot, const char* op) {
  if (slot < 0 || slot >= static_cast<int>(g_groups.size()) || !g_groups[slot]->comm) {
    fail(std::string(op) + ": no oneCCL communicator for group slot " + std::to_string(slot));
    return nullptr;
  }
  return &*g_groups[slot]->comm;
}

}  // namespace

extern "C" {

int pdng_ccl_group_store(int* slot, char* address, size_t capacity, size_t* length) {
  try {
    ccl::init();
    auto group = std::make_unique<Group>();
    group->kvs = ccl::create_main_kvs();
    auto addr = group->kvs->get_address();
    if (addr.size() > capacity) return fail("group kvs address larger than the buffer");
    std::memcpy(address, addr.data(), addr.size());
    *length = addr.size();
    g_groups.push_back(std::move(group));
    *slot = static_cast<int>(g_groups.size()) - 1;
    return 0;
  } catch (const std::exception& e) {
    return fail(std::string("creating a group's oneCCL kvs failed: ") + e.what());
  }
}

int pdng_ccl_group_join(int* slot, const char* address, size_t length, int size, int rank) {
  try {
    if (*slot < 0) {
      ccl::init();
      ccl::kvs::address_type addr{};
      if (length != addr.size()) return fail("group kvs address of wrong length " + std::to_string(length));
      std::memcpy(addr.data(), address, length);
      auto group = std::make_unique<Group>();
      group->kvs = ccl::create_kvs(addr);
      g_groups.push_back(std::move(group));
      *slot = static_cast<int>(g_groups.size()) - 1;
    } else if (*slot >= static_cast<int>(g_groups.size())) {
      return fail("group slot " + std::to_string(*slot) + " does not exist");
    }
    Group& group = *g_groups[*slot];
    group.comm.emplace(ccl::create_communicator(size, rank, group.kvs));
    return 0;
  } catch (const std::exception& e) {
    return fail(std::string("creating a group's oneCCL communicator failed: ") + e.what());
  }
}

int pdng_ccl_group_allreduce(int slot, const void* send, void* recv, size_t count, int dtype, int reduction) {
  ccl::communicator* comm = group_comm(slot, "group allreduce");
  if (!comm) return 1;
  ccl::reduction red;
  if (!to_ccl(static_cast<pdng_reduction>(reduction), &red))
    return fail("group allreduce: unsupported reduction code " + std::to_string(reduction));
  return with_dtype("group allreduce", dtype,
                    [&](ccl::datatype dt) { finish(ccl::allreduce(send, recv, count, dt, red, *comm)); });
}

int pdng_ccl_group_broadcast(int slot, void* buffer, size_t count, int dtype, int root) {
  ccl::communicator* comm = group_comm(slot, "group broadcast");
  if (!comm) return 1;
  return with_dtype("group broadcast", dtype,
                    [&](ccl::datatype dt) { finish(ccl::broadcast(buffer, count, dt, root, *comm)); });
}

int pdng_ccl_group_allgather(int slot, const void* send, void* recv, size_t count, int dtype) {
  ccl::communicator* comm = group_comm(slot, "group allgather");
  if (!comm) return 1;
  return with_dtype("group allgather", dtype, [&](ccl::datatype dt) {
    std::vector<size_t> counts(comm->size(), count);
    finish(ccl::allgatherv(send, count, recv, counts, dt, *comm));
  });
}

int pdng_ccl_group_reduce_scatter(int slot, const void* send, void* recv, size_t recv_count, int dtype,
                                  int reduction) {
  ccl::communicator* comm = group_comm(slot, "group reduce_scatter");
  if (!comm) return 1;
  ccl::reduction red;
  if (!to_ccl(static_cast<pdng_reduction>(reduction), &red))
    return fail("group reduce_scatter: unsupported reduction code " + std::to_string(reduction));
  return with_dtype("group reduce_scatter", dtype, [&](ccl::datatype dt) {
    finish(ccl::reduce_scatter(send, recv, recv_count, dt, red, *comm));
  });
}

const char* pdng_ccl_last_error(void) { return g_error.c_str(); }

int pdng_ccl_create_main_kvs(char* address, size_t capacity, size_t* length) {
  try {
    ccl::init();
    g_kvs = ccl::create_main_kvs();
    auto addr = g_kvs->get_address();
    if (addr.size() > capacity) return fail("kvs address larger than the buffer");
    std::memcpy(address, addr.data(), addr.size());
    *length = addr.size();
    return 0;
  } catch (const std::exception& e) {
    return fail(std::string("creating the main oneCCL kvs failed: ") + e.what());
  }
}

int pdng_ccl_create_communicator(const char* address, size_t length, int size, int rank) {
  g_rank = rank;
  try {
    if (!g_kvs) {
      ccl::init();
      ccl::kvs::address_type addr{};
      if (length != addr.size()) return fail("kvs address of wrong length " + std::to_string(length));
      std::memcpy(addr.data(), address, length);
      g_kvs = ccl::create_kvs(addr);
    }
    g_comm.emplace(ccl::create_communicator(size, rank, g_kvs));
    return 0;
  } catch (const std::exception& e) {
    return fail(std::string("creating the oneCCL communicator failed: ") + e.what());
  }
}

int pdng_ccl_allreduce(const void* send, void* recv, size_t count, int dtype, int reduction) {
  ccl::reduction red;
  if (!to_ccl(static_cast<pdng_reduction>(reduction), &red))
    return fail("allreduce: unsupported reduction code " + std::to_string(reduction));
  return guarded("allreduce", dtype, [&](ccl::datatype dt) { finish(ccl::allreduce(send, recv, count, dt, red, *g_comm)); });
}

int pdng_ccl_broadcast(void* buffer, size_t count, int dtype, int root) {
  return guarded("broadcast", dtype, [&](ccl::datatype dt) { finish(ccl::broadcast(buffer, count, dt, root, *g_comm)); });
}

int pdng_ccl_allgather(const void* send, void* recv, size_t count, int dtype) {
  return guarded("allgather", dtype, [&](ccl::datatype dt) {
    std::vector<size_t> counts(g_comm->size(), count);
    finish(ccl::allgatherv(send, count, recv, counts, dt, *g_comm));
  });
}

int pdng_ccl_reduce_scatter(const void* send, void* recv, size_t recv_count, int dtype, int reduction) {
  ccl::reduction red;
  if (!to_ccl(static_cast<pdng_reduction>(reduction), &red))
    return fail("reduce_scatter: unsupported reduction code " + std::to_string(reduction));
  return guarded("reduce_scatter", dtype,
                 [&](ccl::datatype dt) { finish(ccl::reduce_scatter(send, recv, recv_count, dt, red, *g_comm)); });
}

int pdng_ccl_send(const void* buffer, size_t count, int dtype, int peer) {
  return guarded("send", dtype,
                 [&](ccl::datatype dt) { finish(ccl::send(const_cast<void*>(buffer), count, dt, peer, *g_comm)); });
}

int pdng_ccl_recv(void* buffer, size_t count, int dtype, int peer) {
  return guarded("recv", dtype, [&](ccl::datatype dt) { finish(ccl::recv(buffer, count, dt, peer, *g_comm)); });
}

int pdng_ccl_barrier(void) {
  if (!g_comm) return fail("barrier: the oneCCL communicator is not created");
  try {
    ccl::barrier(*g_comm);
    return 0;
  } catch (const std::exception& e) {
    return fail(std::string("barrier failed: ") + e.what());
  }
}

void pdng_ccl_finalize(void) {
  for (auto& group : g_groups) group->comm.reset();
  g_groups.clear();
  g_comm.reset();
  g_kvs.reset();
}

}  // extern "C"
