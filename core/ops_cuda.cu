// CUDA kernels behind core/ops.h (see core/ops_cuda.h). Same formulas as the
// CPU code in core/ops.cc, with the same accumulation precision (double for
// layer-norm statistics and the softmax normalizer), so results agree to
// rounding; reductions run in a different order, so not bit for bit, except
// the elementwise optimizer updates and dropout, which are exact.
// GEMMs go to cuBLAS in FP32 (no TF32: CUBLAS_DEFAULT_MATH).
//
// cuBLAS is opened with dlopen on the first GEMM, not linked: loading
// libcublasLt runs static initializers that take about 0.25 s and 200 MB in
// every process that links it, GPU or not, which every test binary and every
// rank of every CPU run would pay.

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <limits>
#include <string>
#include <vector>

#include "core/errors.h"
#include "core/ops_cuda.h"
#include "core/rng.h"

namespace psar::ops::cuda {

namespace {

void check(cudaError_t err, const char* what) {
  if (err != cudaSuccess) throw Error(std::string(what) + ": " + cudaGetErrorString(err));
}
void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

void check_blas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string(what) + ": cuBLAS status " + std::to_string(static_cast<int>(status)));
}

// The four cuBLAS entry points the GEMM needs, resolved once from the library
// CMake found (PSAR_CUBLAS_LIBRARY), else from the loader's search path.
struct Cublas {
  decltype(&cublasCreate) create = nullptr;
  decltype(&cublasDestroy) destroy = nullptr;
  decltype(&cublasSetMathMode) set_math_mode = nullptr;
  decltype(&cublasSgemm) sgemm = nullptr;

  Cublas() {
    void* lib = nullptr;
    std::string tried;
    for (const char* name : {PSAR_CUBLAS_LIBRARY, PSAR_CUBLAS_SONAME}) {
      lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
      if (lib) break;
      const char* why = dlerror();
      tried += std::string(tried.empty() ? "" : "; ") + (why ? why : name);
    }
    if (!lib) throw Error("cannot load cuBLAS for the GEMMs of train.device cuda: " + tried);
    resolve(lib, "cublasCreate_v2", create);
    resolve(lib, "cublasDestroy_v2", destroy);
    resolve(lib, "cublasSetMathMode", set_math_mode);
    resolve(lib, "cublasSgemm_v2", sgemm);
  }
  template <typename F>
  static void resolve(void* lib, const char* symbol, F& f) {
    f = reinterpret_cast<F>(dlsym(lib, symbol));
    if (!f) throw Error(std::string("cuBLAS has no symbol ") + symbol);
  }
};

const Cublas& cublas() {
  static const Cublas api;
  return api;
}

// One cuBLAS handle per host thread (a handle is not safe to share across
// threads); it runs on the legacy default stream like every kernel here.
cublasHandle_t blas() {
  struct Handle {
    cublasHandle_t h = nullptr;
    Handle() {
      check_blas(cublas().create(&h), "cublasCreate");
      check_blas(cublas().set_math_mode(h, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    }
    ~Handle() {
      if (h) cublas().destroy(h);
    }
  };
  thread_local Handle handle;
  return handle.h;
}

int blas_int(int64_t v) {
  PSAR_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "GEMM dimension ", v,
             " does not fit a BLAS int");
  return static_cast<int>(v);
}

constexpr int kThreads = 256;
unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}
#define PSAR_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < (n); i += int64_t{blockDim.x} * gridDim.x)

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2/pi)

// Sum over the block (kThreads threads) of one value per thread; every thread
// gets the total.
template <typename T>
__device__ T block_sum(T v, T* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  const T total = shared[0];
  __syncthreads();
  return total;
}

__device__ float block_max(float v, float* shared) {
  shared[threadIdx.x] = v;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] = fmaxf(shared[threadIdx.x], shared[threadIdx.x + stride]);
    __syncthreads();
  }
  const float total = shared[0];
  __syncthreads();
  return total;
}

// ---- elementwise ----------------------------------------------------------------------
__global__ void broadcast_rows_kernel(float* out, const float* row, int64_t B, int64_t C) {
  PSAR_GRID_LOOP(i, B * C) out[i] = row[i % C];
}
__global__ void column_sum_kernel(float* dbias, const float* dout, int64_t B, int64_t C) {
  PSAR_GRID_LOOP(j, C) {
    float s = dbias[j];
    for (int64_t b = 0; b < B; ++b) s += dout[b * C + j];  // the CPU's order: row by row
    dbias[j] = s;
  }
}
__global__ void relu_forward_kernel(float* out, const float* inp, int64_t n) {
  PSAR_GRID_LOOP(i, n) out[i] = inp[i] > 0.0f ? inp[i] : 0.0f;
}
__global__ void relu_backward_kernel(float* dinp, const float* dout, const float* inp, int64_t n) {
  PSAR_GRID_LOOP(i, n) dinp[i] = inp[i] > 0.0f ? dout[i] : 0.0f;
}
__global__ void gelu_forward_kernel(float* out, const float* inp, int64_t n) {
  PSAR_GRID_LOOP(i, n) {
    const float x = inp[i];
    const float cube = 0.044715f * x * x * x;
    out[i] = 0.5f * x * (1.0f + tanhf(kGeluScale * (x + cube)));
  }
}
__global__ void gelu_backward_kernel(float* dinp, const float* dout, const float* inp, int64_t n) {
  PSAR_GRID_LOOP(i, n) {
    const float x = inp[i];
    const float cube = 0.044715f * x * x * x;
    const float t = tanhf(kGeluScale * (x + cube));
    const float sech2 = 1.0f - t * t;
    const float local =
        0.5f * (1.0f + t) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
    dinp[i] = local * dout[i];
  }
}
__global__ void dropout_kernel(float* out, const float* inp, int64_t n, float p, float keep_scale,
                               uint64_t seed, uint64_t stream, uint64_t first) {
  PSAR_GRID_LOOP(i, n) {
    out[i] = Philox::uniform(seed, stream, first + i) >= p ? inp[i] * keep_scale : 0.0f;
  }
}
__global__ void add_inplace_kernel(float* dst, const float* src, int64_t n) {
  PSAR_GRID_LOOP(i, n) dst[i] += src[i];
}
__global__ void add_kernel(float* dst, const float* a, const float* b, int64_t n) {
  PSAR_GRID_LOOP(i, n) dst[i] = a[i] + b[i];
}
__global__ void scale_kernel(float* x, float s, int64_t n) { PSAR_GRID_LOOP(i, n) x[i] *= s; }

// ---- layer norm: one block per row ---------------------------------------------------------
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp,
                                         const float* weight, const float* bias, int64_t C) {
  __shared__ double shared[kThreads];
  const int64_t i = blockIdx.x;
  const float* x = inp + i * C;
  double s = 0.0;
  for (int64_t j = threadIdx.x; j < C; j += kThreads) s += x[j];
  const double m = block_sum(s, shared) / static_cast<double>(C);
  double v = 0.0;
  for (int64_t j = threadIdx.x; j < C; j += kThreads) v += (x[j] - m) * (x[j] - m);
  v = block_sum(v, shared) / static_cast<double>(C);
  const float r = static_cast<float>(1.0 / sqrt(v + 1e-5));
  const float mf = static_cast<float>(m);
  float* y = out + i * C;
  for (int64_t j = threadIdx.x; j < C; j += kThreads) y[j] = (x[j] - mf) * r * weight[j] + bias[j];
  if (threadIdx.x == 0) {
    mean[i] = mf;
    rstd[i] = r;
  }
}
__global__ void layernorm_backward_input_kernel(float* dinp, const float* dout, const float* inp,
                                                const float* weight, const float* mean,
                                                const float* rstd, int64_t C, bool accumulate) {
  __shared__ double shared[kThreads];
  const int64_t i = blockIdx.x;
  const float* dy = dout + i * C;
  const float* x = inp + i * C;
  double sum_dn = 0.0, sum_dn_norm = 0.0;
  for (int64_t j = threadIdx.x; j < C; j += kThreads) {
    const double norm = (x[j] - mean[i]) * rstd[i];
    const double dn = dy[j] * weight[j];
    sum_dn += dn;
    sum_dn_norm += dn * norm;
  }
  const double a = block_sum(sum_dn, shared) / static_cast<double>(C);
  const double b = block_sum(sum_dn_norm, shared) / static_cast<double>(C);
  float* dx = dinp + i * C;
  for (int64_t j = threadIdx.x; j < C; j += kThreads) {
    const double norm = (x[j] - mean[i]) * rstd[i];
    const float g = static_cast<float>(rstd[i] * (dy[j] * weight[j] - a - norm * b));
    dx[j] = accumulate ? dx[j] + g : g;
  }
}
// One thread per column, rows in order, as on the CPU.
__global__ void layernorm_backward_weight_kernel(float* dweight, float* dbias, const float* dout,
                                                 const float* inp, const float* mean,
                                                 const float* rstd, int64_t N, int64_t C) {
  PSAR_GRID_LOOP(j, C) {
    float dw = dweight[j], db = dbias[j];
    for (int64_t i = 0; i < N; ++i) {
      dw += dout[i * C + j] * (inp[i * C + j] - mean[i]) * rstd[i];
      db += dout[i * C + j];
    }
    dweight[j] = dw;
    dbias[j] = db;
  }
}

// ---- causal softmax: one block per row i of [T, T] ----------------------------------------
__global__ void causal_softmax_forward_kernel(float* p, int64_t T) {
  __shared__ double shared[kThreads];
  __shared__ float shared_max[kThreads];
  const int64_t i = blockIdx.x;
  float* row = p + i * T;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j <= i; j += kThreads) mx = fmaxf(mx, row[j]);
  mx = block_max(mx, shared_max);
  double sum = 0;
  for (int64_t j = threadIdx.x; j <= i; j += kThreads) {
    const float e = expf(row[j] - mx);
    row[j] = e;
    sum += e;
  }
  const float inv = static_cast<float>(1.0 / block_sum(sum, shared));
  for (int64_t j = threadIdx.x; j < T; j += kThreads) row[j] = j <= i ? row[j] * inv : 0.0f;
}
__global__ void causal_softmax_backward_kernel(float* dp, const float* p, int64_t T) {
  __shared__ double shared[kThreads];
  const int64_t i = blockIdx.x;
  const float* prow = p + i * T;
  float* drow = dp + i * T;
  double dot = 0;
  for (int64_t j = threadIdx.x; j <= i; j += kThreads) dot += static_cast<double>(prow[j]) * drow[j];
  const float d = static_cast<float>(block_sum(dot, shared));
  for (int64_t j = threadIdx.x; j < T; j += kThreads)
    drow[j] = j <= i ? prow[j] * (drow[j] - d) : 0.0f;
}

// ---- softmax cross-entropy: one block per row; row losses summed on the host -----------------
__global__ void softmax_cross_entropy_kernel(const float* logits, const int32_t* targets, int64_t V,
                                             float* dlogits, double grad_scale_over_B,
                                             double* row_loss, int* bad_target) {
  __shared__ double shared[kThreads];
  __shared__ float shared_max[kThreads];
  const int64_t b = blockIdx.x;
  const float* z = logits + b * V;
  const int32_t t = targets[b];
  if (t < 0 || t >= V) {
    if (threadIdx.x == 0) {
      *bad_target = 1;
      row_loss[b] = 0.0;
    }
    return;
  }
  float zmax = -INFINITY;
  for (int64_t j = threadIdx.x; j < V; j += kThreads) zmax = fmaxf(zmax, z[j]);
  zmax = block_max(zmax, shared_max);
  double sum = 0.0;
  for (int64_t j = threadIdx.x; j < V; j += kThreads) sum += exp(static_cast<double>(z[j] - zmax));
  const double log_sum = log(block_sum(sum, shared));
  if (threadIdx.x == 0) row_loss[b] = log_sum - static_cast<double>(z[t] - zmax);
  if (dlogits) {
    float* dz = dlogits + b * V;
    for (int64_t j = threadIdx.x; j < V; j += kThreads) {
      const double p = exp(static_cast<double>(z[j] - zmax) - log_sum);
      dz[j] = static_cast<float>(grad_scale_over_B * (p - (j == t ? 1.0 : 0.0)));
    }
  }
}
// Row b is correct iff its first maximal logit is at the target (std::max_element).
__global__ void count_correct_kernel(const float* logits, const int32_t* targets, int64_t V,
                                     int* correct) {
  __shared__ float shared_max[kThreads];
  __shared__ double shared[kThreads];
  const int64_t b = blockIdx.x;
  const float* z = logits + b * V;
  float zmax = -INFINITY;
  for (int64_t j = threadIdx.x; j < V; j += kThreads) zmax = fmaxf(zmax, z[j]);
  zmax = block_max(zmax, shared_max);
  // The smallest index holding the maximum (as a double: exact for any int32 index).
  double first = static_cast<double>(V);
  for (int64_t j = threadIdx.x; j < V; j += kThreads)
    if (z[j] == zmax && j < first) first = static_cast<double>(j);
  shared[threadIdx.x] = first;
  __syncthreads();
  for (int stride = kThreads / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) shared[threadIdx.x] = fmin(shared[threadIdx.x], shared[threadIdx.x + stride]);
    __syncthreads();
  }
  if (threadIdx.x == 0) correct[b] = static_cast<int64_t>(shared[0]) == targets[b] ? 1 : 0;
}

// ---- convolution (im2col + cuBLAS) and max pooling -----------------------------------------
// The shape of core/ops.h's Conv2dShape with its derived sizes, as plain
// values a kernel can read.
struct ConvDims {
  int64_t C_in, H, W, K, stride, pad, H_out, W_out;
  explicit ConvDims(const Conv2dShape& s)
      : C_in(s.C_in), H(s.H), W(s.W), K(s.K), stride(s.stride), pad(s.pad), H_out(s.H_out()),
        W_out(s.W_out()) {}
};

// cols [C_in·K·K, H_out·W_out] of one image [C_in, H, W]; padding reads 0.
// One thread per entry of cols: neighbouring threads write neighbouring
// columns of a row.
__global__ void im2col_kernel(float* cols, const float* img, ConvDims d) {
  const int64_t P = d.H_out * d.W_out;
  PSAR_GRID_LOOP(idx, d.C_in * d.K * d.K * P) {
    const int64_t r = idx / P, p = idx % P;
    const int64_t i = p / d.W_out, j = p % d.W_out;
    const int64_t kj = r % d.K, ki = (r / d.K) % d.K, c = r / (d.K * d.K);
    const int64_t y = i * d.stride - d.pad + ki, x = j * d.stride - d.pad + kj;
    cols[idx] = (y >= 0 && y < d.H && x >= 0 && x < d.W) ? img[(c * d.H + y) * d.W + x] : 0.0f;
  }
}

// The adjoint of im2col as a gather: one thread per pixel of img [C_in, H, W]
// sums the entries of cols that im2col copied from it, in the CPU's order
// (ki, then kj), so no two threads write one element.
__global__ void col2im_kernel(float* img, const float* cols, ConvDims d) {
  const int64_t P = d.H_out * d.W_out;
  PSAR_GRID_LOOP(idx, d.C_in * d.H * d.W) {
    const int64_t x = idx % d.W, y = (idx / d.W) % d.H, c = idx / (d.H * d.W);
    float sum = 0.0f;
    for (int64_t ki = 0; ki < d.K; ++ki) {
      const int64_t ty = y + d.pad - ki;  // = i·stride for the output row i that reads y
      if (ty < 0 || ty % d.stride != 0 || ty / d.stride >= d.H_out) continue;
      for (int64_t kj = 0; kj < d.K; ++kj) {
        const int64_t tx = x + d.pad - kj;
        if (tx < 0 || tx % d.stride != 0 || tx / d.stride >= d.W_out) continue;
        sum += cols[((c * d.K + ki) * d.K + kj) * P + (ty / d.stride) * d.W_out + tx / d.stride];
      }
    }
    img[idx] = sum;
  }
}

// out [N, C_out, P] = bias[c] on every pixel of channel c.
__global__ void channel_fill_kernel(float* out, const float* bias, int64_t C_out, int64_t P,
                                    int64_t n) {
  PSAR_GRID_LOOP(idx, n) out[idx] = bias[(idx / P) % C_out];
}

// dbias[c] += Σ_n Σ_p dout[n, c, p]: one block per channel, summed in double.
__global__ void channel_sum_kernel(float* dbias, const float* dout, int64_t N, int64_t C_out,
                                   int64_t P) {
  __shared__ double shared[kThreads];
  const int64_t c = blockIdx.x;
  double s = 0.0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t p = threadIdx.x; p < P; p += kThreads) s += dout[(n * C_out + c) * P + p];
  s = block_sum(s, shared);
  if (threadIdx.x == 0) dbias[c] += static_cast<float>(s);
}

// One thread per output element [NC, H/P, W/P].
__global__ void maxpool_forward_kernel(float* out, const float* inp, int64_t NC, int64_t H,
                                       int64_t W, int64_t P) {
  const int64_t Ho = H / P, Wo = W / P;
  PSAR_GRID_LOOP(idx, NC * Ho * Wo) {
    const int64_t j = idx % Wo, i = (idx / Wo) % Ho, c = idx / (Ho * Wo);
    const float* img = inp + c * H * W;
    out[idx] = img[pool_window_argmax(img, W, P, i, j)];
  }
}

// One thread per input element [NC, H, W]: the windows do not overlap, so a
// pixel gets its window's gradient iff it is the window's first maximum, else
// 0 (also past the last whole window). 0.0f + g: the CPU's bits, -0 included.
__global__ void maxpool_backward_kernel(float* dinp, const float* dout, const float* inp,
                                        int64_t NC, int64_t H, int64_t W, int64_t P) {
  const int64_t Ho = H / P, Wo = W / P;
  PSAR_GRID_LOOP(idx, NC * H * W) {
    const int64_t x = idx % W, y = (idx / W) % H, c = idx / (H * W);
    const int64_t i = y / P, j = x / P;
    float g = 0.0f;
    if (i < Ho && j < Wo && pool_window_argmax(inp + c * H * W, W, P, i, j) == y * W + x)
      g += dout[(c * Ho + i) * Wo + j];
    dinp[idx] = g;
  }
}

// ---- optimizers ---------------------------------------------------------------------------
__global__ void sgd_kernel(float* p, const float* g, int64_t n, float lr, float wd) {
  PSAR_GRID_LOOP(i, n) p[i] -= lr * (g[i] + wd * p[i]);
}
__global__ void sgd_momentum_kernel(float* p, const float* g, float* velocity, int64_t n,
                                    float lr, float mu, float wd) {
  PSAR_GRID_LOOP(i, n) {
    const float v = mu * velocity[i] + g[i] + wd * p[i];
    velocity[i] = v;
    p[i] -= lr * v;
  }
}
__global__ void adam_kernel(float* p, const float* g, float* m_state, float* v_state, int64_t n,
                            float lr, float b1, float b2, float inv_c1, float inv_c2, float eps,
                            float wd) {
  PSAR_GRID_LOOP(i, n) {
    const float m = b1 * m_state[i] + (1.0f - b1) * g[i];
    const float v = b2 * v_state[i] + (1.0f - b2) * g[i] * g[i];
    m_state[i] = m;
    v_state[i] = v;
    p[i] -= lr * ((m * inv_c1) / (sqrtf(v * inv_c2) + eps) + wd * p[i]);
  }
}

// Per-thread device scratch for per-row results, grown on demand.
template <typename T>
T* scratch(int64_t n) {
  struct Buffer {
    T* data = nullptr;
    int64_t size = 0;
    ~Buffer() {
      if (data) cudaFree(data);
    }
  };
  thread_local Buffer buffer;
  if (n > buffer.size) {
    if (buffer.data) check(cudaFree(buffer.data), "cudaFree");
    buffer.data = nullptr;
    check(cudaMalloc(&buffer.data, static_cast<size_t>(n) * sizeof(T)), "cudaMalloc (scratch)");
    buffer.size = n;
  }
  return buffer.data;
}

}  // namespace

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc) {
  if (M == 0 || N == 0) return;
  // Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: swap the
  // operands, keep the flags and leading dimensions. K = 0 gives C = beta·C.
  check_blas(cublas().sgemm(blas(), trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                         trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, blas_int(N), blas_int(M),
                         blas_int(K), &alpha, B, blas_int(ldb), A, blas_int(lda), &beta, C,
                         blas_int(ldc)),
             "cublasSgemm");
}

void linear_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int64_t B, int64_t C_in, int64_t C_out) {
  float beta = 0.0f;
  if (bias) {
    broadcast_rows_kernel<<<blocks_for(B * C_out), kThreads>>>(out, bias, B, C_out);
    check_launch("broadcast_rows_kernel");
    beta = 1.0f;
  }
  gemm(false, false, B, C_out, C_in, 1.0f, inp, C_in, weight, C_out, beta, out, C_out);
}

void linear_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                            int64_t B, int64_t C_in, int64_t C_out) {
  gemm(true, false, C_in, C_out, B, 1.0f, inp, C_in, dout, C_out, 1.0f, dweight, C_out);
  if (dbias) {
    column_sum_kernel<<<blocks_for(C_out), kThreads>>>(dbias, dout, B, C_out);
    check_launch("column_sum_kernel");
  }
}

#define PSAR_ELEMENTWISE(kernel, n, ...)                        \
  do {                                                          \
    if ((n) == 0) return;                                       \
    kernel<<<blocks_for(n), kThreads>>>(__VA_ARGS__);           \
    check_launch(#kernel);                                      \
  } while (0)

void relu_forward(float* out, const float* inp, int64_t n) {
  PSAR_ELEMENTWISE(relu_forward_kernel, n, out, inp, n);
}
void relu_backward(float* dinp, const float* dout, const float* inp, int64_t n) {
  PSAR_ELEMENTWISE(relu_backward_kernel, n, dinp, dout, inp, n);
}
void gelu_forward(float* out, const float* inp, int64_t n) {
  PSAR_ELEMENTWISE(gelu_forward_kernel, n, out, inp, n);
}
void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n) {
  PSAR_ELEMENTWISE(gelu_backward_kernel, n, dinp, dout, inp, n);
}
void add_inplace(float* dst, const float* src, int64_t n) {
  PSAR_ELEMENTWISE(add_inplace_kernel, n, dst, src, n);
}
void add(float* dst, const float* a, const float* b, int64_t n) {
  PSAR_ELEMENTWISE(add_kernel, n, dst, a, b, n);
}
void scale(float* x, float s, int64_t n) { PSAR_ELEMENTWISE(scale_kernel, n, x, s, n); }

void dropout_forward(float* out, const float* inp, int64_t n, float p, uint64_t seed,
                     uint64_t stream, uint64_t first) {
  if (n == 0) return;
  if (p <= 0.0f) {
    check(cudaMemcpy(out, inp, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice),
          "cudaMemcpy (dropout)");
    return;
  }
  PSAR_ELEMENTWISE(dropout_kernel, n, out, inp, n, p, 1.0f / (1.0f - p), seed, stream, first);
}

void copy(float* dst, const float* src, int64_t n) {
  if (n == 0) return;
  check(cudaMemcpy(dst, src, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice),
        "cudaMemcpy (copy)");
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t N, int64_t C) {
  if (N == 0) return;
  layernorm_forward_kernel<<<static_cast<unsigned>(N), kThreads>>>(out, mean, rstd, inp, weight,
                                                                    bias, C);
  check_launch("layernorm_forward_kernel");
}

void layernorm_backward_input(float* dinp, const float* dout, const float* inp,
                              const float* weight, const float* mean, const float* rstd,
                              int64_t N, int64_t C, bool accumulate) {
  if (N == 0) return;
  layernorm_backward_input_kernel<<<static_cast<unsigned>(N), kThreads>>>(
      dinp, dout, inp, weight, mean, rstd, C, accumulate);
  check_launch("layernorm_backward_input_kernel");
}

void layernorm_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* mean, const float* rstd, int64_t N, int64_t C) {
  PSAR_ELEMENTWISE(layernorm_backward_weight_kernel, C, dweight, dbias, dout, inp, mean, rstd, N,
                   C);
}

void causal_softmax_forward(float* p, int64_t T) {
  if (T == 0) return;
  causal_softmax_forward_kernel<<<static_cast<unsigned>(T), kThreads>>>(p, T);
  check_launch("causal_softmax_forward_kernel");
}

void causal_softmax_backward(float* dp, const float* p, int64_t T) {
  if (T == 0) return;
  causal_softmax_backward_kernel<<<static_cast<unsigned>(T), kThreads>>>(dp, p, T);
  check_launch("causal_softmax_backward_kernel");
}

double softmax_cross_entropy(const float* logits, const int32_t* targets, int64_t B, int64_t V,
                             float* dlogits, float grad_scale) {
  if (B == 0) return 0.0;
  double* row_loss = scratch<double>(B);
  int* bad = scratch<int>(1);
  check(cudaMemset(bad, 0, sizeof(int)), "cudaMemset");
  const double s = static_cast<double>(grad_scale) / static_cast<double>(B);
  softmax_cross_entropy_kernel<<<static_cast<unsigned>(B), kThreads>>>(logits, targets, V, dlogits,
                                                                        s, row_loss, bad);
  check_launch("softmax_cross_entropy_kernel");
  std::vector<double> host(static_cast<size_t>(B));
  int bad_host = 0;
  check(cudaMemcpy(host.data(), row_loss, host.size() * sizeof(double), cudaMemcpyDeviceToHost),
        "cudaMemcpy (loss)");
  check(cudaMemcpy(&bad_host, bad, sizeof(int), cudaMemcpyDeviceToHost), "cudaMemcpy (loss)");
  PSAR_CHECK(bad_host == 0, "a target outside [0, ", V, ")");
  double total = 0.0;
  for (double l : host) total += l;  // the CPU's order: row by row
  return total / static_cast<double>(B);
}

int64_t count_correct(const float* logits, const int32_t* targets, int64_t B, int64_t V) {
  if (B == 0) return 0;
  int* rows = scratch<int>(B);
  count_correct_kernel<<<static_cast<unsigned>(B), kThreads>>>(logits, targets, V, rows);
  check_launch("count_correct_kernel");
  std::vector<int> host(static_cast<size_t>(B));
  check(cudaMemcpy(host.data(), rows, host.size() * sizeof(int), cudaMemcpyDeviceToHost),
        "cudaMemcpy (count_correct)");
  int64_t correct = 0;
  for (int c : host) correct += c;
  return correct;
}

// ---- convolution: per image, im2col (or col2im) and one cuBLAS GEMM, as on the CPU --------

void conv2d_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int64_t N, const Conv2dShape& s, float* cols) {
  const int64_t P = s.col_cols(), R = s.col_rows(), image = s.C_in * s.H * s.W;
  if (N == 0 || s.C_out * P == 0) return;
  const ConvDims d(s);
  if (bias) {
    channel_fill_kernel<<<blocks_for(N * s.C_out * P), kThreads>>>(out, bias, s.C_out, P,
                                                                   N * s.C_out * P);
    check_launch("channel_fill_kernel");
  }
  for (int64_t n = 0; n < N; ++n) {
    im2col_kernel<<<blocks_for(R * P), kThreads>>>(cols, inp + n * image, d);
    check_launch("im2col_kernel");
    // out_n [C_out, P] = weight [C_out, R] · cols [R, P] (+ the bias filled above)
    gemm(false, false, s.C_out, P, R, 1.0f, weight, R, cols, P, bias ? 1.0f : 0.0f,
         out + n * s.C_out * P, P);
  }
}

void conv2d_backward_input(float* dinp, const float* dout, const float* weight, int64_t N,
                           const Conv2dShape& s, float* cols) {
  const int64_t P = s.col_cols(), R = s.col_rows(), image = s.C_in * s.H * s.W;
  if (N == 0 || image == 0) return;
  const ConvDims d(s);
  for (int64_t n = 0; n < N; ++n) {
    // dcols [R, P] = weightᵀ [R, C_out] · dout_n [C_out, P]
    gemm(true, false, R, P, s.C_out, 1.0f, weight, R, dout + n * s.C_out * P, P, 0.0f, cols, P);
    col2im_kernel<<<blocks_for(image), kThreads>>>(dinp + n * image, cols, d);
    check_launch("col2im_kernel");
  }
}

void conv2d_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                            int64_t N, const Conv2dShape& s, float* cols) {
  const int64_t P = s.col_cols(), R = s.col_rows(), image = s.C_in * s.H * s.W;
  if (N == 0 || s.C_out == 0) return;
  const ConvDims d(s);
  for (int64_t n = 0; n < N; ++n) {
    im2col_kernel<<<blocks_for(R * P), kThreads>>>(cols, inp + n * image, d);
    check_launch("im2col_kernel");
    // dweight [C_out, R] += dout_n [C_out, P] · colsᵀ [P, R]
    gemm(false, true, s.C_out, R, P, 1.0f, dout + n * s.C_out * P, P, cols, P, 1.0f, dweight, R);
  }
  if (dbias) {
    channel_sum_kernel<<<static_cast<unsigned>(s.C_out), kThreads>>>(dbias, dout, N, s.C_out, P);
    check_launch("channel_sum_kernel");
  }
}

void maxpool2d_forward(float* out, const float* inp, int64_t NC, int64_t H, int64_t W, int64_t P) {
  PSAR_ELEMENTWISE(maxpool_forward_kernel, NC * (H / P) * (W / P), out, inp, NC, H, W, P);
}

void maxpool2d_backward(float* dinp, const float* dout, const float* inp, int64_t NC, int64_t H,
                        int64_t W, int64_t P) {
  PSAR_ELEMENTWISE(maxpool_backward_kernel, NC * H * W, dinp, dout, inp, NC, H, W, P);
}

void sgd(float* p, const float* g, int64_t n, float lr, float wd) {
  PSAR_ELEMENTWISE(sgd_kernel, n, p, g, n, lr, wd);
}
void sgd_momentum(float* p, const float* g, float* velocity, int64_t n, float lr, float mu,
                  float wd) {
  PSAR_ELEMENTWISE(sgd_momentum_kernel, n, p, g, velocity, n, lr, mu, wd);
}
void adam(float* p, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2,
          float inv_c1, float inv_c2, float eps, float wd) {
  PSAR_ELEMENTWISE(adam_kernel, n, p, g, m, v, n, lr, b1, b2, inv_c1, inv_c2, eps, wd);
}

}  // namespace psar::ops::cuda
