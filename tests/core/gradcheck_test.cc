// Finite-difference checks of every layer's backward and of the loss.
// Each layer output y is reduced to a scalar L = Σ r_i·y_i with fixed random
// r, evaluated in double from the float outputs; central differences with
// step h in float give ∂L/∂x to about 1e-3 relative, which is the tolerance.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <vector>

#include "core/ops.h"
#include "core/rng.h"

namespace psar {
namespace {

std::vector<float> randn(size_t n, uint64_t stream, float scale = 1.0f) {
  std::vector<float> v(n);
  Philox::fill_normal(v, scale, 1234, stream);
  return v;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Checks analytic gradient `g` of scalar f at `x` against central differences.
void expect_gradient(std::vector<float>& x, const std::vector<float>& g,
                     const std::function<double()>& f, const char* what, double h = 1e-2,
                     double tol = 2e-3) {
  ASSERT_EQ(x.size(), g.size());
  double max_err = 0, max_ref = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float saved = x[i];
    x[i] = saved + static_cast<float>(h);
    const double fp = f();
    x[i] = saved - static_cast<float>(h);
    const double fm = f();
    x[i] = saved;
    const double numeric = (fp - fm) / (2 * h);
    max_err = std::max(max_err, std::abs(numeric - g[i]));
    max_ref = std::max(max_ref, std::abs(numeric));
  }
  EXPECT_GT(max_ref, 1e-4) << what << ": gradient is trivially zero, the check proves nothing";
  EXPECT_LE(max_err, tol * std::max(1.0, max_ref)) << what << ": max |numeric - analytic| "
                                                   << max_err << " (max |grad| " << max_ref << ")";
}

TEST(GradCheck, LinearInputWeightAndBias) {
  const int64_t B = 3, Cin = 5, Cout = 4;
  auto x = randn(B * Cin, 1), W = randn(Cin * Cout, 2), b = randn(Cout, 3), r = randn(B * Cout, 4);
  std::vector<float> y(B * Cout);
  auto f = [&] {
    ops::linear_forward(y.data(), x.data(), W.data(), b.data(), B, Cin, Cout);
    return dot(y, r);
  };
  std::vector<float> dx(B * Cin), dW(Cin * Cout, 0.0f), db(Cout, 0.0f);
  ops::linear_backward_input(dx.data(), r.data(), W.data(), B, Cin, Cout);
  ops::linear_backward_weight(dW.data(), db.data(), r.data(), x.data(), B, Cin, Cout);
  expect_gradient(x, dx, f, "linear dinp");
  expect_gradient(W, dW, f, "linear dweight");
  expect_gradient(b, db, f, "linear dbias");
}

TEST(GradCheck, LinearWeightGradientAccumulates) {
  const int64_t B = 2, Cin = 3, Cout = 2;
  auto x = randn(B * Cin, 5), g = randn(B * Cout, 6);
  std::vector<float> once(Cin * Cout, 0.0f), twice(Cin * Cout, 0.0f);
  ops::linear_backward_weight(once.data(), nullptr, g.data(), x.data(), B, Cin, Cout);
  ops::linear_backward_weight(twice.data(), nullptr, g.data(), x.data(), B, Cin, Cout);
  ops::linear_backward_weight(twice.data(), nullptr, g.data(), x.data(), B, Cin, Cout);
  for (size_t i = 0; i < once.size(); ++i) EXPECT_FLOAT_EQ(twice[i], 2 * once[i]);
}

TEST(GradCheck, Relu) {
  auto x = randn(20, 7), r = randn(20, 8);
  for (float& v : x)  // keep away from the kink at 0
    if (std::abs(v) < 0.05f) v = 0.5f;
  std::vector<float> y(20), dx(20);
  auto f = [&] {
    ops::relu_forward(y.data(), x.data(), 20);
    return dot(y, r);
  };
  ops::relu_backward(dx.data(), r.data(), x.data(), 20);
  expect_gradient(x, dx, f, "relu", 1e-3);
}

TEST(GradCheck, Gelu) {
  auto x = randn(20, 9, 2.0f), r = randn(20, 10);
  std::vector<float> y(20), dx(20);
  auto f = [&] {
    ops::gelu_forward(y.data(), x.data(), 20);
    return dot(y, r);
  };
  ops::gelu_backward(dx.data(), r.data(), x.data(), 20);
  expect_gradient(x, dx, f, "gelu", 1e-3);
}

TEST(GradCheck, GeluMatchesErfDefinitionClosely) {
  // tanh approximation stays within 1e-3 of x·Φ(x)
  for (float x = -4; x <= 4; x += 0.25f) {
    float y;
    ops::gelu_forward(&y, &x, 1);
    EXPECT_NEAR(y, 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))), 1e-3) << "x=" << x;
  }
}

TEST(GradCheck, LayerNorm) {
  const int64_t N = 3, C = 6;
  auto x = randn(N * C, 11), w = randn(C, 12), b = randn(C, 13), r = randn(N * C, 14);
  std::vector<float> y(N * C), mean(N), rstd(N);
  auto f = [&] {
    ops::layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    return dot(y, r);
  };
  f();
  std::vector<float> dx(N * C), dw(C, 0.0f), db(C, 0.0f);
  ops::layernorm_backward_input(dx.data(), r.data(), x.data(), w.data(), mean.data(), rstd.data(),
                                N, C);
  ops::layernorm_backward_weight(dw.data(), db.data(), r.data(), x.data(), mean.data(),
                                 rstd.data(), N, C);
  expect_gradient(x, dx, f, "layernorm dinp", 1e-2, 5e-3);
  expect_gradient(w, dw, f, "layernorm dweight");
  expect_gradient(b, db, f, "layernorm dbias");
}

TEST(GradCheck, SoftmaxCrossEntropy) {
  const int64_t B = 4, V = 7;
  auto z = randn(B * V, 15);
  std::vector<int32_t> t = {0, 3, 6, 2};
  std::vector<float> dz(B * V);
  ops::softmax_cross_entropy(z.data(), t.data(), B, V, dz.data(), 1.0f);
  auto f = [&] { return ops::softmax_cross_entropy(z.data(), t.data(), B, V, nullptr); };
  expect_gradient(z, dz, f, "softmax cross-entropy", 1e-2);
}

TEST(GradCheck, SoftmaxCrossEntropyValueMatchesDoubleReference) {
  const int64_t B = 2, V = 3;
  std::vector<float> z = {1, 2, 3, -1, 0, 5};
  std::vector<int32_t> t = {2, 0};
  double ref = 0;
  for (int b = 0; b < B; ++b) {
    double s = 0;
    for (int j = 0; j < V; ++j) s += std::exp(static_cast<double>(z[b * V + j]));
    ref += std::log(s) - z[b * V + t[b]];
  }
  EXPECT_NEAR(ops::softmax_cross_entropy(z.data(), t.data(), B, V, nullptr), ref / B, 1e-7);
  EXPECT_EQ(ops::count_correct(z.data(), t.data(), B, V), 1);
}

TEST(GradCheck, DropoutMaskIsAPureFunctionOfPosition) {
  // A slice [first, first+n) of a tensor gets exactly the full tensor's mask.
  const int64_t n = 1000;
  std::vector<float> x(n, 1.0f), full(n), part(300);
  ops::dropout_forward(full.data(), x.data(), n, 0.25f, 7, 99, 0);
  ops::dropout_forward(part.data(), x.data() + 500, 300, 0.25f, 7, 99, 500);
  for (int i = 0; i < 300; ++i) EXPECT_EQ(part[i], full[500 + i]);
  int kept = 0;
  for (float v : full) {
    EXPECT_TRUE(v == 0.0f || v == 1.0f / 0.75f);
    kept += v != 0.0f;
  }
  EXPECT_NEAR(kept / 1000.0, 0.75, 0.05);
  // Backward applies the same mask and scale.
  auto g = randn(n, 16), dx = std::vector<float>(n);
  ops::dropout_backward(dx.data(), g.data(), n, 0.25f, 7, 99, 0);
  for (int64_t i = 0; i < n; ++i) EXPECT_EQ(dx[i], full[i] == 0 ? 0.0f : g[i] * (1.0f / 0.75f));
}

TEST(Kernels, AddAndScaleMatchReference) {
  auto a = randn(1001, 17), b = randn(1001, 18);
  std::vector<float> out(1001), acc = a;
  ops::add(out.data(), a.data(), b.data(), 1001);
  ops::add_inplace(acc.data(), b.data(), 1001);
  for (int i = 0; i < 1001; ++i) {
    EXPECT_EQ(out[i], a[i] + b[i]);
    EXPECT_EQ(acc[i], a[i] + b[i]);
  }
  ops::scale(acc.data(), 0.5f, 1001);
  for (int i = 0; i < 1001; ++i) EXPECT_EQ(acc[i], (a[i] + b[i]) * 0.5f);
}

}  // namespace
}  // namespace psar
