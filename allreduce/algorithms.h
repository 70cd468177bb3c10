#pragma once
// The programs and cost forms of the algorithms in the registries, one
// algorithm per file in allreduce/ (docs/algorithms.md states each).

#include <memory>

#include "allreduce/allreducer.h"
#include "allreduce/program.h"
#include "allreduce/sharded.h"

namespace psar {

// Allreduce programs.
Program naive_program(const ProgramShape&);
Program ring_program(const ProgramShape&);
Program tree_program(const ProgramShape&);
Program butterfly_program(const ProgramShape&);
Program halving_doubling_program(const ProgramShape&);
Program hierarchical_program(const ProgramShape&);
// The other collectives (allreduce/collectives.h).
Program ring_reduce_scatter_program(const ProgramShape&);
Program ring_all_gather_program(const ProgramShape&);
Program halving_doubling_reduce_scatter_program(const ProgramShape&);
Program halving_doubling_all_gather_program(const ProgramShape&);
Program hierarchical_reduce_scatter_program(const ProgramShape&);
Program hierarchical_all_gather_program(const ProgramShape&);
Program tree_broadcast_program(const ProgramShape&);
Program tree_reduce_program(const ProgramShape&);
// One pass around the ring, what its reduce-scatter and all-gather share
// (ring_pass.cc): at step s (0..N-2) rank r sends chunk (r - s - lag) mod N
// of Partition{count, N} to r+1, which adds it (reduce) or stores it.
Program ring_pass_program(std::string name, const ProgramShape& shape, int lag, bool reduce);

// Library peers: no program of psar's.
std::unique_ptr<Allreducer> make_mpi_allreducer(const AllreduceOptions&);
std::unique_ptr<ShardedCollectives> make_mpi_sharded(const AllreduceOptions&);
// nccl.cc when CUDA/NCCL are built, nccl_unavailable.cc otherwise.
std::unique_ptr<Allreducer> make_nccl_allreducer(const AllreduceOptions&);
std::unique_ptr<ShardedCollectives> make_nccl_sharded(const AllreduceOptions&);

// α-β-γ cost forms (the registry's CostForm), each in its algorithm's file.
CostTerms naive_cost(int ranks, int64_t bytes, const AllreduceOptions&);
CostTerms ring_cost(int ranks, int64_t bytes, const AllreduceOptions&);
CostTerms tree_cost(int ranks, int64_t bytes, const AllreduceOptions&);
CostTerms butterfly_cost(int ranks, int64_t bytes, const AllreduceOptions&);
CostTerms halving_doubling_cost(int ranks, int64_t bytes, const AllreduceOptions&);

}  // namespace psar
