#pragma once
// Host algorithms over CUDA-resident data (train.device: cuda): the data is
// copied to a page-locked host buffer, the wrapped algorithm (ring, tree,
// butterfly, halving-doubling, naive, mpi, ...) sums it there with the
// thread's ops on the CPU, and the sum is copied back. The copies are part of
// what the allreduce costs, as they are for any host transport of GPU data.
// The algorithm's own schedule, bytes and counters are unchanged.

#include <memory>

#include "allreduce/allreducer.h"

namespace psar {

std::unique_ptr<Allreducer> stage_through_host(std::unique_ptr<Allreducer> algorithm);

}  // namespace psar
