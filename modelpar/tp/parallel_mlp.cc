#include "modelpar/tp/parallel_mlp.h"

#include <utility>

#include "core/errors.h"
#include "core/ops.h"
#include "modelpar/tp/column_parallel_linear.h"
#include "modelpar/tp/row_parallel_linear.h"

namespace psar {

namespace {
constexpr std::pair<const char*, MlpSplit> kSplits[] = {{"column_row", MlpSplit::kColumnRow},
                                                        {"row_column", MlpSplit::kRowColumn}};
}  // namespace

std::vector<std::string> mlp_split_names() {
  std::vector<std::string> names;
  for (const auto& [name, split] : kSplits) names.emplace_back(name);
  return names;
}

MlpSplit parse_mlp_split(const std::string& name) {
  std::string known;
  for (const auto& [n, split] : kSplits) {
    if (name == n) return split;
    known += (known.empty() ? "" : ", ") + std::string(n);
  }
  throw ConfigError("parallel.tp_split: '" + name + "' is not a split (" + known + ")");
}

ParallelMLP::ParallelMLP(TpGroup& tp, ParallelMlpOptions options)
    : tp_(tp), o_(std::move(options)) {
  const int t = tp_.size();
  if (o_.hidden % t != 0 || o_.d_model % t != 0)
    throw ConfigError(o_.name + ": MLP hidden size " + std::to_string(o_.hidden) + " and d_model " +
                      std::to_string(o_.d_model) +
                      " must both be divisible by parallel.tp = " + std::to_string(t));
  if (o_.sequence_parallel && o_.split != MlpSplit::kColumnRow)
    throw ConfigError(o_.name +
                      ": parallel.sequence_parallel needs parallel.tp_split column_row, not "
                      "row_column");
  auto column = [&](const std::string& name, int64_t in, int64_t out, float stddev,
                    bool gather_output) -> std::unique_ptr<ParallelLinear> {
    ColumnParallelOptions c;
    c.name = name, c.in = in, c.out = out, c.init_std = stddev, c.gather_output = gather_output;
    c.sequence_parallel = o_.sequence_parallel;
    return std::make_unique<ColumnParallelLinear>(tp_, c);
  };
  auto row = [&](const std::string& name, int64_t in, int64_t out, float stddev,
                 bool input_is_parallel) -> std::unique_ptr<ParallelLinear> {
    RowParallelOptions r;
    r.name = name, r.in = in, r.out = out, r.init_std = stddev;
    r.input_is_parallel = input_is_parallel;
    r.sequence_parallel = o_.sequence_parallel;
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

int64_t ParallelMLP::Activations::bytes() const {
  size_t floats = 0;
  for (const auto* v : {&h_pre, &h_act, &dz_pre, &dh_act, &dh_pre}) floats += v->size();
  return static_cast<int64_t>(floats * sizeof(float));
}

int64_t ParallelMLP::activation_floats(int64_t N) const {
  return 4 * N * fc_->out_features() + local_rows(N) * o_.d_model;
}

void ParallelMLP::forward(Activations& a, float* z, const float* x, int64_t N,
                          const DropoutContext& drop) {
  const int64_t h = fc_->out_features(), d = o_.d_model, n = local_rows(N);
  a.drop = drop;
  for (auto* v : {&a.h_pre, &a.h_act, &a.dh_act, &a.dh_pre}) v->resize(static_cast<size_t>(N * h));
  a.dz_pre.resize(static_cast<size_t>(n * d));
  // column_row: h_pre = X·A_r, this rank's columns, no communication;
  // row_column: h_pre = Σ_r X_r·A_r, all-reduced by g inside fc_ before GeLU.
  fc_->forward(a.h_pre.data(), x, N);
  ops::gelu_forward(a.h_act.data(), a.h_pre.data(), N * h);
  // column_row: Y_r·B_r all-reduced by g; row_column: the blocks Y·B_r gathered.
  proj_->forward(z, a.h_act.data(), N);
  if (drop.p > 0)
    ops::dropout_forward(z, z, n * d, drop.p, drop.seed, drop.stream(o_.name + ".dropout"),
                         first_element(N));
}

void ParallelMLP::backward_input(Activations& a, float* dx, const float* dz, int64_t N) {
  const int64_t h = fc_->out_features(), d = o_.d_model, n = local_rows(N);
  PSAR_CHECK(a.dh_pre.size() == static_cast<size_t>(N * h), o_.name,
             ": backward of activations its forward did not size for ", N, " rows");
  // dz: [N, d] whole on every rank (g backward is the identity)
  ops::dropout_backward(a.dz_pre.data(), dz, n * d, a.drop.p, a.drop.seed,
                        a.drop.stream(o_.name + ".dropout"), first_element(N));
  proj_->backward_input(a.dh_act.data(), a.dz_pre.data(), N);
  ops::gelu_backward(a.dh_pre.data(), a.dh_act.data(), a.h_pre.data(), N * h);
  // column_row: f all-reduces the partial dX; row_column: the blocks are gathered.
  fc_->backward_input(dx, a.dh_pre.data(), N);
}

void ParallelMLP::backward_weight(const Activations& a, const float* x, int64_t N) {
  proj_->backward_weight(a.dz_pre.data(), a.h_act.data(), N);
  fc_->backward_weight(a.dh_pre.data(), x, N);
}

}  // namespace psar
