#pragma once
// The CUDA implementations behind core/ops.h and the optimizers (core/optim.cc),
// with the same signatures and semantics; every pointer is CUDA device memory
// (targets included). ops.cc dispatches here when the thread's current device
// is Device::kCuda (core/device.h). Built only with CUDA (core/ops_cuda.cu).

#include <cstdint>

#include "core/ops.h"

namespace psar::ops::cuda {

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
          const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
          int64_t ldc);
void linear_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int64_t B, int64_t C_in, int64_t C_out);
void linear_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                            int64_t B, int64_t C_in, int64_t C_out);
void conv2d_forward(float* out, const float* inp, const float* weight, const float* bias,
                    int64_t N, const Conv2dShape& s, float* cols);
void conv2d_backward_input(float* dinp, const float* dout, const float* weight, int64_t N,
                           const Conv2dShape& s, float* cols);
void conv2d_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                            int64_t N, const Conv2dShape& s, float* cols);
void maxpool2d_forward(float* out, const float* inp, int64_t NC, int64_t H, int64_t W, int64_t P);
void maxpool2d_backward(float* dinp, const float* dout, const float* inp, int64_t NC, int64_t H,
                        int64_t W, int64_t P);
void relu_forward(float* out, const float* inp, int64_t n);
void relu_backward(float* dinp, const float* dout, const float* inp, int64_t n);
void gelu_forward(float* out, const float* inp, int64_t n);
void gelu_backward(float* dinp, const float* dout, const float* inp, int64_t n);
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp,
                       const float* weight, const float* bias, int64_t N, int64_t C);
void layernorm_backward_input(float* dinp, const float* dout, const float* inp,
                              const float* weight, const float* mean, const float* rstd,
                              int64_t N, int64_t C, bool accumulate);
void layernorm_backward_weight(float* dweight, float* dbias, const float* dout, const float* inp,
                               const float* mean, const float* rstd, int64_t N, int64_t C);
void causal_softmax_forward(float* p, int64_t T);
void causal_softmax_backward(float* dp, const float* p, int64_t T);
double softmax_cross_entropy(const float* logits, const int32_t* targets, int64_t B, int64_t V,
                             float* dlogits, float grad_scale);
int64_t count_correct(const float* logits, const int32_t* targets, int64_t B, int64_t V);
void dropout_forward(float* out, const float* inp, int64_t n, float p, uint64_t seed,
                     uint64_t stream, uint64_t first);
void copy(float* dst, const float* src, int64_t n);
void add_inplace(float* dst, const float* src, int64_t n);
void add(float* dst, const float* a, const float* b, int64_t n);
void scale(float* x, float s, int64_t n);

// The optimizers' updates (core/optim.cc has the formulas); every operation is
// one IEEE single-precision +, ×, ÷ or √ (this file is built with --fmad=false),
// so a CUDA step gives the CPU's bits.
void sgd(float* p, const float* g, int64_t n, float lr, float wd);
void sgd_momentum(float* p, const float* g, float* velocity, int64_t n, float lr, float mu,
                  float wd);
void adam(float* p, const float* g, float* m, float* v, int64_t n, float lr, float b1, float b2,
          float inv_c1, float inv_c2, float eps, float wd);

}  // namespace psar::ops::cuda
