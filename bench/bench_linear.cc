// The linear layer's forward + backward (input and weight gradients, bias
// included) against raw OpenBLAS sgemm calls of the same three shapes, in the
// same run. Counter GFLOP/s = 3 GEMMs × 2·B·C_in·C_out per iteration; the
// layer's ratio to raw sgemm is what to read (target ≥ 0.8).
//
//   build/bench/bench_linear --benchmark_min_time=0.5 --benchmark_repetitions=5 --benchmark_report_aggregates_only=true

#include <benchmark/benchmark.h>
#include <cblas.h>

#include <vector>

#include "core/ops.h"
#include "core/rng.h"

namespace {

struct Shapes {
  int64_t B, in, out;
  std::vector<float> x, W, b, y, dy, dx, dW, db;
  Shapes(int64_t B_, int64_t in_, int64_t out_) : B(B_), in(in_), out(out_) {
    auto fill = [](std::vector<float>& v, size_t n, uint64_t s) {
      v.resize(n);
      psar::Philox::fill_normal(v, 0.1f, 1, s);
    };
    fill(x, B * in, 1), fill(W, in * out, 2), fill(b, out, 3), fill(dy, B * out, 4);
    y.resize(B * out), dx.resize(B * in), dW.resize(in * out), db.resize(out);
  }
  double flops() const { return 3.0 * 2.0 * B * in * out; }
};

void set_counters(benchmark::State& state, const Shapes& s) {
  state.counters["GFLOP/s"] = benchmark::Counter(s.flops() * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::to_string(s.B) + "x" + std::to_string(s.in) + "->" + std::to_string(s.out));
}

void BM_LinearLayerForwardBackward(benchmark::State& state) {
  psar::ops::set_blas_threads(static_cast<int>(state.range(3)));
  Shapes s(state.range(0), state.range(1), state.range(2));
  for (auto _ : state) {
    psar::ops::linear_forward(s.y.data(), s.x.data(), s.W.data(), s.b.data(), s.B, s.in, s.out);
    psar::ops::linear_backward_input(s.dx.data(), s.dy.data(), s.W.data(), s.B, s.in, s.out);
    psar::ops::linear_backward_weight(s.dW.data(), s.db.data(), s.dy.data(), s.x.data(), s.B, s.in, s.out);
    benchmark::ClobberMemory();
  }
  set_counters(state, s);
}

void BM_RawSgemmSameShapes(benchmark::State& state) {
  psar::ops::set_blas_threads(static_cast<int>(state.range(3)));
  Shapes s(state.range(0), state.range(1), state.range(2));
  const int B = static_cast<int>(s.B), in = static_cast<int>(s.in), out = static_cast<int>(s.out);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, out, in, 1.0f, s.x.data(), in,
                s.W.data(), out, 0.0f, s.y.data(), out);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, in, out, 1.0f, s.dy.data(), out,
                s.W.data(), out, 0.0f, s.dx.data(), in);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, in, out, B, 1.0f, s.x.data(), in,
                s.dy.data(), out, 1.0f, s.dW.data(), out);
    benchmark::ClobberMemory();
  }
  set_counters(state, s);
}

// {B, C_in, C_out, BLAS threads}: the quick start's layers, then larger ones.
void shapes(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2}) {
    b->Args({128, 784, 256, threads});
    b->Args({128, 256, 128, threads});
    b->Args({512, 1024, 1024, threads});
  }
  b->ArgNames({"B", "in", "out", "threads"});
}

BENCHMARK(BM_LinearLayerForwardBackward)->Apply(shapes)->UseRealTime();
BENCHMARK(BM_RawSgemmSameShapes)->Apply(shapes)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
