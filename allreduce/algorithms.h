#pragma once
// Factories of the algorithms in the registry (one per file in allreduce/).

#include <memory>

#include "allreduce/allreducer.h"

namespace psar {

std::unique_ptr<Allreducer> make_naive_allreducer(const AllreduceOptions&);
std::unique_ptr<Allreducer> make_ring_allreducer(const AllreduceOptions&);
std::unique_ptr<Allreducer> make_tree_allreducer(const AllreduceOptions&);
std::unique_ptr<Allreducer> make_butterfly_allreducer(const AllreduceOptions&);
std::unique_ptr<Allreducer> make_halving_doubling_allreducer(const AllreduceOptions&);
std::unique_ptr<Allreducer> make_hierarchical_allreducer(const AllreduceOptions&);
std::unique_ptr<Allreducer> make_mpi_allreducer(const AllreduceOptions&);
// nccl.cc when CUDA/NCCL are built, nccl_unavailable.cc otherwise.
std::unique_ptr<Allreducer> make_nccl_allreducer(const AllreduceOptions&);

}  // namespace psar
