#include "core/ops.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/device.h"
#include "core/errors.h"
#include "core/rng.h"
#if PSAR_HAVE_CUDA
#include "core/ops_cuda.h"
#endif

extern "C" void openblas_set_num_threads(int num_threads);

namespace psar::ops {

namespace {
int blas_int(int64_t v) {
  PSAR_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "GEMM dimension ", v,
             " does not fit a BLAS int");
  return static_cast<int>(v);
}
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)
}  // namespace

// One branch per op: on a thread whose current device is CUDA (core/device.h)
// the op runs in core/ops_cuda.cu instead. A build without CUDA has no branch.
#if PSAR_HAVE_CUDA
#define PSAR_ON_CUDA(op, ...) \
  if (current_device() == Device::kCuda) [[unlikely]] return cuda::op(__VA_ARGS__)
#else
#define PSAR_ON_CUDA(op, ...)
#endif

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc) {
  PSAR_ON_CUDA(gemm, trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (M == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, blas_int(M), blas_int(N), blas_int(K), alpha, A,
              blas_int(lda), B, blas_int(ldb), beta, C, blas_int(ldc));
}

void linear_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int64_t B, int64_t C_in, int64_t C_out) {
  PSAR_ON_CUDA(linear_forward, out, inp, weight, bias, B, C_in, C_out);
  float beta = 0.0f;
  if (bias) {
    for (int64_t b = 0; b < B; ++b) std::copy_n(bias, C_out, out + b * C_out);
    beta = 1.0f;
  }
  gemm(false, false, B, C_out, C_in, 1.0f, inp, C_in, weight, C_out, beta, out, C_out);
}

void linear_backward_input(float* dinp, const float* dout, const float* weight, int64_t B,
                           int64_t C_in, int64_t C_out, bool accumulate) {
  gemm(false, true, B, C_in, C_out, 1.0f, dout, C_out, weight, C_out, accumulate ? 1.0f : 0.0f,
       dinp, C_in);
}

void linear_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                            int64_t B, int64_t C_in, int64_t C_out) {
  PSAR_ON_CUDA(linear_backward_weight, dweight, dbias, dout, inp, B, C_in, C_out);
  gemm(true, false, C_in, C_out, B, 1.0f, inp, C_in, dout, C_out, 1.0f, dweight, C_out);
  if (dbias) {
    for (int64_t b = 0; b < B; ++b) {
      const float* row = dout + b * C_out;
      for (int64_t j = 0; j < C_out; ++j) dbias[j] += row[j];
    }
  }
}

void relu_forward(float* out, const float* inp, int64_t n) {
  PSAR_ON_CUDA(relu_forward, out, inp, n);
  for (int64_t i = 0; i < n; ++i) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}

void relu_backward(float* dinp, const float* dout, const float* inp, int64_t n) {
  PSAR_ON_CUDA(relu_backward, dinp, dout, inp, n);
  for (int64_t i = 0; i < n; ++i) dinp[i] = inp[i] > 0.0f ? dout[i] : 0.0f;
}

void gelu_forward(float* out, const float* inp, int64_t n) {
  PSAR_ON_CUDA(gelu_forward, out, inp, n);
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float cube = 0.044715f * x * x * x;
    out[i] = 0.5f * x * (1.0f + std::tanh(kGeluScale * (x + cube)));
  }
}

void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n) {
  PSAR_ON_CUDA(gelu_backward, dinp, dout, inp, n);
  for (int64_t i = 0; i < n; ++i) {
    const float x = inp[i];
    const float cube = 0.044715f * x * x * x;
    const float t = std::tanh(kGeluScale * (x + cube));
    const float sech2 = 1.0f - t * t;
    const float local = 0.5f * (1.0f + t) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = local * dout[i];
  }
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t N, int64_t C) {
  PSAR_ON_CUDA(layernorm_forward, out, mean, rstd, inp, weight, bias, N, C);
  constexpr double kEps = 1e-5;
  for (int64_t i = 0; i < N; ++i) {
    const float* x = inp + i * C;
    double m = 0.0;
    for (int64_t j = 0; j < C; ++j) m += x[j];
    m /= static_cast<double>(C);
    double v = 0.0;
    for (int64_t j = 0; j < C; ++j) v += (x[j] - m) * (x[j] - m);
    v /= static_cast<double>(C);
    const float s = static_cast<float>(1.0 / std::sqrt(v + kEps));
    const float mf = static_cast<float>(m);
    float* y = out + i * C;
    for (int64_t j = 0; j < C; ++j) y[j] = (x[j] - mf) * s * weight[j] + bias[j];
    mean[i] = mf;
    rstd[i] = s;
  }
}

void layernorm_backward_input(float* dinp, const float* dout, const float* inp,
                              const float* weight, const float* mean, const float* rstd,
                              int64_t N, int64_t C, bool accumulate) {
  PSAR_ON_CUDA(layernorm_backward_input, dinp, dout, inp, weight, mean, rstd, N, C, accumulate);
  for (int64_t i = 0; i < N; ++i) {
    const float* dy = dout + i * C;
    const float* x = inp + i * C;
    // dnorm = dy · weight; dx = rstd · (dnorm − mean(dnorm) − norm · mean(dnorm · norm))
    double sum_dn = 0.0, sum_dn_norm = 0.0;
    for (int64_t j = 0; j < C; ++j) {
      const double norm = (x[j] - mean[i]) * rstd[i];
      const double dn = dy[j] * weight[j];
      sum_dn += dn;
      sum_dn_norm += dn * norm;
    }
    const double a = sum_dn / static_cast<double>(C), b = sum_dn_norm / static_cast<double>(C);
    float* dx = dinp + i * C;
    for (int64_t j = 0; j < C; ++j) {
      const double norm = (x[j] - mean[i]) * rstd[i];
      const float g = static_cast<float>(rstd[i] * (dy[j] * weight[j] - a - norm * b));
      dx[j] = accumulate ? dx[j] + g : g;
    }
  }
}

void layernorm_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* mean, const float* rstd, int64_t N, int64_t C) {
  PSAR_ON_CUDA(layernorm_backward_weight, dweight, dbias, dout, inp, mean, rstd, N, C);
  for (int64_t i = 0; i < N; ++i) {
    const float* dy = dout + i * C;
    const float* x = inp + i * C;
    for (int64_t j = 0; j < C; ++j) {
      dweight[j] += dy[j] * (x[j] - mean[i]) * rstd[i];
      dbias[j] += dy[j];
    }
  }
}

void causal_softmax_forward(float* p, int64_t T) {
  PSAR_ON_CUDA(causal_softmax_forward, p, T);
  for (int64_t i = 0; i < T; ++i) {
    float* row = p + i * T;
    float mx = row[0];
    for (int64_t j = 1; j <= i; ++j) mx = std::max(mx, row[j]);
    double sum = 0;
    for (int64_t j = 0; j <= i; ++j) sum += (row[j] = std::exp(row[j] - mx));
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j <= i; ++j) row[j] *= inv;
    for (int64_t j = i + 1; j < T; ++j) row[j] = 0.0f;
  }
}

void causal_softmax_backward(float* dp, const float* p, int64_t T) {
  PSAR_ON_CUDA(causal_softmax_backward, dp, p, T);
  for (int64_t i = 0; i < T; ++i) {
    const float* prow = p + i * T;
    float* drow = dp + i * T;
    double dot = 0;
    for (int64_t j = 0; j <= i; ++j) dot += static_cast<double>(prow[j]) * drow[j];
    for (int64_t j = 0; j <= i; ++j) drow[j] = prow[j] * (drow[j] - static_cast<float>(dot));
    for (int64_t j = i + 1; j < T; ++j) drow[j] = 0.0f;
  }
}

double softmax_cross_entropy(const float* logits, const int32_t* targets, int64_t B, int64_t V,
                             float* dlogits, float grad_scale) {
  PSAR_ON_CUDA(softmax_cross_entropy, logits, targets, B, V, dlogits, grad_scale);
  double total = 0.0;
  for (int64_t b = 0; b < B; ++b) {
    const float* z = logits + b * V;
    const int32_t t = targets[b];
    PSAR_CHECK(t >= 0 && t < V, "target ", t, " outside [0, ", V, ")");
    float zmax = z[0];
    for (int64_t j = 1; j < V; ++j) zmax = std::max(zmax, z[j]);
    double sum = 0.0;
    for (int64_t j = 0; j < V; ++j) sum += std::exp(static_cast<double>(z[j] - zmax));
    const double log_sum = std::log(sum);
    total += log_sum - static_cast<double>(z[t] - zmax);
    if (dlogits) {
      float* dz = dlogits + b * V;
      const double s = static_cast<double>(grad_scale) / static_cast<double>(B);
      for (int64_t j = 0; j < V; ++j) {
        const double p = std::exp(static_cast<double>(z[j] - zmax) - log_sum);
        dz[j] = static_cast<float>(s * (p - (j == t ? 1.0 : 0.0)));
      }
    }
  }
  return B > 0 ? total / static_cast<double>(B) : 0.0;
}

int64_t count_correct(const float* logits, const int32_t* targets, int64_t B, int64_t V) {
  PSAR_ON_CUDA(count_correct, logits, targets, B, V);
  int64_t correct = 0;
  for (int64_t b = 0; b < B; ++b) {
    const float* z = logits + b * V;
    correct += (std::max_element(z, z + V) - z) == targets[b];
  }
  return correct;
}

void dropout_forward(float* out, const float* inp, int64_t n, float p, uint64_t seed,
                     uint64_t stream, uint64_t first) {
  PSAR_ON_CUDA(dropout_forward, out, inp, n, p, seed, stream, first);
  if (p <= 0.0f) {
    std::copy_n(inp, n, out);
    return;
  }
  const float keep_scale = 1.0f / (1.0f - p);
  for (int64_t i = 0; i < n; ++i)
    out[i] = Philox::uniform(seed, stream, first + i) >= p ? inp[i] * keep_scale : 0.0f;
}

void dropout_backward(float* dinp, const float* dout, int64_t n, float p, uint64_t seed,
                      uint64_t stream, uint64_t first) {
  dropout_forward(dinp, dout, n, p, seed, stream, first);  // same mask, same scale
}

// ---- convolution and pooling --------------------------------------------------------

namespace {
// cols [C_in·K·K, H_out·W_out] of one image [C_in, H, W]; padding reads 0.
void im2col(float* cols, const float* img, const Conv2dShape& s) {
  const int64_t Ho = s.H_out(), Wo = s.W_out();
  for (int64_t c = 0; c < s.C_in; ++c)
    for (int64_t ki = 0; ki < s.K; ++ki)
      for (int64_t kj = 0; kj < s.K; ++kj) {
        float* row = cols + ((c * s.K + ki) * s.K + kj) * Ho * Wo;
        for (int64_t i = 0; i < Ho; ++i) {
          const int64_t y = i * s.stride - s.pad + ki;
          for (int64_t j = 0; j < Wo; ++j) {
            const int64_t x = j * s.stride - s.pad + kj;
            row[i * Wo + j] = (y >= 0 && y < s.H && x >= 0 && x < s.W)
                                  ? img[(c * s.H + y) * s.W + x]
                                  : 0.0f;
          }
        }
      }
}

// The adjoint of im2col: img [C_in, H, W] = Σ of the columns' entries at
// each pixel (overwritten).
void col2im(float* img, const float* cols, const Conv2dShape& s) {
  const int64_t Ho = s.H_out(), Wo = s.W_out();
  std::fill_n(img, s.C_in * s.H * s.W, 0.0f);
  for (int64_t c = 0; c < s.C_in; ++c)
    for (int64_t ki = 0; ki < s.K; ++ki)
      for (int64_t kj = 0; kj < s.K; ++kj) {
        const float* row = cols + ((c * s.K + ki) * s.K + kj) * Ho * Wo;
        for (int64_t i = 0; i < Ho; ++i) {
          const int64_t y = i * s.stride - s.pad + ki;
          if (y < 0 || y >= s.H) continue;
          for (int64_t j = 0; j < Wo; ++j) {
            const int64_t x = j * s.stride - s.pad + kj;
            if (x >= 0 && x < s.W) img[(c * s.H + y) * s.W + x] += row[i * Wo + j];
          }
        }
      }
}
}  // namespace

void conv2d_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int64_t N, const Conv2dShape& s, float* cols) {
  PSAR_ON_CUDA(conv2d_forward, out, inp, weight, bias, N, s, cols);
  const int64_t P = s.col_cols(), R = s.col_rows();
  for (int64_t n = 0; n < N; ++n) {
    float* o = out + n * s.C_out * P;
    im2col(cols, inp + n * s.C_in * s.H * s.W, s);
    if (bias)
      for (int64_t c = 0; c < s.C_out; ++c) std::fill_n(o + c * P, P, bias[c]);
    gemm(false, false, s.C_out, P, R, 1.0f, weight, R, cols, P, bias ? 1.0f : 0.0f, o, P);
  }
}

void conv2d_backward_input(float* dinp, const float* dout, const float* weight, int64_t N,
                           const Conv2dShape& s, float* cols) {
  PSAR_ON_CUDA(conv2d_backward_input, dinp, dout, weight, N, s, cols);
  const int64_t P = s.col_cols(), R = s.col_rows();
  for (int64_t n = 0; n < N; ++n) {
    // dcols [R, P] = weightᵀ [R, C_out] · dout_n [C_out, P]
    gemm(true, false, R, P, s.C_out, 1.0f, weight, R, dout + n * s.C_out * P, P, 0.0f, cols, P);
    col2im(dinp + n * s.C_in * s.H * s.W, cols, s);
  }
}

void conv2d_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                            int64_t N, const Conv2dShape& s, float* cols) {
  PSAR_ON_CUDA(conv2d_backward_weight, dweight, dbias, dout, inp, N, s, cols);
  const int64_t P = s.col_cols(), R = s.col_rows();
  for (int64_t n = 0; n < N; ++n) {
    const float* d = dout + n * s.C_out * P;
    im2col(cols, inp + n * s.C_in * s.H * s.W, s);
    // dweight [C_out, R] += dout_n [C_out, P] · colsᵀ [P, R]
    gemm(false, true, s.C_out, R, P, 1.0f, d, P, cols, P, 1.0f, dweight, R);
    if (dbias)
      for (int64_t c = 0; c < s.C_out; ++c) {
        float sum = 0.0f;
        for (int64_t k = 0; k < P; ++k) sum += d[c * P + k];
        dbias[c] += sum;
      }
  }
}

void maxpool2d_forward(float* out, const float* inp, int64_t NC, int64_t H, int64_t W, int64_t P) {
  PSAR_ON_CUDA(maxpool2d_forward, out, inp, NC, H, W, P);
  const int64_t Ho = H / P, Wo = W / P;
  for (int64_t c = 0; c < NC; ++c) {
    const float* img = inp + c * H * W;
    for (int64_t i = 0; i < Ho; ++i)
      for (int64_t j = 0; j < Wo; ++j)
        out[(c * Ho + i) * Wo + j] = img[pool_window_argmax(img, W, P, i, j)];
  }
}

void maxpool2d_backward(float* dinp, const float* dout, const float* inp, int64_t NC, int64_t H,
                        int64_t W, int64_t P) {
  PSAR_ON_CUDA(maxpool2d_backward, dinp, dout, inp, NC, H, W, P);
  const int64_t Ho = H / P, Wo = W / P;
  std::fill_n(dinp, NC * H * W, 0.0f);
  for (int64_t c = 0; c < NC; ++c) {
    const float* img = inp + c * H * W;
    for (int64_t i = 0; i < Ho; ++i)
      for (int64_t j = 0; j < Wo; ++j)
        dinp[c * H * W + pool_window_argmax(img, W, P, i, j)] += dout[(c * Ho + i) * Wo + j];
  }
}

void copy(float* dst, const float* src, int64_t n) {
  PSAR_ON_CUDA(copy, dst, src, n);
  std::copy_n(src, n, dst);
}

// The reduction kernels of every collective. Built twice, for AVX2 and for
// the baseline, and picked at load time: in-cache sums run about twice as fast
// with AVX2 (bench/bench_reduce), which is what MPI's own reduction uses.
// Elementwise IEEE addition gives the same bits either way.
#define PSAR_REDUCTION_KERNEL __attribute__((target_clones("avx2", "default")))

PSAR_REDUCTION_KERNEL
void add_inplace(float* __restrict dst, const float* __restrict src, int64_t n) {
  PSAR_ON_CUDA(add_inplace, dst, src, n);
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

PSAR_REDUCTION_KERNEL
void add(float* __restrict dst, const float* __restrict a, const float* __restrict b, int64_t n) {
  PSAR_ON_CUDA(add, dst, a, b, n);
  for (int64_t i = 0; i < n; ++i) dst[i] = a[i] + b[i];
}

void scale(float* x, float s, int64_t n) {
  PSAR_ON_CUDA(scale, x, s, n);
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void set_blas_threads(int n) { openblas_set_num_threads(std::max(1, n)); }

}  // namespace psar::ops
