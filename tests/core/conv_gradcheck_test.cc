// The convolution and max-pooling kernels against a direct double-precision
// reference: the float forward equals the reference's nested loops (no
// im2col, no GEMM), and every backward equals central differences of the
// reference taken in double, where h = 1e-6 leaves only rounding (the
// convolution is linear in each argument; max-pooling is linear away from
// ties). L = Σ r_i·y_i with fixed random r.

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <tuple>
#include <vector>

#include "core/ops.h"
#include "core/rng.h"
#include "tests/core/conv_reference.h"

namespace psar {
namespace {

std::vector<float> randn(size_t n, uint64_t stream) {
  std::vector<float> v(n);
  Philox::fill_normal(v, 1.0f, 99, stream);
  return v;
}

std::vector<double> to_double(const std::vector<float>& v) { return {v.begin(), v.end()}; }

double dot(const std::vector<double>& a, const std::vector<float>& r) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * r[i];
  return s;
}

// analytic (float) against central differences of f in double at x.
void expect_gradient(std::vector<double>& x, const std::vector<float>& analytic,
                     const std::function<double()>& f, const char* what) {
  ASSERT_EQ(x.size(), analytic.size());
  const double h = 1e-6;
  double max_err = 0, max_ref = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + h;
    const double fp = f();
    x[i] = saved - h;
    const double fm = f();
    x[i] = saved;
    const double numeric = (fp - fm) / (2 * h);
    max_err = std::max(max_err, std::abs(numeric - analytic[i]));
    max_ref = std::max(max_ref, std::abs(numeric));
  }
  EXPECT_GT(max_ref, 1e-2) << what << ": gradient is trivially zero, the check proves nothing";
  EXPECT_LE(max_err, 1e-5 * std::max(1.0, max_ref))
      << what << ": max |numeric - analytic| " << max_err << " (max |grad| " << max_ref << ")";
}

void check_conv(const ops::Conv2dShape& s, int64_t N) {
  auto x = randn(static_cast<size_t>(N * s.C_in * s.H * s.W), 1);
  auto w = randn(static_cast<size_t>(s.weight_numel()), 2);
  auto b = randn(static_cast<size_t>(s.C_out), 3);
  const size_t out_n = static_cast<size_t>(N * s.C_out * s.H_out() * s.W_out());
  auto r = randn(out_n, 4);
  std::vector<float> cols(static_cast<size_t>(s.col_rows() * s.col_cols()));

  std::vector<float> y(out_n);
  ops::conv2d_forward(y.data(), x.data(), w.data(), b.data(), N, s, cols.data());
  auto xd = to_double(x), wd = to_double(w), bd = to_double(b);
  const auto want = conv_ref(xd, wd, bd, N, s);
  for (size_t i = 0; i < out_n; ++i)
    ASSERT_NEAR(y[i], want[i], 1e-5 * std::max(1.0, std::abs(want[i]))) << "output " << i;

  std::vector<float> dx(x.size()), dw(w.size(), 0.0f), db(b.size(), 0.0f);
  ops::conv2d_backward_input(dx.data(), r.data(), w.data(), N, s, cols.data());
  ops::conv2d_backward_weight(dw.data(), db.data(), r.data(), x.data(), N, s, cols.data());
  auto f = [&] { return dot(conv_ref(xd, wd, bd, N, s), r); };
  expect_gradient(xd, dx, f, "conv2d dinp");
  expect_gradient(wd, dw, f, "conv2d dweight");
  expect_gradient(bd, db, f, "conv2d dbias");

  // The reference's own adjoints (which tests/gpu/ops_cuda_test.cc uses)
  // agree with the gradients just checked.
  const ConvRefGrads g = conv_ref_backward(xd, wd, to_double(r), N, s);
  for (auto [ref, got, what] :
       {std::tuple{&g.dx, &dx, "dx"}, {&g.dw, &dw, "dw"}, {&g.db, &db, "db"}})
    for (size_t i = 0; i < ref->size(); ++i)
      ASSERT_NEAR((*got)[i], (*ref)[i], 1e-5 * std::max(1.0, std::abs((*ref)[i])))
          << "conv_ref_backward " << what << " " << i;
}

TEST(ConvGradCheck, Stride1Pad1) { check_conv({2, 6, 5, 3, 3, 1, 1}, 2); }
TEST(ConvGradCheck, Stride2Pad1) { check_conv({2, 7, 6, 3, 3, 2, 1}, 2); }
TEST(ConvGradCheck, Stride1NoPadding5x5) { check_conv({3, 7, 7, 2, 5, 1, 0}, 1); }

TEST(ConvGradCheck, WeightGradientAccumulates) {
  const ops::Conv2dShape s{1, 5, 5, 2, 3, 1, 1};
  auto x = randn(25, 5), g = randn(50, 6);
  std::vector<float> cols(static_cast<size_t>(s.col_rows() * s.col_cols()));
  std::vector<float> once(18, 0.0f), twice(18, 0.0f);
  ops::conv2d_backward_weight(once.data(), nullptr, g.data(), x.data(), 1, s, cols.data());
  for (int k = 0; k < 2; ++k)
    ops::conv2d_backward_weight(twice.data(), nullptr, g.data(), x.data(), 1, s, cols.data());
  for (size_t i = 0; i < once.size(); ++i) EXPECT_FLOAT_EQ(twice[i], 2 * once[i]);
}

TEST(ConvGradCheck, ShapesOfTheFashionMnistNetwork) {
  const ops::Conv2dShape s{1, 28, 28, 32, 3, 1, 1};
  EXPECT_EQ(s.H_out(), 28);
  EXPECT_EQ(s.W_out(), 28);
  EXPECT_EQ(s.macs(), 32 * 9 * 784);
  const ops::Conv2dShape t{32, 14, 14, 64, 3, 2, 0};
  EXPECT_EQ(t.H_out(), 6);  // (14 − 3)/2 + 1
}

TEST(MaxPoolGradCheck, FloorDropsTheEdges) {
  const int64_t NC = 3, H = 5, W = 7, P = 2;
  auto x = randn(static_cast<size_t>(NC * H * W), 7);
  const size_t out_n = static_cast<size_t>(NC * (H / P) * (W / P));
  auto r = randn(out_n, 8);
  std::vector<float> y(out_n), dx(x.size());
  ops::maxpool2d_forward(y.data(), x.data(), NC, H, W, P);
  auto xd = to_double(x);
  const auto want = pool_ref(xd, NC, H, W, P);
  for (size_t i = 0; i < out_n; ++i) ASSERT_EQ(static_cast<double>(y[i]), want[i]);
  ops::maxpool2d_backward(dx.data(), r.data(), x.data(), NC, H, W, P);
  expect_gradient(xd, dx, [&] { return dot(pool_ref(xd, NC, H, W, P), r); }, "maxpool dinp");
  for (int64_t c = 0; c < NC; ++c)
    for (int64_t j = 0; j < W; ++j)
      EXPECT_EQ(dx[static_cast<size_t>((c * H + H - 1) * W + j)], 0.0f) << "row past the windows";
}

}  // namespace
}  // namespace psar
