// The native MPI path of the communication thread: in place on MPI_COMM_WORLD (over shared memory
// when all ranks share a node, else MPI_Allreduce), or
// hierarchical (reduce within the node, allreduce among node leaders, broadcast within the node),
// called from C++ without Python. MPI must already be initialized (by mpi4py) with at least
// MPI_THREAD_SERIALIZED, since the communication thread, not the main thread, makes the calls.
#pragma once

#include <cstdint>
#include <memory>

#include "pdng/executor.h"

namespace pdng {

// Whether this library was built with Open MPI's headers.
bool mpi_available();
// Throws Error if built without MPI, MPI is not initialized, or its thread level is too low.
// node_comm/leaders_comm: MPI_Comm handles as integers (0 = none); node_comm 0 means flat. The
// communicators must stay alive as long as the communicator and be used by no other thread.
// shared_memory: a flat communicator reduces over shared memory within the node (node_allreduce.h)
// when every rank can map the others' memory, MPI_Allreduce otherwise.
std::shared_ptr<Communicator> make_mpi_communicator(uintptr_t node_comm = 0, uintptr_t leaders_comm = 0,
                                                    bool shared_memory = true);
// Flat MPI over `group_comm` (an MPI_Comm handle of a group of the job's ranks, alive as long as
// the communicator and used by no other thread): the executor's collectives over that group.
std::shared_ptr<Communicator> make_mpi_group_communicator(uintptr_t group_comm);

}  // namespace pdng
