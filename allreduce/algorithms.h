#pragma once
// Factories of the algorithms in the registry (one per file in allreduce/).

#include <cstdint>
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

// Cost forms and exact bytes sent per rank, each in its algorithm's file (the
// registry's CostForm and SentBytes; docs/algorithms.md states them).
CostTerms naive_cost(int ranks, int64_t bytes, const AllreduceOptions&);
CostTerms ring_cost(int ranks, int64_t bytes, const AllreduceOptions&);
CostTerms tree_cost(int ranks, int64_t bytes, const AllreduceOptions&);
CostTerms butterfly_cost(int ranks, int64_t bytes, const AllreduceOptions&);
CostTerms halving_doubling_cost(int ranks, int64_t bytes, const AllreduceOptions&);
int64_t naive_sent_bytes(int rank, int ranks, int64_t count);
int64_t ring_sent_bytes(int rank, int ranks, int64_t count);
int64_t tree_sent_bytes(int rank, int ranks, int64_t count);
int64_t butterfly_sent_bytes(int rank, int ranks, int64_t count);
int64_t halving_doubling_sent_bytes(int rank, int ranks, int64_t count);
// Each algorithm's schedule as a step list (allreduce/steps.h), in its file.
StepList naive_steps(int ranks, int64_t count, const AllreduceOptions&);
StepList ring_steps(int ranks, int64_t count, const AllreduceOptions&);
StepList tree_steps(int ranks, int64_t count, const AllreduceOptions&);
StepList butterfly_steps(int ranks, int64_t count, const AllreduceOptions&);
StepList halving_doubling_steps(int ranks, int64_t count, const AllreduceOptions&);

}  // namespace psar
