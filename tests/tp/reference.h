#pragma once
// An independent, obvious reference: the serial transformer written directly
// in double precision from its definition (no psar kernels, no sharding), used
// to check the t = 1 model's outputs and — by central differences, which are
// exact to ~1e-8 in double — its gradients. The tensor-parallel models are
// then checked against the t = 1 model.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/param_store.h"
#include "core/rng.h"

namespace psar::tp_testing::ref {

using Vec = std::vector<double>;
using Weights = std::map<std::string, Vec>;

inline Weights weights_of(ParamStore& store) {
  Weights w;
  for (const auto& info : store.infos()) {
    const Tensor p = store.param(info.name);
    w[info.name] = Vec(p.span().begin(), p.span().end());
  }
  return w;
}

inline Vec to_double(std::span<const float> v) { return Vec(v.begin(), v.end()); }

// x [N, in] · W [in, out] + b
inline Vec linear(const Vec& x, int64_t N, int64_t in, int64_t out, const Vec& W, const Vec& b) {
  Vec y(static_cast<size_t>(N * out));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < out; ++j) {
      double s = b[j];
      for (int64_t i = 0; i < in; ++i) s += x[n * in + i] * W[i * out + j];
      y[n * out + j] = s;
    }
  return y;
}

inline Vec gelu(Vec x) {
  for (double& v : x)
    v = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
  return x;
}

inline Vec layernorm(const Vec& x, int64_t N, int64_t C, const Vec& w, const Vec& b) {
  Vec y(x.size());
  for (int64_t n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int64_t j = 0; j < C; ++j) m += x[n * C + j] / C;
    for (int64_t j = 0; j < C; ++j) v += (x[n * C + j] - m) * (x[n * C + j] - m) / C;
    for (int64_t j = 0; j < C; ++j)
      y[n * C + j] = (x[n * C + j] - m) / std::sqrt(v + 1e-5) * w[j] + b[j];
  }
  return y;
}

inline Vec add(Vec a, const Vec& b) {
  for (size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

// Z = GeLU(X·A + a)·B + b
inline Vec mlp(const Weights& w, const std::string& name, const Vec& x, int64_t N, int64_t d,
               int64_t hidden) {
  const Vec h = gelu(linear(x, N, d, hidden, w.at(name + ".fc.weight"), w.at(name + ".fc.bias")));
  return linear(h, N, hidden, d, w.at(name + ".proj.weight"), w.at(name + ".proj.bias"));
}

// Causal multi-head self-attention over B sequences of T; qkv columns are Q | K | V.
inline Vec attention(const Weights& w, const std::string& name, const Vec& x, int64_t B, int64_t T,
                     int64_t d, int64_t H) {
  const int64_t N = B * T, hd = d / H;
  const Vec qkv = linear(x, N, d, 3 * d, w.at(name + ".qkv.weight"), w.at(name + ".qkv.bias"));
  Vec ctx(static_cast<size_t>(N * d), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        auto at = [&](int64_t t, int part, int64_t c) {
          return qkv[(b * T + t) * 3 * d + part * d + h * hd + c];
        };
        Vec p(static_cast<size_t>(i + 1));
        double mx = -1e300, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (int64_t c = 0; c < hd; ++c) s += at(i, 0, c) * at(j, 1, c);
          p[j] = s / std::sqrt(static_cast<double>(hd));
          mx = std::max(mx, p[j]);
        }
        for (double& v : p) sum += (v = std::exp(v - mx));
        for (int64_t c = 0; c < hd; ++c) {
          double s = 0;
          for (int64_t j = 0; j <= i; ++j) s += p[j] / sum * at(j, 2, c);
          ctx[(b * T + i) * d + h * hd + c] = s;
        }
      }
  return linear(ctx, N, d, d, w.at(name + ".proj.weight"), w.at(name + ".proj.bias"));
}

struct GptShape {
  int64_t vocab, seq_len, layers, d_model, heads;
};

// Mean cross-entropy over all B·T positions of the GPT (tied LM head, no dropout).
inline double gpt_loss(const Weights& w, const GptShape& s, const std::vector<int32_t>& tokens,
                       const std::vector<int32_t>& targets, int64_t B) {
  const int64_t T = s.seq_len, N = B * T, d = s.d_model, V = s.vocab;
  Vec x(static_cast<size_t>(N * d));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < d; ++j)
      x[n * d + j] = w.at("wte")[tokens[n] * d + j] + w.at("wpe")[(n % T) * d + j];
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string h = "h" + std::to_string(l);
    const Vec a = layernorm(x, N, d, w.at(h + ".ln1.weight"), w.at(h + ".ln1.bias"));
    x = add(x, attention(w, h + ".attn", a, B, T, d, s.heads));
    const Vec m = layernorm(x, N, d, w.at(h + ".ln2.weight"), w.at(h + ".ln2.bias"));
    x = add(x, mlp(w, h + ".mlp", m, N, d, 4 * d));
  }
  x = layernorm(x, N, d, w.at("lnf.weight"), w.at("lnf.bias"));
  double loss = 0;
  for (int64_t n = 0; n < N; ++n) {
    Vec z(static_cast<size_t>(V));
    double mx = -1e300, sum = 0;
    for (int64_t v = 0; v < V; ++v) {
      for (int64_t j = 0; j < d; ++j) z[v] += x[n * d + j] * w.at("wte")[v * d + j];
      mx = std::max(mx, z[v]);
    }
    for (double zv : z) sum += std::exp(zv - mx);
    loss += std::log(sum) + mx - z[targets[n]];
  }
  return loss / static_cast<double>(N);
}

// Central differences of f at `samples` coordinates of v (first, last and
// seeded random ones) against the analytic gradient `grad`:
// |numeric − analytic| ≤ tol · max |grad|.
inline void expect_gradient(Vec& v, std::span<const float> grad, const std::function<double()>& f,
                            const std::string& what, int samples = 6, double tol = 1e-4) {
  ASSERT_EQ(v.size(), grad.size()) << what;
  double scale = 0;
  for (float g : grad) scale = std::max(scale, std::abs(double{g}));
  ASSERT_GT(scale, 1e-7) << what << ": gradient is zero everywhere, the check proves nothing";
  constexpr double h = 1e-4;
  for (int s = 0; s < samples; ++s) {
    const size_t i = s == 0   ? 0
                     : s == 1 ? v.size() - 1
                              : Philox::block(7, fnv1a(what), s)[0] % v.size();
    const double saved = v[i];
    v[i] = saved + h;
    const double fp = f();
    v[i] = saved - h;
    const double fm = f();
    v[i] = saved;
    const double numeric = (fp - fm) / (2 * h);
    EXPECT_NEAR(numeric, grad[i], tol * scale) << what << "[" << i << "]";
  }
}

}  // namespace psar::tp_testing::ref
