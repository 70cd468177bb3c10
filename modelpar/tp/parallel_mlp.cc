#include "modelpar/tp/parallel_mlp.h"

#include "core/errors.h"
#include "core/ops.h"
#include "modelpar/tp/column_parallel_linear.h"
#include "modelpar/tp/row_parallel_linear.h"

namespace psar {

MlpSplit parse_mlp_split(const std::string& name) {
  if (name == "column_row") return MlpSplit::kColumnRow;
  if (name == "row_column") return MlpSplit::kRowColumn;
  throw ConfigError("parallel.tp_split: '" + name + "' is not a split (column_row, row_column)");
}

ParallelMLP::ParallelMLP(TpGroup& tp, ParallelMlpOptions options)
    : tp_(tp), o_(std::move(options)) {
  const int t = tp_.size();
  if (o_.hidden % t != 0 || o_.d_model % t != 0)
    throw ConfigError(o_.name + ": MLP hidden size " + std::to_string(o_.hidden) + " and d_model " +
                      std::to_string(o_.d_model) +
                      " must both be divisible by parallel.tp = " + std::to_string(t));
  auto column = [&](const std::string& name, int64_t in, int64_t out, float stddev,
                    bool gather_output) -> std::unique_ptr<ParallelLinear> {
    ColumnParallelOptions c;
    c.name = name, c.in = in, c.out = out, c.init_std = stddev, c.gather_output = gather_output;
    return std::make_unique<ColumnParallelLinear>(tp_, c);
  };
  auto row = [&](const std::string& name, int64_t in, int64_t out, float stddev,
                 bool input_is_parallel) -> std::unique_ptr<ParallelLinear> {
    RowParallelOptions r;
    r.name = name, r.in = in, r.out = out, r.init_std = stddev;
    r.input_is_parallel = input_is_parallel;
    return std::make_unique<RowParallelLinear>(tp_, r);
  };
  const int64_t d = o_.d_model, h = o_.hidden;
  if (o_.split == MlpSplit::kColumnRow) {
    // A by columns (nothing before GeLU), B by rows over the same hidden columns.
    fc_ = column(o_.name + ".fc", d, h, o_.init_std, /*gather_output=*/false);
    proj_ = row(o_.name + ".proj", h, d, o_.proj_init_std, /*input_is_parallel=*/true);
  } else {
    // X by columns and A by rows (all-reduce before GeLU), B by columns, gathered.
    fc_ = row(o_.name + ".fc", d, h, o_.init_std, /*input_is_parallel=*/false);
    proj_ = column(o_.name + ".proj", h, d, o_.proj_init_std, /*gather_output=*/true);
  }
}

void ParallelMLP::declare(ShardedParams& params, ParamStore& store) {
  fc_->declare(params, store);
  proj_->declare(params, store);
}

void ParallelMLP::bind(ParamStore& store) {
  fc_->bind(store);
  proj_->bind(store);
}

void ParallelMLP::forward(float* z, const float* x, int64_t N, const DropoutContext& drop) {
  const int64_t h = fc_->out_features(), d = o_.d_model;
  drop_ = drop;
  h_pre_.resize(static_cast<size_t>(N * h));
  h_act_.resize(static_cast<size_t>(N * h));
  // column_row: h_pre = X·A_r, this rank's columns, no communication;
  // row_column: h_pre = Σ_r X_r·A_r, all-reduced by g inside fc_ before GeLU.
  fc_->forward(h_pre_.data(), x, N);
  ops::gelu_forward(h_act_.data(), h_pre_.data(), N * h);
  // column_row: Y_r·B_r all-reduced by g; row_column: the blocks Y·B_r gathered.
  proj_->forward(z, h_act_.data(), N);
  if (drop_.p > 0)
    ops::dropout_forward(z, z, N * d, drop_.p, drop_.seed, drop_.stream(o_.name + ".dropout"), 0);
}

void ParallelMLP::backward_input(float* dx, const float* dz, int64_t N) {
  const int64_t h = fc_->out_features(), d = o_.d_model;
  dh_act_.resize(static_cast<size_t>(N * h));
  dh_pre_.resize(static_cast<size_t>(N * h));
  dz_pre_.resize(static_cast<size_t>(N * d));
  // dz: [N, d] whole on every rank (g backward is the identity)
  ops::dropout_backward(dz_pre_.data(), dz, N * d, drop_.p, drop_.seed,
                        drop_.stream(o_.name + ".dropout"), 0);
  proj_->backward_input(dh_act_.data(), dz_pre_.data(), N);
  ops::gelu_backward(dh_pre_.data(), dh_act_.data(), h_pre_.data(), N * h);
  // column_row: f all-reduces the partial dX; row_column: the blocks are gathered.
  fc_->backward_input(dx, dh_pre_.data(), N);
}

void ParallelMLP::backward_weight(const float* x, int64_t N) {
  proj_->backward_weight(dz_pre_.data(), h_act_.data(), N);
  fc_->backward_weight(dh_pre_.data(), x, N);
}

}  // namespace psar
