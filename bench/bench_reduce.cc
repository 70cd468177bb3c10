// The local reduction kernel of every collective (ops::add_inplace, and
// ops::add of two sources), beside memcpy of the same payload: γ of the α-β-γ
// model is the reciprocal of the reduction rate. bytes_per_second counts the
// payload (n floats · 4 bytes) so the three rows compare directly; the
// `traffic` counter is the memory traffic per second (add_inplace reads two
// vectors and writes one: 3×; add 3×; memcpy 2×).
//
//   build/bench/bench_reduce --benchmark_counters_tabular=true

#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "core/ops.h"

namespace {

void set_rates(benchmark::State& state, int64_t n, double traffic_factor) {
  const double payload = static_cast<double>(state.iterations()) * static_cast<double>(n) * 4;
  state.SetBytesProcessed(static_cast<int64_t>(payload));
  state.counters["traffic"] =
      benchmark::Counter(payload * traffic_factor, benchmark::Counter::kIsRate,
                         benchmark::Counter::kIs1024);
}

void BM_AddInplace(benchmark::State& state) {
  const int64_t n = state.range(0) / 4;
  std::vector<float> dst(static_cast<size_t>(n), 1.0f), src(static_cast<size_t>(n), 0.0f);
  for (auto _ : state) {
    psar::ops::add_inplace(dst.data(), src.data(), n);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_rates(state, n, 3.0);
}

void BM_AddTwoSources(benchmark::State& state) {
  const int64_t n = state.range(0) / 4;
  std::vector<float> dst(static_cast<size_t>(n)), a(static_cast<size_t>(n), 1.0f),
      b(static_cast<size_t>(n), 2.0f);
  for (auto _ : state) {
    psar::ops::add(dst.data(), a.data(), b.data(), n);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_rates(state, n, 3.0);
}

void BM_Memcpy(benchmark::State& state) {
  const int64_t n = state.range(0) / 4;
  std::vector<float> dst(static_cast<size_t>(n)), src(static_cast<size_t>(n), 1.0f);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), static_cast<size_t>(n) * 4);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_rates(state, n, 2.0);
}

// 4 KiB (L1) through 64 MiB (far past the last-level cache), ×4 steps.
BENCHMARK(BM_AddInplace)->RangeMultiplier(4)->Range(4 << 10, 64 << 20);
BENCHMARK(BM_AddTwoSources)->RangeMultiplier(4)->Range(4 << 10, 64 << 20);
BENCHMARK(BM_Memcpy)->RangeMultiplier(4)->Range(4 << 10, 64 << 20);

}  // namespace

BENCHMARK_MAIN();
