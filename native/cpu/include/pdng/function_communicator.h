// A Communicator over C functions with the signature of native/ccl/pdng_ccl.h: how the
// communication thread drives the oneCCL transport (or any transport with that C ABI) from C++.
#pragma once

#include <cstddef>
#include <memory>

#include "pdng/executor.h"

namespace pdng {

// dtype codes: 0 float32, 1 float64, 2 float16, 3 bfloat16, 4 int32, 5 int64, 6 uint8;
// reductions: 0 sum, 1 prod, 2 min, 3 max. Returns 0 on success.
using AllreduceFn = int (*)(const void* send, void* recv, size_t count, int dtype, int reduction);
using LastErrorFn = const char* (*)();

// shared_memory: reduce over shared memory within the node (node_allreduce.h) when every rank can map
// the others' memory (all ranks on one node), with the functions otherwise.
std::shared_ptr<Communicator> make_function_communicator(int rank, int size, AllreduceFn allreduce,
                                                         LastErrorFn last_error, bool shared_memory = false);

}  // namespace pdng
