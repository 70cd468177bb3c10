#pragma once
// ShardedCollectives: an algorithm's reduce-scatter and all-gather as a pair
// with one piece layout — what a sharded optimizer (ZeRO stages 1–2,
// sync/zero_sync.h) runs instead of an allreduce: the gradient is
// reduce-scattered so that each rank holds the sum of the piece it owns, the
// rank steps the optimizer on that piece, and the parameters are
// all-gathered. The algorithms that have the pair say so in the registry
// (AllreducerEntry::shards()): ring and halving_doubling as programs
// (allreduce/program.h) run by the engine, mpi as MPI_Reduce_scatter and
// MPI_Allgatherv.
//
// Layout: `split` as ProgramShape::split — N+1 ascending boundaries from 0
// to the vector's size, rank r owning [split[r], split[r+1]) — or empty for
// Partition{count, N}. Every rank passes the same count and split.
//
// Cost of the pair for n bytes with pieces of equal size: the allreduce of
// the same algorithm, split in two — the ring's (N-1)α + (N-1)/N·n(β+γ) and
// (N-1)α + (N-1)/N·nβ; halving-doubling's log₂N·α each, the same bytes.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "allreduce/allreducer.h"
#include "comm/comm.h"

namespace psar {

class ShardedCollectives {
 public:
  virtual ~ShardedCollectives() = default;
  virtual std::string name() const = 0;
  // In place over data: on return piece comm.rank() holds the sum over ranks
  // of that piece; the other pieces hold partial sums (clobbered).
  virtual void reduce_scatter(Comm& comm, std::span<float> data,
                              const std::vector<int64_t>& split = {}) = 0;
  // In place: piece r of rank r's data ends on every rank.
  virtual void all_gather(Comm& comm, std::span<float> data,
                          const std::vector<int64_t>& split = {}) = 0;
};

// The pair of algorithm `algorithm` (a registry name); ConfigError naming it
// if it has none, or for a group it cannot split (check_shards).
std::unique_ptr<ShardedCollectives> make_sharded_collectives(const std::string& algorithm,
                                                             const AllreduceOptions& options);
// ConfigError if `algorithm` has no pair, or none for `ranks` ranks
// (halving_doubling: a power of two).
void check_shards(const std::string& algorithm, int ranks);

}  // namespace psar
