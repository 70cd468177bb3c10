// The local GEMM of one tensor-parallel shard, Y[n, n/p] = X[n, n] · A[n, n/p]
// (A split by columns over p ranks), beside the serial Y = X·A (p = 1), on one
// core. The lecture notes' table (2-byte elements):
//   serial        FLOPs 2n³     bytes 6n²           intensity n/3
//   column-split  FLOPs 2n³/p   bytes 2n²(1 + 2/p)  intensity n/(2+p)
// Counters per run: GFLOP/s measured, and the formula's FLOPs, bytes and
// intensity for its (n, p). What to read: how the shard's GFLOP/s falls as p
// grows — a thinner GEMM has lower arithmetic intensity. experiments/tp_report.py
// turns the JSON into results/tp/gemm.md.
//
//   build/bench/bench_tp_gemm --benchmark_min_time=0.2 --benchmark_format=json >
//   results/tp/gemm.json

#include <benchmark/benchmark.h>

#include <vector>

#include "core/ops.h"
#include "core/rng.h"

namespace {

void BM_ShardGemm(benchmark::State& state) {
  const int64_t n = state.range(0), p = state.range(1), c = n / p;
  psar::ops::set_blas_threads(1);
  std::vector<float> X(n * n), A(n * c), Y(n * c);
  psar::Philox::fill_normal(X, 1.0f, 1, 1);
  psar::Philox::fill_normal(A, 1.0f, 1, 2);
  for (auto _ : state) {
    psar::ops::gemm(false, false, n, c, n, 1.0f, X.data(), n, A.data(), c, 0.0f, Y.data(), c);
    benchmark::ClobberMemory();
  }
  const double nd = static_cast<double>(n), pd = static_cast<double>(p);
  const double flops = 2.0 * nd * nd * nd / pd;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["flops"] = flops;
  state.counters["bytes_fp16"] = 2.0 * nd * nd * (1.0 + 2.0 / pd);
  state.counters["intensity"] = nd / (2.0 + pd);
}

void shapes(benchmark::internal::Benchmark* b) {
  for (int n : {256, 512, 1024})
    for (int p : {1, 2, 4, 8}) b->Args({n, p});
  b->ArgNames({"n", "p"});
}

BENCHMARK(BM_ShardGemm)->Apply(shapes)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
