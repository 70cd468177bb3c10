// Under mpirun: the last rank stalls instead of joining an `mpi` allreduce.
// Every other rank must get a TimeoutError naming the operation within the
// deadline (2 s) plus 1.5 s of slack, and the job must end — as in psar's
// main(), the error aborts it (a collective cannot be cancelled, so a rank
// that timed out in one cannot go on). expect_failure.sh checks the line,
// the non-zero exit, the time, and that no process is left.

#include <unistd.h>

#include <cstdio>
#include <vector>

#include "allreduce/allreducer.h"
#include "comm/mpi_comm.h"
#include "core/errors.h"
#include "core/timer.h"

int main(int argc, char** argv) {
  using namespace psar;
  MpiRuntime runtime(&argc, &argv);
  MpiComm world(MPI_COMM_WORLD);
  constexpr double kDeadline = 2.0, kSlack = 1.5;
  world.set_timeout(kDeadline);
  const auto mpi = make_allreducer("mpi");
  std::vector<float> data(4096, 1.0f);
  mpi->allreduce(world, data);  // one that every rank joins
  if (world.rank() == world.size() - 1) {
    sleep(60);  // stalled; MPI_Abort ends it
    return 0;
  }
  const double start = now_seconds();
  try {
    mpi->allreduce(world, data);
    std::fprintf(stderr, "rank %d: the allreduce completed without the stalled rank\n",
                 world.rank());
    return 0;
  } catch (const TimeoutError& e) {
    const double waited = now_seconds() - start;
    std::fprintf(stderr, "rank %d: TimeoutError after %.2f s (%s the deadline + slack): %s\n",
                 world.rank(), waited, waited <= kDeadline + kSlack ? "within" : "PAST", e.what());
    std::fflush(stderr);
    MpiRuntime::abort(1);
  }
}
