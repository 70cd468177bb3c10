// mpi — MPI_Allreduce of the installed MPI library (Open MPI's tuned
// collectives choose among recursive doubling, ring and Rabenseifner by size).
// It is the peer every custom algorithm is measured against, and the only
// code in psar that calls an MPI collective. It needs an MPI communicator:
// on the in-process transport it is a configuration error.
//
// The deadline: the reduction is posted as MPI_Iallreduce and polled with
// MPI_Test until it completes or the communicator's timeout (sync.timeout)
// passes — then a TimeoutError names the operation. A collective cannot be
// cancelled: after a timeout the request is left pending and this rank must
// not take part in another collective on the communicator; the error ends
// the job (psar's main aborts every rank on a run-time error).

#include <sched.h>
#include <algorithm>
#include <climits>

#include "allreduce/algorithms.h"
#include "comm/mpi_comm.h"
#include "core/errors.h"
#include "core/timer.h"

namespace psar {

namespace {

class MpiAllreducer final : public Allreducer {
 public:
  std::string name() const override { return "mpi"; }

  void allreduce(Comm& comm, std::span<float> data) override {
    auto* mpi = dynamic_cast<MpiComm*>(&comm);
    if (!mpi)
      throw ConfigError("allreduce 'mpi' needs the MPI transport (run under mpirun); this "
                        "communicator is '" + comm.transport() + "'");
    if (broken_)
      throw CommError("mpi allreduce: an earlier MPI_Iallreduce timed out on rank " +
                      std::to_string(comm.rank()) + "; the communicator is unusable");
    if (data.empty() || comm.size() == 1) return;
    // MPI counts are int: reduce in pieces if the vector is larger.
    constexpr size_t kMaxCount = static_cast<size_t>(INT_MAX) / 2;
    for (size_t off = 0; off < data.size(); off += kMaxCount) {
      const int n = static_cast<int>(std::min(kMaxCount, data.size() - off));
      MPI_Request request = MPI_REQUEST_NULL;
      PSAR_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data.data() + off, n, MPI_FLOAT, MPI_SUM,
                                    mpi->handle(), &request));
      wait(comm, request, n);
    }
  }

 private:
  void wait(Comm& comm, MPI_Request& request, int count) {
    const double deadline = now_seconds() + comm.timeout();
    for (;;) {
      int done = 0;
      PSAR_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
      if (done) return;
      if (now_seconds() >= deadline) {
        broken_ = true;
        throw TimeoutError("mpi allreduce: MPI_Iallreduce of " + std::to_string(count) +
                           " floats on rank " + std::to_string(comm.rank()) + " of " +
                           std::to_string(comm.size()) + " did not complete within " +
                           std::to_string(comm.timeout()) +
                           " s (sync.timeout): some rank of the communicator never joined it "
                           "(stalled or gone)");
      }
      if (yield_when_idle()) sched_yield();
    }
  }

  bool broken_ = false;
};

}  // namespace

// MPI has no 16-bit floating-point type in its standard (MPI 4.0 names none;
// Open MPI's MPI_Allreduce of bf16 would need a user op that sums in the
// element type, which is not the comparison the peer stands for).
std::unique_ptr<Allreducer> make_mpi_allreducer(const AllreduceOptions& options) {
  if (options.dtype != ElementType::kFp32)
    throw ConfigError(std::string("allreduce 'mpi' sums float32 only: MPI has no standard ") +
                      element_type_name(options.dtype) +
                      " type or sum, so sync.dtype must be fp32 for it (the program algorithms "
                      "put any sync.dtype on the wire)");
  return std::make_unique<MpiAllreducer>();
}

}  // namespace psar
