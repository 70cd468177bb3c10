#pragma once
// Factories of the algorithms in the registry (one per file in allreduce/).

#include <memory>

#include "allreduce/allreducer.h"

namespace psar {

std::unique_ptr<Allreducer> make_mpi_allreducer(const AllreduceOptions&);

}  // namespace psar
