// GEMMs on a CUDA device: through psar's op seam (ops::gemm and the layer's
// ops::linear_forward with its bias, on a thread whose current device is
// CUDA) beside bare cublasSgemm on the same shapes, in the same run — the
// seam's overhead is the ratio of the rows. Shapes: the GPT block's MLP GEMMs
// of one tensor-parallel shard, Y[N, 4d/t] = X[N, d]·W1 and Y[N, d] =
// H[N, 4d/t]·W2, for N = b·T tokens, model width d and t shards. Counters:
// TFLOP/s and its fraction of the device's FP32 peak (PSAR_PEAK_FLOPS, default
// 67e12: an H100 SXM's FP32 without tensor cores; cuBLAS runs FP32 here, no
// TF32). Without a CUDA device (or a CUDA build) every row is skipped with
// the reason.
//
//   build/bench/bench_cuda_gemm --benchmark_counters_tabular=true
//     --benchmark_repetitions=5 --benchmark_report_aggregates_only=true   (one line)

#include <benchmark/benchmark.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/ops.h"
#include "core/rng.h"
#include "core/tensor.h"

#if PSAR_HAVE_CUDA
#include <cublas_v2.h>
#endif

namespace {

using psar::Device;

double peak_flops() {
  const char* s = std::getenv("PSAR_PEAK_FLOPS");
  return s ? std::atof(s) : 67e12;
}

// One shard's GEMM: rows N, inner K, columns M (row-major X[N,K]·W[K,M]).
struct Shape {
  int64_t N, K, M;
};
Shape shape_of(const benchmark::State& state) {
  const int64_t N = state.range(0), d = state.range(1), t = state.range(2);
  return state.range(3) == 0 ? Shape{N, d, 4 * d / t} : Shape{N, 4 * d / t, d};
}

struct Operands {
  explicit Operands(const Shape& s)
      : X({s.N, s.K}, Device::kCuda), W({s.K, s.M}, Device::kCuda),
        bias({s.M}, Device::kCuda), Y({s.N, s.M}, Device::kCuda) {
    for (auto* t : {&X, &W, &bias}) {
      std::vector<float> host(static_cast<size_t>(t->numel()));
      psar::Philox::fill_normal(host, 1.0f, 1, static_cast<uint64_t>(t->numel()));
      psar::device_copy(t->data(), Device::kCuda, host.data(), Device::kCpu, t->numel());
    }
  }
  psar::Tensor X, W, bias, Y;
};

void set_counters(benchmark::State& state, const Shape& s) {
  const double flops = 2.0 * static_cast<double>(s.N) * static_cast<double>(s.K) *
                       static_cast<double>(s.M);
  state.counters["TFLOP/s"] =
      benchmark::Counter(flops * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["peak_share"] = benchmark::Counter(
      flops / peak_flops(), benchmark::Counter::kIsIterationInvariantRate);
}

bool skip_without_device(benchmark::State& state) {
  const std::string why = psar::device_unavailable_reason(Device::kCuda);
  if (why.empty()) return false;
  state.SkipWithError(("no CUDA run: " + why).c_str());
  return true;
}

void BM_SeamGemm(benchmark::State& state) {
  if (skip_without_device(state)) return;
  const Shape s = shape_of(state);
  Operands o(s);
  const psar::DeviceScope cuda(Device::kCuda);
  for (auto _ : state) {
    psar::ops::gemm(false, false, s.N, s.M, s.K, 1.0f, o.X.data(), s.K, o.W.data(), s.M, 0.0f,
                    o.Y.data(), s.M);
    psar::device_synchronize(Device::kCuda);
  }
  set_counters(state, s);
}

void BM_SeamLinear(benchmark::State& state) {
  if (skip_without_device(state)) return;
  const Shape s = shape_of(state);
  Operands o(s);
  const psar::DeviceScope cuda(Device::kCuda);
  for (auto _ : state) {
    psar::ops::linear_forward(o.Y.data(), o.X.data(), o.W.data(), o.bias.data(), s.N, s.K, s.M);
    psar::device_synchronize(Device::kCuda);
  }
  set_counters(state, s);
}

void BM_BareCublas(benchmark::State& state) {
  if (skip_without_device(state)) return;
#if PSAR_HAVE_CUDA
  const Shape s = shape_of(state);
  Operands o(s);
  cublasHandle_t handle = nullptr;
  if (cublasCreate(&handle) != CUBLAS_STATUS_SUCCESS) {
    state.SkipWithError("cublasCreate failed");
    return;
  }
  const float one = 1.0f, zero = 0.0f;
  for (auto _ : state) {
    // Row-major Y = X·W as column-major Yᵀ = Wᵀ·Xᵀ.
    cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(s.M), static_cast<int>(s.N),
                static_cast<int>(s.K), &one, o.W.data(), static_cast<int>(s.M), o.X.data(),
                static_cast<int>(s.K), &zero, o.Y.data(), static_cast<int>(s.M));
    psar::device_synchronize(Device::kCuda);
  }
  cublasDestroy(handle);
  set_counters(state, s);
#endif
}

// N = b·T tokens, d, t, which GEMM (0: X·W1 into 4d/t; 1: H·W2 back to d).
void gpt_shapes(benchmark::internal::Benchmark* b) {
  for (int64_t N : {2048, 8192})
    for (int64_t d : {1024, 2048})
      for (int64_t t : {1, 2, 4, 8})
        for (int64_t which : {0, 1}) b->Args({N, d, t, which});
  b->ArgNames({"N", "d", "t", "w2"});
}

BENCHMARK(BM_SeamGemm)->Apply(gpt_shapes)->UseRealTime();
BENCHMARK(BM_SeamLinear)->Apply(gpt_shapes)->UseRealTime();
BENCHMARK(BM_BareCublas)->Apply(gpt_shapes)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
