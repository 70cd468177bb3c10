#include "modelpar/tp/row_parallel_linear.h"

#include "core/errors.h"
#include "core/ops.h"
#include "modelpar/tp/conjugate.h"

namespace psar {

RowParallelLinear::RowParallelLinear(TpGroup& tp, RowParallelOptions options)
    : tp_(tp), o_(std::move(options)) {
  if (o_.in <= 0 || o_.out <= 0)
    throw ConfigError(o_.name + ": a linear layer needs positive sizes, got " +
                      std::to_string(o_.in) + " -> " + std::to_string(o_.out));
  if (o_.in % tp_.size() != 0)
    throw ConfigError(o_.name + ": " + std::to_string(o_.in) +
                      " input features cannot be split over parallel.tp = " +
                      std::to_string(tp_.size()) + " ranks");
}

void RowParallelLinear::declare(ShardedParams& params, ParamStore& store) {
  weight_ = params.add(store, o_.name + ".weight", {o_.in, o_.out}, Init::normal(o_.init_std),
                       ShardSpec::rows());
  if (o_.bias)
    bias_ = params.add(store, o_.name + ".bias", {o_.out}, Init::zeros(), ShardSpec::replicated());
}

std::pair<const float*, int64_t> RowParallelLinear::local_input(const float* x) const {
  if (o_.input_is_parallel) return {x, in_local()};
  return {x + tp_.rank() * in_local(), o_.in};  // scatter: this rank's columns, read in place
}

void RowParallelLinear::forward(float* y, const float* x, int64_t N) {
  PSAR_CHECK(store_, o_.name, " used before bind()");
  const auto [xr, ld] = local_input(x);
  // y = x_r · B_r: [N, out], a partial sum over the group
  float* partial = y;
  if (o_.sequence_parallel) {
    y_whole_.resize(static_cast<size_t>(N * o_.out));
    partial = y_whole_.data();
  }
  ops::gemm(false, false, N, o_.out, in_local(), 1.0f, xr, ld, store_->param(weight_).data(),
            o_.out, 0.0f, partial, o_.out);
  forward_flops_ += 2 * N * in_local() * o_.out;
  int64_t rows = N;
  if (o_.sequence_parallel) {
    reduce_scatter_rows(tp_, y, partial, N, o_.out);
    rows = N / tp_.size();
  } else {
    g_forward(tp_, {y, static_cast<size_t>(N * o_.out)});
  }
  if (o_.bias) {
    const float* b = store_->param(bias_).data();
    for (int64_t i = 0; i < rows; ++i) ops::add_inplace(y + i * o_.out, b, o_.out);
  }
}

const float* RowParallelLinear::whole_grad(const float* dy, int64_t N) {
  if (!o_.sequence_parallel) return dy;
  dy_whole_.resize(static_cast<size_t>(N * o_.out));
  gather_rows(tp_, dy_whole_.data(), dy, N, o_.out);
  return dy_whole_.data();
}

void RowParallelLinear::backward_input(float* dx, const float* dy, int64_t N) {
  dy = whole_grad(dy, N);
  g_backward(tp_, {dy, static_cast<size_t>(N * o_.out)});
  const float* B = store_->param(weight_).data();
  if (o_.input_is_parallel) {
    ops::linear_backward_input(dx, dy, B, N, in_local(), o_.out);
    return;
  }
  dx_local_.resize(static_cast<size_t>(N * in_local()));
  ops::linear_backward_input(dx_local_.data(), dy, B, N, in_local(), o_.out);
  gather_columns(tp_, dx, dx_local_.data(), N, o_.in, gather_scratch_);
}

void RowParallelLinear::backward_weight(const float* dy, const float* x, int64_t N) {
  dy = whole_grad(dy, N);
  const auto [xr, ld] = local_input(x);
  // dB_r += x_rᵀ · dy: [in/t, out]
  ops::gemm(true, false, in_local(), o_.out, N, 1.0f, xr, ld, dy, o_.out, 1.0f,
            store_->grad(weight_).data(), o_.out);
  if (o_.bias) {
    float* db = store_->grad(bias_).data();
    for (int64_t i = 0; i < N; ++i) ops::add_inplace(db, dy + i * o_.out, o_.out);
  }
}

}  // namespace psar
