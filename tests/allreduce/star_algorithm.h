#pragma once
// A throwaway allreduce algorithm for the registry tests, registered by the
// test itself: every rank sends its vector to rank 0, which adds them in rank
// order and sends the sum back.

#include <cstdint>

#include "allreduce/allreducer.h"

namespace psar::testing {

// Written as a program.
inline Program star_program(const ProgramShape& shape) {
  Program p("star allreduce", shape.ranks, shape.count);
  for (int r = 1; r < shape.ranks; ++r) p.transfer(0, r, 0, 0, shape.count, true);
  for (int r = 1; r < shape.ranks; ++r) p.transfer(1, 0, r, 0, shape.count, false);
  p.finish();
  return p;
}

// N-1 sequential messages in and out of rank 0.
inline CostTerms star_cost(int ranks, int64_t bytes, const AllreduceOptions&) {
  const double n = static_cast<double>(bytes);
  return {2.0 * (ranks - 1), 2.0 * (ranks - 1) * n, (ranks - 1) * n};
}
inline int64_t star_sent_bytes(int rank, int ranks, int64_t count) {
  if (ranks == 1 || count == 0) return 0;
  return 4 * count * (rank == 0 ? ranks - 1 : 1);
}

inline const AllreducerEntry kStar{
    .name = "star_for_test",
    .summary = "gather to rank 0, add, send back (a test's own algorithm)",
    .program = &star_program,
    .cost = &star_cost};

}  // namespace psar::testing
