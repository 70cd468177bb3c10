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
//
// Its reduce-scatter and all-gather (a sharded optimizer's pair,
// allreduce/sharded.h) are MPI_Ireduce_scatter and MPI_Iallgatherv, with the
// same deadline.

#include <sched.h>
#include <algorithm>
#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "allreduce/algorithms.h"
#include "comm/mpi_comm.h"
#include "core/errors.h"
#include "core/timer.h"

namespace psar {

namespace {

MpiComm& mpi_comm(Comm& comm, const char* what) {
  auto* mpi = dynamic_cast<MpiComm*>(&comm);
  if (!mpi)
    throw ConfigError(std::string(what) + " 'mpi' needs the MPI transport (run under mpirun); this "
                      "communicator is '" + comm.transport() + "'");
  return *mpi;
}

// Polls a non-blocking collective until it completes or the communicator's
// deadline passes; then `broken` is set and a TimeoutError names it.
void wait(Comm& comm, MPI_Request& request, const std::string& what, bool& broken) {
  const double deadline = now_seconds() + comm.timeout();
  for (;;) {
    int done = 0;
    PSAR_MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
    if (done) return;
    if (now_seconds() >= deadline) {
      broken = true;
      throw TimeoutError("mpi: " + what + " on rank " + std::to_string(comm.rank()) + " of " +
                         std::to_string(comm.size()) + " did not complete within " +
                         std::to_string(comm.timeout()) +
                         " s (sync.timeout): some rank of the communicator never joined it "
                         "(stalled or gone)");
    }
    if (yield_when_idle()) sched_yield();
  }
}

void check_usable(Comm& comm, bool broken) {
  if (broken)
    throw CommError("mpi: an earlier collective timed out on rank " + std::to_string(comm.rank()) +
                    "; the communicator is unusable");
}

class MpiAllreducer final : public Allreducer {
 public:
  std::string name() const override { return "mpi"; }

  void allreduce(Comm& comm, std::span<float> data) override {
    MpiComm& mpi = mpi_comm(comm, "allreduce");
    check_usable(comm, broken_);
    if (data.empty() || comm.size() == 1) return;
    // MPI counts are int: reduce in pieces if the vector is larger.
    constexpr size_t kMaxCount = static_cast<size_t>(INT_MAX) / 2;
    for (size_t off = 0; off < data.size(); off += kMaxCount) {
      const int n = static_cast<int>(std::min(kMaxCount, data.size() - off));
      MPI_Request request = MPI_REQUEST_NULL;
      PSAR_MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, data.data() + off, n, MPI_FLOAT, MPI_SUM,
                                    mpi.handle(), &request));
      wait(comm, request, "MPI_Iallreduce of " + std::to_string(n) + " floats", broken_);
    }
  }

 private:
  bool broken_ = false;
};

// MPI_Reduce_scatter and MPI_Allgatherv over the pieces (non-blocking, polled
// against the deadline). In place, MPI_Reduce_scatter leaves a rank's piece
// at the front of the buffer; it is moved to the piece's own place.
class MpiSharded final : public ShardedCollectives {
 public:
  std::string name() const override { return "mpi"; }

  void reduce_scatter(Comm& comm, std::span<float> data,
                      const std::vector<int64_t>& split) override {
    MpiComm& mpi = mpi_comm(comm, "reduce-scatter");
    check_usable(comm, broken_);
    if (comm.size() == 1) return;
    layout(comm, data, split);
    MPI_Request request = MPI_REQUEST_NULL;
    PSAR_MPI_CHECK(MPI_Ireduce_scatter(MPI_IN_PLACE, data.data(), counts_.data(), MPI_FLOAT,
                                       MPI_SUM, mpi.handle(), &request));
    wait(comm, request, "MPI_Ireduce_scatter of " + std::to_string(data.size()) + " floats",
         broken_);
    const auto r = static_cast<size_t>(comm.rank());
    if (counts_[r] > 0 && displs_[r] > 0)
      std::memmove(data.data() + displs_[r], data.data(),
                   static_cast<size_t>(counts_[r]) * sizeof(float));
  }

  void all_gather(Comm& comm, std::span<float> data, const std::vector<int64_t>& split) override {
    MpiComm& mpi = mpi_comm(comm, "all-gather");
    check_usable(comm, broken_);
    if (comm.size() == 1) return;
    layout(comm, data, split);
    MPI_Request request = MPI_REQUEST_NULL;
    PSAR_MPI_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data.data(), counts_.data(),
                                   displs_.data(), MPI_FLOAT, mpi.handle(), &request));
    wait(comm, request, "MPI_Iallgatherv of " + std::to_string(data.size()) + " floats", broken_);
  }

 private:
  // counts_, displs_: the pieces as MPI's ints (ConfigError past INT_MAX).
  void layout(Comm& comm, std::span<float> data, const std::vector<int64_t>& split) {
    const ProgramShape shape{.ranks = comm.size(), .count = static_cast<int64_t>(data.size()),
                             .split = split};
    if (data.size() > static_cast<size_t>(INT_MAX))
      throw ConfigError("mpi reduce-scatter/all-gather: " + std::to_string(data.size()) +
                        " floats exceed MPI's int count");
    counts_.resize(static_cast<size_t>(comm.size()));
    displs_.resize(static_cast<size_t>(comm.size()));
    for (int r = 0; r < comm.size(); ++r) {
      counts_[static_cast<size_t>(r)] = static_cast<int>(shape.piece_size(r));
      displs_[static_cast<size_t>(r)] = static_cast<int>(shape.piece_offset(r));
    }
  }

  std::vector<int> counts_, displs_;
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

std::unique_ptr<ShardedCollectives> make_mpi_sharded(const AllreduceOptions& options) {
  make_mpi_allreducer(options);  // the same refusals
  return std::make_unique<MpiSharded>();
}

}  // namespace psar
