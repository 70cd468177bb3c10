// The server side of one bsp clock on a 16 MiB parameter-server shard:
// average the N workers' pushed gradients (in worker order) and step the
// optimizer over the shard — ShardState::push, exactly what Server runs —
// beside a plain memcpy of the same 16 MiB.
//
// bytes_per_second counts the gradient bytes a clock consumes (N pushes of
// 16 MiB), so a row reads directly against memcpy's 16 MiB; the target is
// >= 50% of memcpy. `traffic` is the memory traffic per second: memcpy reads
// and writes (2x); sgd reads g and p and writes p (3x), plus N reads and a
// write to average N > 1 gradients into worker 0's buffer; momentum adds a
// read and a write of the velocity; adam two of each.
//
//   build-ps/bench/bench_ps_server --benchmark_counters_tabular=true

#include <benchmark/benchmark.h>

#include <cstring>
#include <vector>

#include "ps/shard_state.h"

namespace {

constexpr int64_t kShardBytes = 16 << 20;
constexpr int64_t kFloats = kShardBytes / 4;

// `traffic` is per shard byte: memory bytes moved per 16 MiB of the shard.
void set_rates(benchmark::State& state, int workers, double traffic) {
  const double shard = static_cast<double>(state.iterations()) * kShardBytes;
  state.SetBytesProcessed(static_cast<int64_t>(shard * workers));
  state.counters["traffic"] =
      benchmark::Counter(shard * traffic, benchmark::Counter::kIsRate, benchmark::Counter::kIs1024);
}

void BM_Memcpy(benchmark::State& state) {
  std::vector<float> dst(kFloats), src(kFloats, 1.0f);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), kShardBytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  set_rates(state, 1, 2.0);
}
BENCHMARK(BM_Memcpy)->Unit(benchmark::kMillisecond);

// state.range(0): workers N; range(1): 0 sgd, 1 sgd + momentum, 2 adam.
void BM_ShardClock(benchmark::State& state) {
  const int workers = static_cast<int>(state.range(0));
  psar::OptimizerOptions opt;
  const double update_traffic[] = {3.0, 5.0, 7.0};
  const char* names[] = {"sgd", "sgd_momentum", "adam"};
  opt.type = state.range(1) == 2 ? "adam" : "sgd";
  opt.lr = 1e-3f;
  opt.momentum = state.range(1) == 1 ? 0.9f : 0.0f;
  state.SetLabel(names[state.range(1)]);
  const std::vector<float> initial(kFloats, 0.5f);
  psar::ps::ShardState shard({{0, kFloats}, workers, psar::ps::Consistency::kBsp, 0, opt}, initial);
  std::vector<std::vector<float>> pushed(workers, std::vector<float>(kFloats, 1e-3f));
  int64_t clock = 0;
  for (auto _ : state) {
    for (int w = 0; w < workers; ++w)
      shard.push(w, clock, {std::span<float>(pushed[w]), nullptr});  // the last one applies
    ++clock;
    benchmark::ClobberMemory();
  }
  const double average_traffic = workers > 1 ? workers + 1.0 : 0.0;
  set_rates(state, workers, update_traffic[state.range(1)] + average_traffic);
}
BENCHMARK(BM_ShardClock)
    ->ArgNames({"workers", "opt"})
    ->Args({1, 0})
    ->Args({1, 1})
    ->Args({1, 2})
    ->Args({4, 0})
    ->Args({4, 1})
    ->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
