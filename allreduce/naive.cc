// naive — all-to-all: every rank sends its whole vector to each of the N-1
// others and adds the N vectors itself, in rank order x0 + x1 + … + x(N-1),
// so every rank performs the same additions in the same order and holds
// identical bits. Cost: one step of N-1 concurrent messages; each rank sends
// and receives (N-1)·n bytes, N(N-1)·n in all (the textbook's N²·M), and reduces
// (N-1)·n: (N-1)α + (N-1)·n(β+γ) when sends serialize on a rank's link — the
// volume grows with N², which is the scalability problem the other algorithms
// solve. Messages go in shifted order (rank r sends to r+1, r+2, … and
// receives from r-1, r-2, …), so no receiver gets all N-1 at once; every
// vector lands in its own slot of the workspace (N·n: N-1 slots and the
// accumulator — memory grows with N too), and the sum, local steps of the
// program, waits for all of them. Any N ≥ 1, any count.

#include "allreduce/algorithms.h"

namespace psar {

// Round 0: rank r's vector to r+k for k = 1..N-1, landing in slot r of the
// receiver's workspace. Round 1: slot i (the rank's own vector for i = r) is
// added in rank order into the accumulator, slot r, then copied back.
Program naive_program(const ProgramShape& shape) {
  const int N = shape.ranks;
  const int64_t n = shape.count;
  Program p("naive allreduce", N, n);
  // Whole on one host (one rendezvous per exchange); across hosts in
  // segments, below Open MPI's TCP eager limit (docs/algorithms.md, "Segments").
  p.segmented = shape.spans_nodes();
  if (N == 1 || n == 0) return p;
  p.workspace = N * n;
  auto slot = [&](int i) { return n + i * n; };
  for (int k = 1; k < N; ++k)
    for (int r = 0; r < N; ++r) p.transfer(0, r, 0, (r + k) % N, slot(r), n, false);
  for (int r = 0; r < N; ++r) {
    auto term = [&](int i) { return i == r ? 0 : slot(i); };
    p.local(r, 1, StepKind::kCopy, slot(r), term(0), n);
    for (int i = 1; i < N; ++i) p.local(r, 1, StepKind::kAdd, slot(r), term(i), n);
    p.local(r, 1, StepKind::kCopy, 0, slot(r), n);
  }
  p.finish();
  return p;
}

// (N-1) messages of n bytes, each added: (N-1)α + (N-1)·n·(β+γ).
CostTerms naive_cost(int ranks, int64_t bytes, const AllreduceOptions&) {
  const double peers = ranks - 1, n = static_cast<double>(bytes);
  return {peers, peers * n, peers * n};
}

}  // namespace psar
