// mpi — MPI_Allreduce of the installed MPI library (Open MPI's tuned
// collectives choose among recursive doubling, ring and Rabenseifner by size).
// It is the peer every custom algorithm is measured against, and the only
// code in psar that calls an MPI collective. It needs an MPI communicator:
// on the in-process transport it is a configuration error.

#include <algorithm>
#include <climits>

#include "allreduce/algorithms.h"
#include "comm/mpi_comm.h"
#include "core/errors.h"

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
    if (data.empty() || comm.size() == 1) return;
    // MPI counts are int: reduce in pieces if the vector is larger.
    constexpr size_t kMaxCount = static_cast<size_t>(INT_MAX) / 2;
    for (size_t off = 0; off < data.size(); off += kMaxCount) {
      const int n = static_cast<int>(std::min(kMaxCount, data.size() - off));
      PSAR_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data.data() + off, n, MPI_FLOAT, MPI_SUM,
                                   mpi->handle()));
    }
  }
};

}  // namespace

std::unique_ptr<Allreducer> make_mpi_allreducer(const AllreduceOptions&) {
  return std::make_unique<MpiAllreducer>();
}

}  // namespace psar
