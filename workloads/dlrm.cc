#include "workloads/dlrm.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/errors.h"
#include "modelpar/tp/group.h"
#include "workloads/sparse_data.h"

namespace psar {

using psar::detail::concat;

// The MLP's own activations, and the gradient of its input [b, F + T·dim].
struct Dlrm::Stash final : pp::Activations {
  std::unique_ptr<pp::Activations> mlp;
  std::vector<float> dx;
  int64_t bytes() const override {
    return mlp->bytes() + static_cast<int64_t>(dx.size() * sizeof(float));
  }
};

Dlrm::Dlrm(DlrmOptions options, const ModelContext& context) : o_(std::move(options)) {
  if (context.tp && context.tp->size() > 1)
    throw ConfigError(concat("model.type dlrm has no tensor-parallel layers (parallel.tp = ",
                             context.tp->size(), "); set parallel.tp = 1"));
  if (context.layout.vstages() > 1 || context.layout.microbatches > 1)
    throw ConfigError("model.type dlrm runs serially: set parallel.pp = 1 and parallel.microbatches = 1");
  if (o_.tables.empty()) throw ConfigError("model.tables: a dlrm needs at least one table");
  for (size_t t = 0; t < o_.tables.size(); ++t)
    if (o_.tables[t] < 1)
      throw ConfigError(concat("model.tables[", t, "] = ", o_.tables[t], ": rows must be ≥ 1"));
  if (o_.dim < 1) throw ConfigError(concat("model.embedding_dim = ", o_.dim, ": must be ≥ 1"));
  MlpOptions m = o_.mlp;
  m.inputs += static_cast<int64_t>(o_.tables.size()) * o_.dim;
  m.input_gradient = true;
  mlp_ = std::make_unique<Mlp>(m, context);
  touched_.resize(o_.tables.size());
}

Dlrm::~Dlrm() = default;

void Dlrm::declare(ParamStore& store, int chunk) {
  // Tables first: the sparse range is the arena's head.
  params_.clear();
  for (size_t t = 0; t < o_.tables.size(); ++t)
    params_.push_back(store.add("emb" + std::to_string(t) + ".weight", {o_.tables[t], o_.dim},
                                Init::normal(static_cast<float>(1.0 / std::sqrt(o_.dim)))));
  mlp_->declare(store, chunk);
}

void Dlrm::bind(ParamStore& store) {
  if (store.device() != Device::kCpu)
    throw ConfigError("model.type dlrm runs on train.device cpu");
  store_ = &store;
  mlp_->bind(store);
}

std::vector<SparseTable> Dlrm::sparse_tables() const {
  PSAR_CHECK(store_, "Dlrm::sparse_tables before bind()");
  std::vector<SparseTable> out;
  for (size_t t = 0; t < params_.size(); ++t) {
    const ParamInfo& p = store_->infos()[static_cast<size_t>(params_[t])];
    out.push_back({p.name, p.offset, o_.tables[t], o_.dim});
  }
  return out;
}

std::span<const int64_t> Dlrm::touched_rows(int table) const {
  return touched_.at(static_cast<size_t>(table));
}

void Dlrm::join(const Batch& batch, Batch& out) const {
  const int64_t T = static_cast<int64_t>(o_.tables.size());
  const int64_t F = o_.mlp.inputs, W = F + T * o_.dim;
  PSAR_CHECK(batch.inputs.numel() == batch.size * F, "dlrm batch has ", batch.inputs.numel(),
             " dense inputs, expected ", batch.size * F);
  PSAR_CHECK(static_cast<int64_t>(batch.tokens.size()) == batch.size * T, "dlrm batch has ",
             batch.tokens.size(), " ids, expected ", batch.size * T);
  out.size = batch.size;
  if (out.inputs.numel() != batch.size * W) out.inputs.resize({batch.size, W});
  out.targets = batch.targets;
  float* o = out.inputs.data();
  for (int64_t i = 0; i < batch.size; ++i) {
    std::memcpy(o + i * W, batch.inputs.data() + i * F, sizeof(float) * static_cast<size_t>(F));
    for (int64_t t = 0; t < T; ++t) {
      const int64_t id = batch.tokens[static_cast<size_t>(i * T + t)];
      PSAR_CHECK(id >= 0 && id < o_.tables[t], "id ", id, " outside table ", t, " of ",
                 o_.tables[t], " rows");
      std::memcpy(o + i * W + F + t * o_.dim,
                  store_->params().data() + store_->infos()[params_[t]].offset + id * o_.dim,
                  sizeof(float) * static_cast<size_t>(o_.dim));
    }
  }
}

void Dlrm::set_batch(const Batch& batch) {
  const int64_t T = static_cast<int64_t>(o_.tables.size());
  for (int64_t t = 0; t < T; ++t) {
    auto& rows = touched_[static_cast<size_t>(t)];
    rows.clear();
    for (int64_t i = 0; i < batch.size; ++i)
      rows.push_back(batch.tokens.at(static_cast<size_t>(i * T + t)));
    std::sort(rows.begin(), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  }
  batch_ = &batch;
}

std::unique_ptr<pp::Activations> Dlrm::make_activations(int chunk) const {
  auto s = std::make_unique<Stash>();
  s->mlp = mlp_->make_activations(chunk);
  return s;
}

void Dlrm::forward(int chunk, int, pp::Activations& a, std::span<const float>, std::span<float>) {
  PSAR_CHECK(batch_, "Dlrm::forward before set_batch()");
  params_needed(chunk, 0, store_->size());
  join(*batch_, joined_);  // the rows as they are now, after the last step's update
  mlp_->set_batch(joined_);
  auto& s = static_cast<Stash&>(a);
  mlp_->forward(chunk, 0, *s.mlp, {}, {});
}

void Dlrm::backward_input(int chunk, int, pp::Activations& a, std::span<const float>,
                          std::span<float>) {
  auto& s = static_cast<Stash&>(a);
  const int64_t T = static_cast<int64_t>(o_.tables.size());
  const int64_t F = o_.mlp.inputs, W = F + T * o_.dim;
  s.dx.assign(static_cast<size_t>(batch_->size * W), 0.0f);
  mlp_->backward_input(chunk, 0, *s.mlp, {}, s.dx);
  // Scatter-add each looked-up row's gradient into its table's gradient.
  float* g = store_->grads().data();
  for (int64_t i = 0; i < batch_->size; ++i)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t id = batch_->tokens[static_cast<size_t>(i * T + t)];
      float* row = g + store_->infos()[params_[t]].offset + id * o_.dim;
      const float* d = s.dx.data() + i * W + F + t * o_.dim;
      for (int64_t k = 0; k < o_.dim; ++k) row[k] += d[k];
    }
}

void Dlrm::backward_weight(int chunk, int, pp::Activations& a) {
  mlp_->backward_weight(chunk, 0, *static_cast<Stash&>(a).mlp);
  gradient_ready(chunk, 0, store_->size());
}

int64_t Dlrm::activation_bytes(int chunk) const {
  const int64_t W = o_.mlp.inputs + static_cast<int64_t>(o_.tables.size()) * o_.dim;
  return mlp_->activation_bytes(chunk) +
         W * (batch_ ? batch_->size : 0) * static_cast<int64_t>(sizeof(float));
}

EvalStats Dlrm::eval_forward(int chunk, const Batch& batch, std::span<const float>,
                             std::span<float>) {
  join(batch, eval_joined_);
  return mlp_->eval_forward(chunk, eval_joined_, {}, {});
}

int dlrm_layers(const WorkloadOptions& options, const Dataset& data) {
  return mlp_layers(options, data);
}

std::unique_ptr<Model> make_dlrm(const WorkloadOptions& options, const Dataset& data,
                                 const ModelContext& context) {
  DlrmOptions o;
  o.tables = options.tables;
  o.dim = options.embedding_dim;
  o.mlp.inputs = data.features();
  o.mlp.classes = data.classes();
  o.mlp.hidden = options.hidden;
  o.mlp.gelu = options.gelu;
  const auto* sparse = dynamic_cast<const SparseDataset*>(&data);
  if (!sparse)
    throw ConfigError("model.type dlrm needs categorical ids: set data.dataset = zipf");
  const auto& ranges = sparse->id_ranges();
  if (ranges.size() != o.tables.size())
    throw ConfigError(concat("data.zipf_ids lists ", ranges.size(), " tables, model.tables ",
                             o.tables.size()));
  for (size_t t = 0; t < ranges.size(); ++t)
    if (ranges[t] > o.tables[t])
      throw ConfigError(concat("data.zipf_ids[", t, "] = ", ranges[t], " exceeds model.tables[", t,
                               "] = ", o.tables[t], ": ids would lie outside the table"));
  return std::make_unique<Dlrm>(o, context);
}

}  // namespace psar
