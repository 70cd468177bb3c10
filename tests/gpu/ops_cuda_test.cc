// Every CUDA op (core/ops_cuda.cu) against the CPU implementation of the same
// op (core/ops.h) on the same inputs: FP32 results within 1e-5 relative (of
// the largest reference magnitude: reductions run in another order), and the
// dropout mask and optimizer updates bit for bit (same counter-based RNG, no
// FMA). The CPU side is checked against independent references in
// tests/core. Without a CUDA device every case skips with the reason; the
// error a user sees asking for one is checked here instead.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/device.h"
#include "core/errors.h"
#include "core/ops.h"
#include "core/optim.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "tests/core/conv_reference.h"

namespace psar {
namespace {

#define PSAR_NEED_CUDA()                                                                  \
  do {                                                                                    \
    const std::string why = device_unavailable_reason(Device::kCuda);                     \
    if (!why.empty()) GTEST_SKIP() << "CUDA check not run: " << why;                      \
  } while (0)

std::vector<float> random(int64_t n, uint64_t stream, float stddev = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  Philox::fill_normal(v, stddev, 2024, stream);
  return v;
}

// A CUDA copy of host data, and back.
struct OnDevice {
  explicit OnDevice(const std::vector<float>& host)
      : t(Shape{static_cast<int64_t>(host.size())}, Device::kCuda) {
    device_copy(t.data(), Device::kCuda, host.data(), Device::kCpu, t.numel());
  }
  float* ptr() { return t.data(); }
  std::vector<float> host() const {
    std::vector<float> v(static_cast<size_t>(t.numel()));
    device_copy(v.data(), Device::kCpu, t.data(), Device::kCuda, t.numel());
    return v;
  }
  Tensor t;
};

struct OnDeviceInt {
  explicit OnDeviceInt(const std::vector<int32_t>& host)
      : n(static_cast<int64_t>(host.size())), p(device_alloc_int(Device::kCuda, n)) {
    device_copy(p, Device::kCuda, host.data(), Device::kCpu, n);
  }
  ~OnDeviceInt() { device_free_int(Device::kCuda, p); }
  int64_t n;
  int32_t* p;
};

void expect_close(const std::vector<float>& cuda, const std::vector<float>& cpu,
                  const char* what, double rel = 1e-5) {
  ASSERT_EQ(cuda.size(), cpu.size()) << what;
  double scale = 0.0;
  for (float x : cpu) scale = std::max(scale, static_cast<double>(std::fabs(x)));
  for (size_t i = 0; i < cpu.size(); ++i)
    ASSERT_LE(std::fabs(static_cast<double>(cuda[i]) - cpu[i]), rel * std::max(scale, 1e-30))
        << what << " element " << i << ": cuda " << cuda[i] << " cpu " << cpu[i];
}

void expect_bitwise(const std::vector<float>& cuda, const std::vector<float>& cpu,
                    const char* what) {
  ASSERT_EQ(cuda.size(), cpu.size()) << what;
  EXPECT_EQ(std::memcmp(cuda.data(), cpu.data(), cpu.size() * sizeof(float)), 0) << what;
}

TEST(CudaDevice, AskingForCudaWithoutOneNamesTheKeyAndTheReason) {
  if (device_unavailable_reason(Device::kCuda).empty()) GTEST_SKIP() << "a CUDA device is present";
  try {
    require_device(Device::kCuda, "train.device");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("train.device"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr(cuda_built() ? "no CUDA device" : "without CUDA"));
  }
  EXPECT_THROW(parse_device("gpu", "train.device"), ConfigError);
  EXPECT_EQ(parse_device("cuda", "train.device"), Device::kCuda);
}

TEST(CudaOps, TensorRoundTrip) {
  PSAR_NEED_CUDA();
  const auto host = random(1001, 1);
  OnDevice d(host);
  expect_bitwise(d.host(), host, "round trip");
  Tensor back = d.t.to(Device::kCpu);
  EXPECT_EQ(back.device(), Device::kCpu);
  EXPECT_EQ(std::memcmp(back.data(), host.data(), host.size() * sizeof(float)), 0);
  d.t.zero();
  expect_bitwise(d.host(), std::vector<float>(host.size(), 0.0f), "zero");
}

// GEMM in all four transpose combinations, with beta ≠ 0 and padded leading
// dimensions, and K = 0.
TEST(CudaOps, GemmMatchesCpu) {
  PSAR_NEED_CUDA();
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (int64_t K : {int64_t{0}, int64_t{1}, int64_t{67}}) {
        const int64_t M = 37, N = 45;
        const int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 2, ldc = N + 5;
        const auto A = random((ta ? K : M) * lda, 2), B = random((tb ? N : K) * ldb, 3);
        auto C = random(M * ldc, 4);
        OnDevice dA(A), dB(B), dC(C);
        ops::gemm(ta, tb, M, N, K, 0.7f, A.data(), lda, B.data(), ldb, 0.3f, C.data(), ldc);
        {
          DeviceScope cuda(Device::kCuda);
          ops::gemm(ta, tb, M, N, K, 0.7f, dA.ptr(), lda, dB.ptr(), ldb, 0.3f, dC.ptr(), ldc);
        }
        expect_close(dC.host(), C, "gemm");
      }
}

TEST(CudaOps, LinearForwardAndBackwardMatchCpu) {
  PSAR_NEED_CUDA();
  const int64_t B = 19, Ci = 33, Co = 29;
  const auto x = random(B * Ci, 5), w = random(Ci * Co, 6), b = random(Co, 7),
             dy = random(B * Co, 8);
  std::vector<float> y(B * Co), dx = random(B * Ci, 9), dw = random(Ci * Co, 10),
                                db = random(Co, 11);
  OnDevice dX(x), dW(w), dB(b), dDy(dy), dY(y), dDx(dx), dDw(dw), dDb(db);
  ops::linear_forward(y.data(), x.data(), w.data(), b.data(), B, Ci, Co);
  ops::linear_backward_input(dx.data(), dy.data(), w.data(), B, Ci, Co, /*accumulate=*/true);
  ops::linear_backward_weight(dw.data(), db.data(), dy.data(), x.data(), B, Ci, Co);
  {
    DeviceScope cuda(Device::kCuda);
    ops::linear_forward(dY.ptr(), dX.ptr(), dW.ptr(), dB.ptr(), B, Ci, Co);
    ops::linear_backward_input(dDx.ptr(), dDy.ptr(), dW.ptr(), B, Ci, Co, true);
    ops::linear_backward_weight(dDw.ptr(), dDb.ptr(), dDy.ptr(), dX.ptr(), B, Ci, Co);
  }
  expect_close(dY.host(), y, "linear forward");
  expect_close(dDx.host(), dx, "linear backward input");
  expect_close(dDw.host(), dw, "linear backward weight");
  expect_close(dDb.host(), db, "linear backward bias");
}

TEST(CudaOps, ActivationsMatchCpu) {
  PSAR_NEED_CUDA();
  const int64_t n = 100003;
  const auto x = random(n, 12, 3.0f), dy = random(n, 13);
  for (bool gelu : {false, true}) {
    std::vector<float> y(n), dx(n);
    OnDevice dX(x), dDy(dy), dY(y), dDx(dx);
    if (gelu) {
      ops::gelu_forward(y.data(), x.data(), n);
      ops::gelu_backward(dx.data(), dy.data(), x.data(), n);
    } else {
      ops::relu_forward(y.data(), x.data(), n);
      ops::relu_backward(dx.data(), dy.data(), x.data(), n);
    }
    {
      DeviceScope cuda(Device::kCuda);
      if (gelu) {
        ops::gelu_forward(dY.ptr(), dX.ptr(), n);
        ops::gelu_backward(dDx.ptr(), dDy.ptr(), dX.ptr(), n);
      } else {
        ops::relu_forward(dY.ptr(), dX.ptr(), n);
        ops::relu_backward(dDx.ptr(), dDy.ptr(), dX.ptr(), n);
      }
    }
    // tanhf on the device and std::tanh on the host may differ in the last
    // bits: compare elementwise to 1e-5 of the element's own magnitude.
    const auto gy = dY.host(), gdx = dDx.host();
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_NEAR(gy[i], y[i], 1e-5 * std::max(1.0f, std::fabs(y[i]))) << (gelu ? "gelu" : "relu") << " " << i;
      ASSERT_NEAR(gdx[i], dx[i], 1e-5 * std::max(1.0f, std::fabs(dx[i]))) << (gelu ? "gelu'" : "relu'") << " " << i;
    }
  }
}

TEST(CudaOps, LayerNormMatchesCpu) {
  PSAR_NEED_CUDA();
  // C above and below the kernel's 256 threads per row.
  for (int64_t C : {int64_t{48}, int64_t{769}}) {
    const int64_t N = 23;
    const auto x = random(N * C, 14, 2.0f), w = random(C, 15), b = random(C, 16),
               dy = random(N * C, 17);
    std::vector<float> y(N * C), mean(N), rstd(N), dx = random(N * C, 18), dw = random(C, 19),
                                                    db = random(C, 20);
    OnDevice dX(x), dW(w), dB(b), dDy(dy), dY(y), dMean(mean), dRstd(rstd), dDx(dx), dDw(dw),
        dDb(db);
    ops::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    ops::layernorm_backward_input(dx.data(), dy.data(), x.data(), w.data(), mean.data(),
                                  rstd.data(), N, C, /*accumulate=*/true);
    ops::layernorm_backward_weight(dw.data(), db.data(), dy.data(), x.data(), mean.data(),
                                   rstd.data(), N, C);
    {
      DeviceScope cuda(Device::kCuda);
      ops::layernorm_forward(dY.ptr(), dMean.ptr(), dRstd.ptr(), dX.ptr(), dW.ptr(), dB.ptr(), N,
                             C);
      ops::layernorm_backward_input(dDx.ptr(), dDy.ptr(), dX.ptr(), dW.ptr(), dMean.ptr(),
                                    dRstd.ptr(), N, C, true);
      ops::layernorm_backward_weight(dDw.ptr(), dDb.ptr(), dDy.ptr(), dX.ptr(), dMean.ptr(),
                                     dRstd.ptr(), N, C);
    }
    expect_close(dY.host(), y, "layernorm forward");
    expect_close(dMean.host(), mean, "layernorm mean");
    expect_close(dRstd.host(), rstd, "layernorm rstd");
    expect_close(dDx.host(), dx, "layernorm backward input");
    expect_close(dDw.host(), dw, "layernorm backward weight");
    expect_close(dDb.host(), db, "layernorm backward bias");
  }
}

// Within rel of the largest magnitude of a double-precision reference.
void expect_close_to_reference(const std::vector<float>& got, const std::vector<double>& want,
                               const char* what, double rel = 1e-5) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 0.0;
  for (double x : want) scale = std::max(scale, std::fabs(x));
  for (size_t i = 0; i < want.size(); ++i)
    ASSERT_LE(std::fabs(got[i] - want[i]), rel * std::max(scale, 1.0))
        << what << " element " << i << ": cuda " << got[i] << " reference " << want[i];
}

// The convolution (im2col + cuBLAS, col2im) forward, input gradient (which
// overwrites) and weight and bias gradients (which accumulate onto what is
// there) against the CPU on the same inputs, and against the direct
// double-precision convolution and its adjoints (tests/core/conv_reference.h):
// stride 1 to 3, padding 0 to 2, 1×1 to 5×5 kernels, a kernel larger than the
// unpadded image, non-square images, with and without a bias, and a stage of
// the Fashion-MNIST network.
TEST(CudaOps, Conv2dForwardAndBackwardMatchCpuAndTheDoubleReference) {
  PSAR_NEED_CUDA();
  struct Case {
    ops::Conv2dShape s;
    int64_t N;
    bool bias;
  };
  const Case cases[] = {{{3, 13, 11, 5, 3, 1, 1}, 3, true},  {{2, 9, 10, 4, 3, 2, 0}, 2, true},
                        {{1, 28, 28, 8, 5, 2, 2}, 2, false}, {{4, 7, 7, 3, 1, 1, 0}, 2, true},
                        {{1, 2, 2, 2, 3, 1, 1}, 3, true},    {{2, 8, 9, 3, 3, 3, 2}, 2, true},
                        {{32, 14, 14, 64, 3, 1, 1}, 4, true}};
  uint64_t stream = 40;
  for (const Case& c : cases) {
    const ops::Conv2dShape& s = c.s;
    SCOPED_TRACE(::testing::Message() << "C_in " << s.C_in << " " << s.H << "x" << s.W << " C_out "
                                      << s.C_out << " K " << s.K << " stride " << s.stride
                                      << " pad " << s.pad << " N " << c.N << " bias " << c.bias);
    const int64_t out_n = c.N * s.C_out * s.H_out() * s.W_out();
    const auto x = random(c.N * s.C_in * s.H * s.W, stream++), w = random(s.weight_numel(), stream++),
               b = random(s.C_out, stream++), dy = random(out_n, stream++);
    // Outputs start as garbage (overwritten), gradients as random values (accumulated onto).
    std::vector<float> y = random(out_n, stream++), dx = random(x.size(), stream++),
                       dw = random(w.size(), stream++), db = random(b.size(), stream++),
                       cols(static_cast<size_t>(s.col_rows() * s.col_cols()));
    const auto dw0 = dw, db0 = db;
    OnDevice dX(x), dW(w), dB(b), dDy(dy), dY(y), dDx(dx), dDw(dw), dDb(db), dCols(cols);
    const float* bias = c.bias ? b.data() : nullptr;
    ops::conv2d_forward(y.data(), x.data(), w.data(), bias, c.N, s, cols.data());
    ops::conv2d_backward_input(dx.data(), dy.data(), w.data(), c.N, s, cols.data());
    ops::conv2d_backward_weight(dw.data(), c.bias ? db.data() : nullptr, dy.data(), x.data(), c.N,
                                s, cols.data());
    {
      DeviceScope cuda(Device::kCuda);
      ops::conv2d_forward(dY.ptr(), dX.ptr(), dW.ptr(), c.bias ? dB.ptr() : nullptr, c.N, s,
                          dCols.ptr());
      ops::conv2d_backward_input(dDx.ptr(), dDy.ptr(), dW.ptr(), c.N, s, dCols.ptr());
      ops::conv2d_backward_weight(dDw.ptr(), c.bias ? dDb.ptr() : nullptr, dDy.ptr(), dX.ptr(),
                                  c.N, s, dCols.ptr());
      device_synchronize(Device::kCuda);
    }
    const auto gy = dY.host(), gdx = dDx.host(), gdw = dDw.host(), gdb = dDb.host();
    expect_close(gy, y, "conv2d forward");
    expect_close(gdx, dx, "conv2d backward input");
    expect_close(gdw, dw, "conv2d backward weight");
    expect_close(gdb, db, "conv2d backward bias");

    const std::vector<double> xd(x.begin(), x.end()), wd(w.begin(), w.end()),
        bd = c.bias ? std::vector<double>(b.begin(), b.end()) : std::vector<double>(b.size(), 0.0);
    expect_close_to_reference(gy, conv_ref(xd, wd, bd, c.N, s), "conv2d forward (double)");
    const ConvRefGrads g = conv_ref_backward(xd, wd, std::vector<double>(dy.begin(), dy.end()), c.N, s);
    expect_close_to_reference(gdx, g.dx, "conv2d backward input (double)");
    std::vector<double> want_dw(g.dw), want_db(db0.begin(), db0.end());
    for (size_t i = 0; i < want_dw.size(); ++i) want_dw[i] += dw0[i];
    if (c.bias)
      for (size_t i = 0; i < want_db.size(); ++i) want_db[i] += g.db[i];
    expect_close_to_reference(gdw, want_dw, "conv2d backward weight (double)");
    expect_close_to_reference(gdb, want_db, "conv2d backward bias (double)");
  }
}

// Max pooling on inputs with many ties (values on a grid of 0.5): the first
// maximum of each window wins on both sides, so forward and backward equal
// the CPU bit for bit, -0 gradients and the dropped edge rows and columns
// (which get 0) included; the forward also equals the double reference.
TEST(CudaOps, MaxPoolForwardAndBackwardMatchCpuBitForBit) {
  PSAR_NEED_CUDA();
  struct Case {
    int64_t NC, H, W, P;
  };
  uint64_t stream = 70;
  for (const Case c : {Case{10, 9, 11, 2}, Case{6, 9, 11, 3}, Case{64, 28, 28, 2}, Case{3, 4, 4, 4}}) {
    SCOPED_TRACE(::testing::Message() << "NC " << c.NC << " " << c.H << "x" << c.W << " P " << c.P);
    auto x = random(c.NC * c.H * c.W, stream++);
    for (float& v : x) v = std::round(v * 2.0f) / 2.0f;
    const int64_t out_n = c.NC * (c.H / c.P) * (c.W / c.P);
    auto dy = random(out_n, stream++);
    dy[0] = -0.0f;
    std::vector<float> y = random(out_n, stream++), dx = random(x.size(), stream++);
    OnDevice dX(x), dDy(dy), dY(y), dDx(dx);
    ops::maxpool2d_forward(y.data(), x.data(), c.NC, c.H, c.W, c.P);
    ops::maxpool2d_backward(dx.data(), dy.data(), x.data(), c.NC, c.H, c.W, c.P);
    {
      DeviceScope cuda(Device::kCuda);
      ops::maxpool2d_forward(dY.ptr(), dX.ptr(), c.NC, c.H, c.W, c.P);
      ops::maxpool2d_backward(dDx.ptr(), dDy.ptr(), dX.ptr(), c.NC, c.H, c.W, c.P);
    }
    const auto gy = dY.host();
    expect_bitwise(gy, y, "maxpool forward");
    expect_bitwise(dDx.host(), dx, "maxpool backward");
    const auto want = pool_ref(std::vector<double>(x.begin(), x.end()), c.NC, c.H, c.W, c.P);
    for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(static_cast<double>(gy[i]), want[i]) << i;
  }
}

TEST(CudaOps, SoftmaxCrossEntropyAndAccuracyMatchCpu) {
  PSAR_NEED_CUDA();
  const int64_t B = 37, V = 1000;
  auto logits = random(B * V, 21, 4.0f);
  logits[5 * V + 3] = logits[5 * V + 700] = 1e3f;  // a tie: the first index wins, as on the CPU
  std::vector<int32_t> targets(B);
  for (int64_t b = 0; b < B; ++b) targets[b] = static_cast<int32_t>((b * 131) % V);
  targets[5] = 3;
  std::vector<float> dlogits(B * V);
  OnDevice dLogits(logits), dD(dlogits);
  OnDeviceInt dT(targets);
  const double loss =
      ops::softmax_cross_entropy(logits.data(), targets.data(), B, V, dlogits.data(), 0.5f);
  const int64_t correct = ops::count_correct(logits.data(), targets.data(), B, V);
  DeviceScope cuda(Device::kCuda);
  const double cuda_loss = ops::softmax_cross_entropy(dLogits.ptr(), dT.p, B, V, dD.ptr(), 0.5f);
  EXPECT_NEAR(cuda_loss, loss, 1e-5 * std::fabs(loss));
  expect_close(dD.host(), dlogits, "dlogits");
  EXPECT_EQ(ops::count_correct(dLogits.ptr(), dT.p, B, V), correct);
  EXPECT_GE(correct, 1);
}

TEST(CudaOps, CausalSoftmaxForwardAndBackwardMatchCpu) {
  PSAR_NEED_CUDA();
  for (int64_t T : {int64_t{1}, int64_t{7}, int64_t{300}}) {
    auto p = random(T * T, 30, 3.0f);
    auto dp = random(T * T, 31);
    OnDevice dP(p), dDp(dp);
    ops::causal_softmax_forward(p.data(), T);
    ops::causal_softmax_backward(dp.data(), p.data(), T);
    {
      DeviceScope cuda(Device::kCuda);
      ops::causal_softmax_forward(dP.ptr(), T);
      ops::causal_softmax_backward(dDp.ptr(), dP.ptr(), T);
    }
    expect_close(dP.host(), p, "causal softmax forward");
    expect_close(dDp.host(), dp, "causal softmax backward");
  }
}

TEST(CudaOps, DropoutMaskIsTheCpuMaskBitForBit) {
  PSAR_NEED_CUDA();
  const int64_t n = 123457;
  const auto x = random(n, 22);
  for (float p : {0.0f, 0.1f, 0.5f}) {
    std::vector<float> y(n), dx(n);
    OnDevice dX(x), dY(y), dDx(dx);
    ops::dropout_forward(y.data(), x.data(), n, p, 99, 5, 1000);
    ops::dropout_backward(dx.data(), x.data(), n, p, 99, 5, 1000);
    {
      DeviceScope cuda(Device::kCuda);
      ops::dropout_forward(dY.ptr(), dX.ptr(), n, p, 99, 5, 1000);
      ops::dropout_backward(dDx.ptr(), dX.ptr(), n, p, 99, 5, 1000);
    }
    expect_bitwise(dY.host(), y, "dropout forward");
    expect_bitwise(dDx.host(), dx, "dropout backward");
  }
}

TEST(CudaOps, ReductionsMatchCpuBitForBit) {
  PSAR_NEED_CUDA();
  const int64_t n = 65537;
  const auto a = random(n, 23), b = random(n, 24);
  std::vector<float> sum(n), acc = a;
  OnDevice dA(a), dB(b), dSum(sum), dAcc(acc);
  ops::add(sum.data(), a.data(), b.data(), n);
  ops::add_inplace(acc.data(), b.data(), n);
  ops::scale(acc.data(), 0.25f, n);
  {
    DeviceScope cuda(Device::kCuda);
    ops::add(dSum.ptr(), dA.ptr(), dB.ptr(), n);
    ops::add_inplace(dAcc.ptr(), dB.ptr(), n);
    ops::scale(dAcc.ptr(), 0.25f, n);
  }
  expect_bitwise(dSum.host(), sum, "add");
  expect_bitwise(dAcc.host(), acc, "add_inplace + scale");
}

// The optimizers' state on the device; five steps, then parameters and state
// equal the CPU optimizer's bit for bit.
TEST(CudaOptim, SgdMomentumAndAdamMatchCpuBitForBit) {
  PSAR_NEED_CUDA();
  const int64_t n = 4099;
  for (const char* type : {"sgd", "adam"})
    for (float momentum : {0.0f, 0.9f}) {
      OptimizerOptions o;
      o.type = type;
      o.lr = 0.01f;
      o.momentum = momentum;
      o.weight_decay = 0.01f;
      auto cpu = make_optimizer(o, n);
      auto cuda = make_optimizer(o, n, Device::kCuda);
      EXPECT_EQ(cuda->device(), Device::kCuda);
      auto p = random(n, 25);
      OnDevice dP(p);
      for (int step = 0; step < 5; ++step) {
        const auto g = random(n, 26 + step);
        OnDevice dG(g);
        cpu->step(p, g);
        cuda->step(dP.t.span(), dG.t.span());
      }
      expect_bitwise(dP.host(), p, type);
      const auto cpu_state = cpu->state(), cuda_state = cuda->state();
      ASSERT_EQ(cpu_state.size(), cuda_state.size());
      for (size_t s = 0; s < cpu_state.size(); ++s) {
        std::vector<float> host(cuda_state[s].size());
        device_copy(host.data(), Device::kCpu, cuda_state[s].data(), Device::kCuda, n);
        expect_bitwise(host, {cpu_state[s].begin(), cpu_state[s].end()}, "optimizer state");
      }
    }
}

}  // namespace
}  // namespace psar
