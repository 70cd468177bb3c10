#pragma once
// The world communicator of a GoogleTest binary run under mpirun (its main is
// tests/common/mpi_main.cc: MPI is initialized before any test runs).

#include "comm/mpi_comm.h"

namespace psar::testing {

MpiComm& mpi_world();

}  // namespace psar::testing
