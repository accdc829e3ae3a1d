// The native MPI path of the communication thread: MPI_Allreduce in place on MPI_COMM_WORLD,
// called from C++ without Python. MPI must already be initialized (by mpi4py) with at least
// MPI_THREAD_SERIALIZED, since the communication thread, not the main thread, makes the calls.
#pragma once

#include <memory>

#include "pdng/executor.h"

namespace pdng {

// Whether this library was built with Open MPI's headers.
bool mpi_available();
// Throws Error if built without MPI, MPI is not initialized, or its thread level is too low.
std::shared_ptr<Communicator> make_mpi_communicator();

}  // namespace pdng
