#include "modelpar/tp/parallel_attention.h"

#include <cmath>

#include "core/errors.h"
#include "core/ops.h"

namespace psar {

namespace {

ParallelAttentionOptions checked(ParallelAttentionOptions o, int t) {
  if (o.d_model <= 0 || o.heads <= 0 || o.seq_len <= 0)
    throw ConfigError(o.name + ": attention needs positive d_model, heads and seq_len");
  if (o.d_model % o.heads != 0)
    throw ConfigError(o.name + ": model.d_model = " + std::to_string(o.d_model) +
                      " is not divisible by model.heads = " + std::to_string(o.heads));
  if (o.heads % t != 0)
    throw ConfigError(o.name + ": model.heads = " + std::to_string(o.heads) +
                      " attention heads cannot be split over parallel.tp = " + std::to_string(t) +
                      " ranks (heads must be divisible by t)");
  return o;
}

}  // namespace

ParallelSelfAttention::ParallelSelfAttention(TpGroup& tp, ParallelAttentionOptions options)
    : tp_(tp),
      o_(checked(std::move(options), tp.size())),
      T_(o_.seq_len),
      hd_(o_.d_model / o_.heads),
      heads_local_(o_.heads / tp.size()),
      d_local_(o_.d_model / tp.size()),
      qkv_(tp, {.name = o_.name + ".qkv",
                .in = o_.d_model,
                .out = 3 * o_.d_model,
                .groups = 3,
                .init_std = o_.init_std}),
      proj_(tp, {.name = o_.name + ".proj",
                 .in = o_.d_model,
                 .out = o_.d_model,
                 .init_std = o_.proj_init_std}) {}

void ParallelSelfAttention::declare(ShardedParams& params, ParamStore& store) {
  qkv_.declare(params, store);
  proj_.declare(params, store);
}

void ParallelSelfAttention::bind(ParamStore& store) {
  qkv_.bind(store);
  proj_.bind(store);
}

uint64_t ParallelSelfAttention::att_index(int64_t b, int64_t h) const {
  const int64_t global_head = tp_.rank() * heads_local_ + h;
  return static_cast<uint64_t>((b * o_.heads + global_head) * T_ * T_);
}

void ParallelSelfAttention::forward(float* y, const float* x, int64_t B,
                                    const DropoutContext& drop) {
  const int64_t N = B * T_, dl = d_local_, ld = 3 * dl, TT = T_ * T_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd_));
  drop_ = drop;
  qkv_out_.resize(static_cast<size_t>(N * ld));
  att_.resize(static_cast<size_t>(B * heads_local_ * TT));
  ctx_.resize(static_cast<size_t>(N * dl));
  if (drop_.p > 0) att_drop_.resize(att_.size());

  qkv_.forward(qkv_out_.data(), x, N);  // f: identity; this rank's heads only
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < heads_local_; ++h) {
      const float* q = qkv_out_.data() + b * T_ * ld + h * hd_;  // [T, d_h], row stride ld
      const float* k = q + dl;
      const float* v = q + 2 * dl;
      float* p = att_.data() + (b * heads_local_ + h) * TT;  // [T, T]
      // scores = Q·Kᵀ/√d_h, then a causal softmax per row (positions j ≤ i)
      ops::gemm(false, true, T_, T_, hd_, scale, q, ld, k, ld, 0.0f, p, T_);
      for (int64_t i = 0; i < T_; ++i) {
        float* row = p + i * T_;
        float mx = row[0];
        for (int64_t j = 1; j <= i; ++j) mx = std::max(mx, row[j]);
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += (row[j] = std::exp(row[j] - mx));
        const float inv = static_cast<float>(1.0 / sum);
        for (int64_t j = 0; j <= i; ++j) row[j] *= inv;
        for (int64_t j = i + 1; j < T_; ++j) row[j] = 0.0f;
      }
      const float* pv = p;
      if (drop_.p > 0) {
        float* pd = att_drop_.data() + (b * heads_local_ + h) * TT;
        ops::dropout_forward(pd, p, TT, drop_.p, drop_.seed,
                             drop_.stream(o_.name + ".attn_dropout"), att_index(b, h));
        pv = pd;
      }
      // ctx_h = P·V: [T, d_h] into columns h·d_h of ctx_ [N, d/t]
      ops::gemm(false, false, T_, hd_, T_, 1.0f, pv, T_, v, ld, 0.0f,
                ctx_.data() + b * T_ * dl + h * hd_, dl);
    }
  }
  proj_.forward(y, ctx_.data(), N);  // g: all-reduce of the partial products, then + b_o
  if (drop_.p > 0)
    ops::dropout_forward(y, y, N * o_.d_model, drop_.p, drop_.seed,
                         drop_.stream(o_.name + ".dropout"), 0);
}

void ParallelSelfAttention::backward_input(float* dx, const float* dy, int64_t B) {
  const int64_t N = B * T_, dl = d_local_, ld = 3 * dl, TT = T_ * T_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd_));
  dy_pre_.resize(static_cast<size_t>(N * o_.d_model));
  dctx_.resize(static_cast<size_t>(N * dl));
  datt_.resize(static_cast<size_t>(TT));
  dqkv_.resize(static_cast<size_t>(N * ld));

  ops::dropout_backward(dy_pre_.data(), dy, N * o_.d_model, drop_.p, drop_.seed,
                        drop_.stream(o_.name + ".dropout"), 0);
  proj_.backward_input(dctx_.data(), dy_pre_.data(), N);  // g backward: identity
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < heads_local_; ++h) {
      const int64_t row0 = b * T_ * ld + h * hd_;
      const float* q = qkv_out_.data() + row0;
      const float* k = q + dl;
      const float* v = q + 2 * dl;
      float* dq = dqkv_.data() + row0;
      float* dk = dq + dl;
      float* dv = dq + 2 * dl;
      const float* p = att_.data() + (b * heads_local_ + h) * TT;
      const float* pv = drop_.p > 0 ? att_drop_.data() + (b * heads_local_ + h) * TT : p;
      const float* dc = dctx_.data() + b * T_ * dl + h * hd_;  // [T, d_h], row stride dl
      float* dp = datt_.data();
      // ctx = P'·V:  dP' = dctx·Vᵀ,  dV = P'ᵀ·dctx
      ops::gemm(false, true, T_, T_, hd_, 1.0f, dc, dl, v, ld, 0.0f, dp, T_);
      ops::gemm(true, false, T_, hd_, T_, 1.0f, pv, T_, dc, dl, 0.0f, dv, ld);
      if (drop_.p > 0)
        ops::dropout_backward(dp, dp, TT, drop_.p, drop_.seed,
                              drop_.stream(o_.name + ".attn_dropout"), att_index(b, h));
      // softmax backward: dS_ij = P_ij·(dP_ij − Σ_k P_ik·dP_ik), zero above the diagonal
      for (int64_t i = 0; i < T_; ++i) {
        const float* prow = p + i * T_;
        float* drow = dp + i * T_;
        double dot = 0;
        for (int64_t j = 0; j <= i; ++j) dot += static_cast<double>(prow[j]) * drow[j];
        for (int64_t j = 0; j <= i; ++j) drow[j] = prow[j] * (drow[j] - static_cast<float>(dot));
        for (int64_t j = i + 1; j < T_; ++j) drow[j] = 0.0f;
      }
      // S = Q·Kᵀ/√d_h:  dQ = dS·K/√d_h,  dK = dSᵀ·Q/√d_h
      ops::gemm(false, false, T_, hd_, T_, scale, dp, T_, k, ld, 0.0f, dq, ld);
      ops::gemm(true, false, T_, hd_, T_, scale, dp, T_, q, ld, 0.0f, dk, ld);
    }
  }
  qkv_.backward_input(dx, dqkv_.data(), N);  // f: all-reduce of the partial dX
}

void ParallelSelfAttention::backward_weight(const float* x, int64_t B) {
  const int64_t N = B * T_;
  proj_.backward_weight(dy_pre_.data(), ctx_.data(), N);
  qkv_.backward_weight(dqkv_.data(), x, N);
}

}  // namespace psar
