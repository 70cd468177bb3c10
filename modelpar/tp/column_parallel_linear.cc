#include "modelpar/tp/column_parallel_linear.h"

#include "core/errors.h"
#include "core/ops.h"
#include "modelpar/tp/conjugate.h"

namespace psar {

ColumnParallelLinear::ColumnParallelLinear(TpGroup& tp, ColumnParallelOptions options)
    : tp_(tp), o_(std::move(options)) {
  const int t = tp_.size();
  if (o_.in <= 0 || o_.out <= 0 || o_.groups < 1)
    throw ConfigError(o_.name + ": a linear layer needs positive sizes, got " +
                      std::to_string(o_.in) + " -> " + std::to_string(o_.out));
  if (o_.out % (static_cast<int64_t>(o_.groups) * t) != 0)
    throw ConfigError(o_.name + ": " + std::to_string(o_.out) + " output features" +
                      (o_.groups > 1 ? " in " + std::to_string(o_.groups) + " blocks" : "") +
                      " cannot be split over parallel.tp = " + std::to_string(t) + " ranks");
  PSAR_CHECK(!(o_.gather_output && o_.groups > 1), o_.name,
             ": gathering a grouped column split would reorder its columns");
}

void ColumnParallelLinear::declare(ShardedParams& params, ParamStore& store) {
  weight_ = params.add(store, o_.name + ".weight", {o_.in, o_.out}, Init::normal(o_.init_std),
                       ShardSpec::columns(o_.groups));
  if (o_.bias)
    bias_ = params.add(store, o_.name + ".bias", {o_.out}, Init::zeros(),
                       ShardSpec::columns(o_.groups));
}

void ColumnParallelLinear::forward(float* y, const float* x, int64_t N) {
  PSAR_CHECK(store_, o_.name, " used before bind()");
  const int64_t c = out_local();
  x = whole_input(x, N);
  f_forward(tp_, {x, static_cast<size_t>(N * o_.in)});
  const float* b = o_.bias ? store_->param(bias_).data() : nullptr;
  forward_flops_ += 2 * N * o_.in * c;  // [N, in]·[in, out/t]
  if (!o_.gather_output) {
    ops::linear_forward(y, x, store_->param(weight_).data(), b, N, o_.in, c);
    return;
  }
  y_local_.resize(static_cast<size_t>(N * c));
  ops::linear_forward(y_local_.data(), x, store_->param(weight_).data(), b, N, o_.in, c);
  gather_columns(tp_, y, y_local_.data(), N, o_.out, gather_scratch_);
}

const float* ColumnParallelLinear::local_grad(const float* dy, int64_t N) {
  if (!o_.gather_output) return dy;
  dy_local_.resize(static_cast<size_t>(N * out_local()));
  take_columns(dy_local_.data(), dy, N, o_.out, tp_.rank(), tp_.size());
  return dy_local_.data();
}

const float* ColumnParallelLinear::whole_input(const float* x, int64_t N) {
  if (!o_.sequence_parallel) return x;
  x_whole_.resize(static_cast<size_t>(N * o_.in));
  gather_rows(tp_, x_whole_.data(), x, N, o_.in);
  return x_whole_.data();
}

void ColumnParallelLinear::backward_input(float* dx, const float* dy, int64_t N) {
  if (o_.sequence_parallel) {
    dx_whole_.resize(static_cast<size_t>(N * o_.in));
    ops::linear_backward_input(dx_whole_.data(), local_grad(dy, N), store_->param(weight_).data(),
                               N, o_.in, out_local());
    reduce_scatter_rows(tp_, dx, dx_whole_.data(), N, o_.in);
    return;
  }
  ops::linear_backward_input(dx, local_grad(dy, N), store_->param(weight_).data(), N, o_.in,
                             out_local());
  f_backward(tp_, {dx, static_cast<size_t>(N * o_.in)});
}

void ColumnParallelLinear::backward_weight(const float* dy, const float* x, int64_t N) {
  ops::linear_backward_weight(store_->grad(weight_).data(),
                              o_.bias ? store_->grad(bias_).data() : nullptr, local_grad(dy, N),
                              whole_input(x, N), N, o_.in, out_local());
}

}  // namespace psar
