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
                .init_std = o_.init_std,
                .sequence_parallel = o_.sequence_parallel}),
      proj_(tp, {.name = o_.name + ".proj",
                 .in = o_.d_model,
                 .out = o_.d_model,
                 .init_std = o_.proj_init_std,
                 .sequence_parallel = o_.sequence_parallel}) {}

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

int64_t ParallelSelfAttention::Activations::bytes() const {
  size_t floats = 0;
  for (const auto* v : {&qkv, &att, &att_drop, &ctx, &dy_pre, &dctx, &dqkv}) floats += v->size();
  return static_cast<int64_t>(floats * sizeof(float));
}

int64_t ParallelSelfAttention::first_row(int64_t N) const {
  return o_.sequence_parallel ? tp_.rank() * (N / tp_.size()) : 0;
}

int64_t ParallelSelfAttention::local_rows(int64_t N) const {
  return o_.sequence_parallel ? N / tp_.size() : N;
}

// 2·(N·3d/t) + B·(H/t)·T² (twice with dropout; none with recompute_core) +
// 2·(N·d/t) + N·d (N/t·d sequence-parallel)
int64_t ParallelSelfAttention::activation_floats(int64_t B, bool dropout) const {
  const int64_t N = B * T_;
  const int64_t probabilities =
      o_.recompute_core ? 0 : B * heads_local_ * T_ * T_ * (dropout ? 2 : 1);
  return 2 * N * 3 * d_local_ + probabilities + 2 * N * d_local_ + local_rows(N) * o_.d_model;
}

void ParallelSelfAttention::core(float* p, float* pd, const float* q, const float* k, int64_t b,
                                 int64_t h, const DropoutContext& drop) {
  const int64_t ld = 3 * d_local_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd_));
  // scores = Q·Kᵀ/√d_h, then a causal softmax per row (positions j ≤ i)
  ops::gemm(false, true, T_, T_, hd_, scale, q, ld, k, ld, 0.0f, p, T_);
  core_flops_ += 2 * T_ * T_ * hd_;
  ops::causal_softmax_forward(p, T_);
  if (drop.p > 0)
    ops::dropout_forward(pd, p, T_ * T_, drop.p, drop.seed, drop.stream(o_.name + ".attn_dropout"),
                         att_index(b, h));
  ++core_passes_;
}

void ParallelSelfAttention::forward(Activations& a, float* y, const float* x, int64_t B,
                                    const DropoutContext& drop) {
  const int64_t N = B * T_, dl = d_local_, ld = 3 * dl, TT = T_ * T_, n = local_rows(N);
  const bool keep = !o_.recompute_core;
  a.drop = drop;
  a.qkv.resize(static_cast<size_t>(N * ld));
  a.att.resize(keep ? static_cast<size_t>(B * heads_local_ * TT) : 0);
  a.att_drop.resize(drop.p > 0 && keep ? a.att.size() : 0);
  if (!keep) {
    att_scratch_.resize(static_cast<size_t>(TT));
    att_drop_scratch_.resize(drop.p > 0 ? static_cast<size_t>(TT) : 0);
  }
  a.ctx.resize(static_cast<size_t>(N * dl));
  a.dy_pre.resize(static_cast<size_t>(n * o_.d_model));
  a.dctx.resize(static_cast<size_t>(N * dl));
  a.dqkv.resize(static_cast<size_t>(N * ld));

  qkv_.forward(a.qkv.data(), x, N);  // f: identity; this rank's heads only
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < heads_local_; ++h) {
      const float* q = a.qkv.data() + b * T_ * ld + h * hd_;  // [T, d_h], row stride ld
      const float* k = q + dl;
      const float* v = q + 2 * dl;
      // [T, T] each: kept per (b, h), or one head's scratch with recompute_core
      float* p = keep ? a.att.data() + (b * heads_local_ + h) * TT : att_scratch_.data();
      float* pd = drop.p > 0 ? (keep ? a.att_drop.data() + (b * heads_local_ + h) * TT
                                     : att_drop_scratch_.data())
                             : nullptr;
      core(p, pd, q, k, b, h, drop);
      const float* pv = drop.p > 0 ? pd : p;
      // ctx_h = P·V: [T, d_h] into columns h·d_h of ctx [N, d/t]
      ops::gemm(false, false, T_, hd_, T_, 1.0f, pv, T_, v, ld, 0.0f,
                a.ctx.data() + b * T_ * dl + h * hd_, dl);
      core_flops_ += 2 * T_ * T_ * hd_;
    }
  }
  // g: all-reduce of the partial products (reduce-scatter sequence-parallel), then + b_o
  proj_.forward(y, a.ctx.data(), N);
  if (drop.p > 0)
    ops::dropout_forward(y, y, n * o_.d_model, drop.p, drop.seed,
                         drop.stream(o_.name + ".dropout"), static_cast<uint64_t>(first_row(N) * o_.d_model));
}

void ParallelSelfAttention::backward_input(Activations& a, float* dx, const float* dy,
                                           int64_t B) {
  const int64_t N = B * T_, dl = d_local_, ld = 3 * dl, TT = T_ * T_, n = local_rows(N);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd_));
  const bool keep = !o_.recompute_core;
  PSAR_CHECK(a.dqkv.size() == static_cast<size_t>(N * ld), o_.name,
             ": backward of activations its forward did not size for ", B, " sequences");
  datt_.resize(static_cast<size_t>(TT));
  const DropoutContext& drop = a.drop;

  ops::dropout_backward(a.dy_pre.data(), dy, n * o_.d_model, drop.p, drop.seed,
                        drop.stream(o_.name + ".dropout"), static_cast<uint64_t>(first_row(N) * o_.d_model));
  if (!keep) {
    att_scratch_.resize(static_cast<size_t>(TT));
    att_drop_scratch_.resize(drop.p > 0 ? static_cast<size_t>(TT) : 0);
  }
  proj_.backward_input(a.dctx.data(), a.dy_pre.data(), N);  // g backward: identity
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < heads_local_; ++h) {
      const int64_t row0 = b * T_ * ld + h * hd_;
      const float* q = a.qkv.data() + row0;
      const float* k = q + dl;
      const float* v = q + 2 * dl;
      float* dq = a.dqkv.data() + row0;
      float* dk = dq + dl;
      float* dv = dq + 2 * dl;
      const float* p = nullptr;
      if (keep) {
        p = a.att.data() + (b * heads_local_ + h) * TT;
      } else {  // selective recomputation: the core again from Q and K
        core(att_scratch_.data(), att_drop_scratch_.data(), q, k, b, h, drop);
        p = att_scratch_.data();
      }
      const float* pv = drop.p == 0         ? p
                        : keep              ? a.att_drop.data() + (b * heads_local_ + h) * TT
                                            : att_drop_scratch_.data();
      const float* dc = a.dctx.data() + b * T_ * dl + h * hd_;  // [T, d_h], row stride dl
      float* dp = datt_.data();
      // ctx = P'·V:  dP' = dctx·Vᵀ,  dV = P'ᵀ·dctx
      ops::gemm(false, true, T_, T_, hd_, 1.0f, dc, dl, v, ld, 0.0f, dp, T_);
      ops::gemm(true, false, T_, hd_, T_, 1.0f, pv, T_, dc, dl, 0.0f, dv, ld);
      if (drop.p > 0)
        ops::dropout_backward(dp, dp, TT, drop.p, drop.seed,
                              drop.stream(o_.name + ".attn_dropout"), att_index(b, h));
      // softmax backward: dS_ij = P_ij·(dP_ij − Σ_k P_ik·dP_ik), zero above the diagonal
      ops::causal_softmax_backward(dp, p, T_);
      // S = Q·Kᵀ/√d_h:  dQ = dS·K/√d_h,  dK = dSᵀ·Q/√d_h
      ops::gemm(false, false, T_, hd_, T_, scale, dp, T_, k, ld, 0.0f, dq, ld);
      ops::gemm(true, false, T_, hd_, T_, scale, dp, T_, q, ld, 0.0f, dk, ld);
    }
  }
  qkv_.backward_input(dx, a.dqkv.data(), N);  // f: all-reduce of the partial dX
}

void ParallelSelfAttention::backward_weight(const Activations& a, const float* x, int64_t B) {
  const int64_t N = B * T_;
  proj_.backward_weight(a.dy_pre.data(), a.ctx.data(), N);
  qkv_.backward_weight(a.dqkv.data(), x, N);
}

}  // namespace psar
