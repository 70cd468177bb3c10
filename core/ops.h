#pragma once
// Layer kernels with explicit forward and backward (llm.c style): plain
// functions over raw row-major buffers, shapes written beside each argument.
// Backward of a layer with weights is split into an input-gradient half and a
// weight-gradient half so pipeline schedules (zero-bubble) can reorder them.
// Weight-gradient halves ACCUMULATE (+=) so micro-batches sum naturally.

#include <cstdint>

namespace psar::ops {

// ---- linear: out = inp · weight + bias --------------------------------------
// inp: [B, C_in]   weight: [C_in, C_out]   bias: [C_out] or nullptr   out: [B, C_out]
void linear_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int64_t B, int64_t C_in, int64_t C_out);
// dinp = dout · weightᵀ (dinp: [B, C_in]); accumulate adds instead of overwriting.
void linear_backward_input(float* dinp, const float* dout, const float* weight, int64_t B,
                           int64_t C_in, int64_t C_out, bool accumulate = false);
// dweight += inpᵀ · dout (dweight: [C_in, C_out]); dbias += Σ_rows dout (if non-null).
void linear_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                            int64_t B, int64_t C_in, int64_t C_out);

// ---- plain GEMM: C = alpha · op(A) · op(B) + beta · C (row-major) ---------------
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc);

// ---- 2-D convolution, NCHW, through im2col and the GEMM ---------------------------
// One image's patches laid out as the columns of a [C_in·K·K, H_out·W_out]
// matrix (im2col), so the convolution of image n is one GEMM:
// out_n [C_out, H_out·W_out] = weight [C_out, C_in·K·K] · cols_n (+ bias per
// output channel). Zero padding of `pad` on every side; square K×K kernels.
struct Conv2dShape {
  int64_t C_in = 1, H = 1, W = 1;  // the input image
  int64_t C_out = 1, K = 1;        // output channels, kernel size
  int64_t stride = 1, pad = 0;
  int64_t H_out() const { return (H + 2 * pad - K) / stride + 1; }
  int64_t W_out() const { return (W + 2 * pad - K) / stride + 1; }
  int64_t col_rows() const { return C_in * K * K; }
  int64_t col_cols() const { return H_out() * W_out(); }
  int64_t weight_numel() const { return C_out * col_rows(); }
  // Multiply-adds of one image's forward: C_out · C_in·K·K · H_out·W_out.
  int64_t macs() const { return C_out * col_rows() * col_cols(); }
};
// inp: [N, C_in, H, W]  weight: [C_out, C_in·K·K]  bias: [C_out] or nullptr
// out: [N, C_out, H_out, W_out]  cols: scratch of col_rows()·col_cols() floats.
void conv2d_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int64_t N, const Conv2dShape& s, float* cols);
// dinp [N, C_in, H, W] = the input gradient (overwritten): per image
// weightᵀ · dout_n, scattered back by col2im.
void conv2d_backward_input(float* dinp, const float* dout, const float* weight, int64_t N,
                           const Conv2dShape& s, float* cols);
// dweight += Σ_n dout_n · cols_nᵀ; dbias += Σ_n Σ_pixels dout_n (if non-null).
void conv2d_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                            int64_t N, const Conv2dShape& s, float* cols);

// ---- 2-D max pooling: P×P windows at stride P (rows and columns past the last
// whole window are dropped, as PyTorch's floor mode) --------------------------------
// The index in [H, W] of the first maximum of window (i, j) of img [H, W]:
// the CPU and the CUDA pooling share it (constexpr, so device code may call it).
constexpr int64_t pool_window_argmax(const float* img, int64_t W, int64_t P, int64_t i,
                                     int64_t j) {
  int64_t best = i * P * W + j * P;
  for (int64_t a = 0; a < P; ++a)
    for (int64_t b = 0; b < P; ++b) {
      const int64_t k = (i * P + a) * W + j * P + b;
      if (img[k] > img[best]) best = k;
    }
  return best;
}
// inp: [NC, H, W] (NC = images · channels)  out: [NC, H/P, W/P]
void maxpool2d_forward(float* out, const float* inp, int64_t NC, int64_t H, int64_t W, int64_t P);
// dinp [NC, H, W] (overwritten): each window's gradient goes to its maximum
// (the first one of a tie), found again from inp.
void maxpool2d_backward(float* dinp, const float* dout, const float* inp, int64_t NC, int64_t H,
                        int64_t W, int64_t P);

// ---- elementwise activations (n elements) -------------------------------------
void relu_forward(float* out, const float* inp, int64_t n);
void relu_backward(float* dinp, const float* dout, const float* inp, int64_t n);
// GeLU, tanh approximation (as in GPT-2 and Megatron).
void gelu_forward(float* out, const float* inp, int64_t n);
void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n);

// ---- layer norm over the last dimension -----------------------------------------
// inp, out: [N, C]; weight, bias: [C]; mean, rstd: [N] saved for backward.
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t N, int64_t C);
// dinp is overwritten (or accumulated); dweight, dbias accumulate.
void layernorm_backward_input(float* dinp, const float* dout, const float* inp,
                              const float* weight, const float* mean, const float* rstd,
                              int64_t N, int64_t C, bool accumulate = false);
void layernorm_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* mean, const float* rstd, int64_t N, int64_t C);

// ---- causal softmax of attention scores ---------------------------------------------
// p: [T, T] scores, in place: row i becomes the softmax of its entries j ≤ i,
// zeros above the diagonal.
void causal_softmax_forward(float* p, int64_t T);
// dp: [T, T] in place, p the forward's output: dS_ij = P_ij·(dP_ij − Σ_k P_ik·dP_ik)
// for j ≤ i, zero above the diagonal.
void causal_softmax_backward(float* dp, const float* p, int64_t T);

// ---- softmax cross-entropy ------------------------------------------------------
// logits: [B, V]; targets: [B]. Returns the mean loss over the B rows. If
// dlogits is non-null it receives grad_scale · ∂(mean loss)/∂logits.
double softmax_cross_entropy(const float* logits, const int32_t* targets, int64_t B, int64_t V,
                             float* dlogits, float grad_scale = 1.0f);
// Number of rows whose argmax equals the target.
int64_t count_correct(const float* logits, const int32_t* targets, int64_t B, int64_t V);

// ---- dropout with a counter-based mask ----------------------------------------------
// Element i is kept iff uniform(seed, stream, first + i) >= p; kept values are
// scaled by 1/(1-p). The mask depends only on global positions, so a shard of a
// tensor sees exactly the serial model's mask.
void dropout_forward(float* out, const float* inp, int64_t n, float p, uint64_t seed,
                     uint64_t stream, uint64_t first);
void dropout_backward(float* dinp, const float* dout, int64_t n, float p, uint64_t seed,
                      uint64_t stream, uint64_t first);

// ---- copies -------------------------------------------------------------------------
// dst[i] = src[i], both on the current device (core/device.h).
void copy(float* dst, const float* src, int64_t n);

// ---- reductions used by collectives -----------------------------------------------
// dst[i] += src[i]
void add_inplace(float* dst, const float* src, int64_t n);
// dst[i] = a[i] + b[i]
void add(float* dst, const float* a, const float* b, int64_t n);
// x[i] *= s
void scale(float* x, float s, int64_t n);

// Sets OpenBLAS's thread count (1 when several ranks share the cores).
void set_blas_threads(int n);

}  // namespace psar::ops
