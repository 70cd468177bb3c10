// main() of every test binary that runs under mpirun: initializes MPI,
// prints GoogleTest output on rank 0 only, and fails the job if any rank's
// tests failed (every rank checks its own replica). Built twice: with
// PSAR_MPI_THREADS (psar_mpi_gtest_main_threads) MPI allows a second thread,
// for the tests of the overlapped gradient sync.

#include <gtest/gtest.h>

#include "core/ops.h"
#include "tests/common/mpi_world.h"

namespace psar::testing {

MpiComm& mpi_world() {
  static MpiComm world(MPI_COMM_WORLD);
  return world;
}

}  // namespace psar::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
#ifdef PSAR_MPI_THREADS
  psar::MpiRuntime mpi(&argc, &argv, /*threads=*/true);
#else
  psar::MpiRuntime mpi(&argc, &argv);
#endif
  psar::ops::set_blas_threads(1);  // ranks share the cores
  auto& world = psar::testing::mpi_world();
  if (world.rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  return world.allreduce_max(rc) != 0 ? 1 : 0;
}
