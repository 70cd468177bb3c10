#include "workloads/mlp.h"

#include <cmath>

#include "core/errors.h"
#include "core/ops.h"

namespace psar {

Mlp::Mlp(MlpOptions options) : o_(std::move(options)) {
  widths_.push_back(o_.inputs);
  for (int64_t h : o_.hidden) {
    if (h <= 0) throw ConfigError("model.hidden: layer widths must be positive, got " + std::to_string(h));
    widths_.push_back(h);
  }
  widths_.push_back(o_.classes);
}

void Mlp::declare(ParamStore& store) {
  for (size_t l = 0; l + 1 < widths_.size(); ++l) {
    const int64_t in = widths_[l], out = widths_[l + 1];
    const std::string p = "fc" + std::to_string(l);
    // He initialization for ReLU-family activations.
    weight_ids_.push_back(store.add(p + ".weight", {in, out},
                                    Init::normal(static_cast<float>(std::sqrt(2.0 / in)))));
    bias_ids_.push_back(store.add(p + ".bias", {out}, Init::zeros()));
  }
}

void Mlp::bind(ParamStore& store) { store_ = &store; }

void Mlp::forward(const Batch& batch) {
  PSAR_CHECK(store_, "Mlp used before bind()");
  const int64_t B = batch.size;
  PSAR_CHECK(batch.inputs.numel() == B * o_.inputs, "batch has ", batch.inputs.numel(),
             " inputs, expected ", B * o_.inputs);
  const size_t L = widths_.size() - 1;
  pre_.resize(L);
  acts_.resize(L);
  const float* h = batch.inputs.data();
  for (size_t l = 0; l < L; ++l) {
    const int64_t in = widths_[l], out = widths_[l + 1];
    if (pre_[l].numel() != B * out) pre_[l].resize({B, out});
    if (acts_[l].numel() != B * out) acts_[l].resize({B, out});
    Tensor W = store_->param(weight_ids_[l]), b = store_->param(bias_ids_[l]);
    const bool last = l + 1 == L;
    float* z = last ? acts_[l].data() : pre_[l].data();
    ops::linear_forward(z, h, W.data(), b.data(), B, in, out);
    if (!last) {
      if (o_.gelu) ops::gelu_forward(acts_[l].data(), z, B * out);
      else ops::relu_forward(acts_[l].data(), z, B * out);
    }
    h = acts_[l].data();
  }
}

double Mlp::forward_backward(const Batch& batch, float grad_scale) {
  forward(batch);
  const int64_t B = batch.size;
  const size_t L = widths_.size() - 1;
  // dcur_: gradient w.r.t. the current layer's output, [B, out]
  dcur_.resize({B, o_.classes});
  const double loss = ops::softmax_cross_entropy(acts_[L - 1].data(), batch.targets.data(), B,
                                                 o_.classes, dcur_.data(), grad_scale);
  for (size_t l = L; l-- > 0;) {
    const int64_t in = widths_[l], out = widths_[l + 1];
    const float* h_in = l == 0 ? batch.inputs.data() : acts_[l - 1].data();
    Tensor W = store_->param(weight_ids_[l]);
    ops::linear_backward_weight(store_->grad(weight_ids_[l]).data(),
                                store_->grad(bias_ids_[l]).data(), dcur_.data(), h_in, B, in, out);
    if (l == 0) break;  // no gradient w.r.t. the data
    dprev_.resize({B, in});
    ops::linear_backward_input(dprev_.data(), dcur_.data(), W.data(), B, in, out);
    // Through the activation of layer l-1 (its pre-activation is pre_[l-1]).
    if (o_.gelu) ops::gelu_backward(dprev_.data(), dprev_.data(), pre_[l - 1].data(), B * in);
    else ops::relu_backward(dprev_.data(), dprev_.data(), pre_[l - 1].data(), B * in);
    std::swap(dcur_, dprev_);
  }
  return loss;
}

EvalStats Mlp::evaluate(const Batch& batch) {
  forward(batch);
  const float* logits = acts_.back().data();
  EvalStats s;
  s.count = batch.size;
  s.loss_sum = ops::softmax_cross_entropy(logits, batch.targets.data(), batch.size, o_.classes,
                                          nullptr) * static_cast<double>(batch.size);
  s.correct = ops::count_correct(logits, batch.targets.data(), batch.size, o_.classes);
  return s;
}

std::unique_ptr<Model> make_mlp(const Config& config, const Dataset& data, const ModelContext&) {
  MlpOptions o;
  o.inputs = data.features();
  o.classes = data.classes();
  o.hidden = config.get_int_list("model.hidden");
  o.gelu = config.get_string("model.activation") == "gelu";
  return std::make_unique<Mlp>(o);
}

}  // namespace psar
