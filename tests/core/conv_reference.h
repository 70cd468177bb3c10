#pragma once
// Direct double-precision convolution and max pooling (nested loops, no
// im2col, no GEMM): the independent reference of the float kernels in
// core/ops.h, for the CPU gradient checks (tests/core/conv_gradcheck_test.cc)
// and the CUDA comparisons (tests/gpu/ops_cuda_test.cc).

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/ops.h"

namespace psar {

// Direct convolution in double: out [N, C_out, H_out, W_out].
inline std::vector<double> conv_ref(const std::vector<double>& x, const std::vector<double>& w,
                                    const std::vector<double>& b, int64_t N,
                                    const ops::Conv2dShape& s) {
  const int64_t Ho = s.H_out(), Wo = s.W_out();
  std::vector<double> y(static_cast<size_t>(N * s.C_out * Ho * Wo));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < s.C_out; ++o)
      for (int64_t i = 0; i < Ho; ++i)
        for (int64_t j = 0; j < Wo; ++j) {
          double acc = b[static_cast<size_t>(o)];
          for (int64_t c = 0; c < s.C_in; ++c)
            for (int64_t ki = 0; ki < s.K; ++ki)
              for (int64_t kj = 0; kj < s.K; ++kj) {
                const int64_t yy = i * s.stride - s.pad + ki, xx = j * s.stride - s.pad + kj;
                if (yy < 0 || yy >= s.H || xx < 0 || xx >= s.W) continue;
                acc += w[static_cast<size_t>(((o * s.C_in + c) * s.K + ki) * s.K + kj)] *
                       x[static_cast<size_t>(((n * s.C_in + c) * s.H + yy) * s.W + xx)];
              }
          y[static_cast<size_t>(((n * s.C_out + o) * Ho + i) * Wo + j)] = acc;
        }
  return y;
}

inline std::vector<double> pool_ref(const std::vector<double>& x, int64_t NC, int64_t H, int64_t W,
                                    int64_t P) {
  const int64_t Ho = H / P, Wo = W / P;
  std::vector<double> y(static_cast<size_t>(NC * Ho * Wo));
  for (int64_t c = 0; c < NC; ++c)
    for (int64_t i = 0; i < Ho; ++i)
      for (int64_t j = 0; j < Wo; ++j) {
        double m = -1e300;
        for (int64_t a = 0; a < P; ++a)
          for (int64_t bb = 0; bb < P; ++bb)
            m = std::max(m, x[static_cast<size_t>((c * H + i * P + a) * W + j * P + bb)]);
        y[static_cast<size_t>((c * Ho + i) * Wo + j)] = m;
      }
  return y;
}

// The adjoints of conv_ref at output gradient dy [N, C_out, H_out, W_out]:
// dx [N, C_in, H, W], dw [C_out, C_in·K·K] and db [C_out], each summed in double.
struct ConvRefGrads {
  std::vector<double> dx, dw, db;
};
inline ConvRefGrads conv_ref_backward(const std::vector<double>& x, const std::vector<double>& w,
                                      const std::vector<double>& dy, int64_t N,
                                      const ops::Conv2dShape& s) {
  const int64_t Ho = s.H_out(), Wo = s.W_out();
  ConvRefGrads g{std::vector<double>(x.size()), std::vector<double>(w.size()),
                 std::vector<double>(static_cast<size_t>(s.C_out))};
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < s.C_out; ++o)
      for (int64_t i = 0; i < Ho; ++i)
        for (int64_t j = 0; j < Wo; ++j) {
          const double d = dy[static_cast<size_t>(((n * s.C_out + o) * Ho + i) * Wo + j)];
          g.db[static_cast<size_t>(o)] += d;
          for (int64_t c = 0; c < s.C_in; ++c)
            for (int64_t ki = 0; ki < s.K; ++ki)
              for (int64_t kj = 0; kj < s.K; ++kj) {
                const int64_t yy = i * s.stride - s.pad + ki, xx = j * s.stride - s.pad + kj;
                if (yy < 0 || yy >= s.H || xx < 0 || xx >= s.W) continue;
                const size_t wi = static_cast<size_t>(((o * s.C_in + c) * s.K + ki) * s.K + kj);
                const size_t xi = static_cast<size_t>(((n * s.C_in + c) * s.H + yy) * s.W + xx);
                g.dx[xi] += w[wi] * d;
                g.dw[wi] += x[xi] * d;
              }
        }
  return g;
}

}  // namespace psar
