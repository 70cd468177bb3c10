#include "workloads/mlp_stages.h"

#include <cmath>
#include <cstring>

#include "core/errors.h"
#include "core/ops.h"

namespace psar {

using psar::detail::concat;

namespace {

int64_t bytes_of(const std::vector<float>& v) {
  return static_cast<int64_t>(v.capacity() * sizeof(float));
}

void release(std::vector<float>& v) { std::vector<float>().swap(v); }

}  // namespace

MlpStages::MlpStages(MlpOptions options, StageLayout layout)
    : o_(std::move(options)), layout_(std::move(layout)) {
  widths_.push_back(o_.inputs);
  for (int64_t h : o_.hidden) {
    if (h <= 0) throw ConfigError(concat("model.hidden: layer widths must be positive, got ", h));
    widths_.push_back(h);
  }
  widths_.push_back(o_.classes);
  const int L = static_cast<int>(widths_.size()) - 1;
  PSAR_CHECK(static_cast<int>(layout_.layers.size()) == layout_.vstages(),
             "stage layout has ", layout_.layers.size(), " layer counts for ", layout_.vstages(),
             " virtual stages");
  for (int c = 0; c < layout_.chunks; ++c) {
    const auto [first, last] = layout_.layer_range(layout_.vstage(c));
    PSAR_CHECK(first < last && last <= L, "virtual stage ", layout_.vstage(c), " has layers [",
               first, ", ", last, ") of ", L);
    std::vector<Layer> layers;
    for (int l = first; l < last; ++l)
      layers.push_back({l, widths_[static_cast<size_t>(l)], widths_[static_cast<size_t>(l) + 1],
                        l == L - 1});
    chunks_.push_back(std::move(layers));
  }
  stash_.resize(static_cast<size_t>(layout_.chunks * layout_.microbatches));
}

// Same names, shapes and initializers as Mlp::declare.
void MlpStages::declare(ParamStore& store, int chunk) {
  for (Layer& layer : chunks_.at(static_cast<size_t>(chunk))) {
      const std::string p = "fc" + std::to_string(layer.index);
      layer.weight = store.add(p + ".weight", {layer.in, layer.out},
                               Init::normal(static_cast<float>(std::sqrt(2.0 / layer.in))));
      layer.bias = store.add(p + ".bias", {layer.out}, Init::zeros());
  }
}

void MlpStages::bind(ParamStore& store) { store_ = &store; }

void MlpStages::set_batch(const Batch& batch) {
  const int64_t rows = layout_.microbatch_rows * layout_.microbatches;
  PSAR_CHECK(batch.size == rows, "the pipeline batch has ", batch.size, " rows, expected m·b = ",
             rows);
  PSAR_CHECK(batch.inputs.numel() == rows * o_.inputs, "batch has ", batch.inputs.numel(),
             " inputs, expected ", rows * o_.inputs);
  batch_ = &batch;
  loss_ = 0;
}

int64_t MlpStages::boundary_numel(int vstage) const {
  return eval_numel(vstage, layout_.microbatch_rows);
}

int64_t MlpStages::eval_numel(int vstage, int64_t rows) const {
  return rows * widths_[static_cast<size_t>(layout_.layer_range(vstage).second)];
}

int64_t MlpStages::stash_bytes(int chunk) const {
  const auto& layers = chunks_[static_cast<size_t>(chunk)];
  int64_t floats = layers.front().in;
  for (const Layer& layer : layers) floats += layer.out * (layer.classifier ? 2 : 3);
  return floats * layout_.microbatch_rows * static_cast<int64_t>(sizeof(float));
}

MlpStages::Stash& MlpStages::slot(int chunk, int microbatch) {
  return stash_[static_cast<size_t>(chunk * layout_.microbatches + microbatch)];
}

void MlpStages::run_layers(int chunk, const float* x, int64_t rows,
                           std::vector<std::vector<float>>& pre,
                           std::vector<std::vector<float>>& act) {
  PSAR_CHECK(store_, "MlpStages used before bind()");
  const float* h = x;
  const auto& layers = chunks_[static_cast<size_t>(chunk)];
  for (size_t j = 0; j < layers.size(); ++j) {
    const Layer& L = layers[j];
    // z = h·W + b: [rows, out]; the classifier writes its logits straight into act.
    float* z = L.classifier ? act[j].data() : pre[j].data();
    ops::linear_forward(z, h, store_->param(L.weight).data(), store_->param(L.bias).data(), rows,
                        L.in, L.out);
    if (!L.classifier) {
      if (o_.gelu) ops::gelu_forward(act[j].data(), z, rows * L.out);
      else ops::relu_forward(act[j].data(), z, rows * L.out);
    }
    h = act[j].data();
  }
}

void MlpStages::forward(int chunk, int i, std::span<const float> x, std::span<float> y) {
  PSAR_CHECK(batch_, "MlpStages::forward before set_batch()");
  const int64_t b = layout_.microbatch_rows;
  const auto& layers = chunks_[static_cast<size_t>(chunk)];
  Stash& s = slot(chunk, i);
  PSAR_CHECK(s.x.empty(), "micro-batch ", i, " runs forward twice on chunk ", chunk);
  const float* in = first_vstage(chunk) ? batch_->inputs.data() + i * b * o_.inputs : x.data();
  PSAR_CHECK(first_vstage(chunk) || static_cast<int64_t>(x.size()) == b * layers.front().in,
             "chunk input has ", x.size(), " floats");
  s.x.assign(in, in + b * layers.front().in);
  s.pre.resize(layers.size());
  s.act.resize(layers.size());
  s.dpre.resize(layers.size());
  for (size_t j = 0; j < layers.size(); ++j) {
    const auto n = static_cast<size_t>(b * layers[j].out);
    if (!layers[j].classifier) s.pre[j].resize(n);
    s.act[j].resize(n);
    s.dpre[j].resize(n);
  }
  run_layers(chunk, s.x.data(), b, s.pre, s.act);
  if (last_vstage(chunk)) {
    // The backward starts here: dlogits = (1/m)·∂(mean loss of micro-batch i)/∂logits.
    const float scale = 1.0f / static_cast<float>(layout_.microbatches);
    loss_ += ops::softmax_cross_entropy(s.act.back().data(), batch_->targets.data() + i * b, b,
                                        o_.classes, s.dpre.back().data(), scale) *
             scale;
  } else {
    PSAR_CHECK(y.size() == s.act.back().size(), "chunk output has ", y.size(), " floats");
    std::memcpy(y.data(), s.act.back().data(), y.size() * sizeof(float));
  }
  int64_t bytes = bytes_of(s.x);
  for (size_t j = 0; j < layers.size(); ++j)
    bytes += bytes_of(s.pre[j]) + bytes_of(s.act[j]) + bytes_of(s.dpre[j]);
  live_ += 1;
  live_bytes_ += bytes;
}

void MlpStages::backward_input(int chunk, int i, std::span<const float> dy, std::span<float> dx) {
  const int64_t b = layout_.microbatch_rows;
  const auto& layers = chunks_[static_cast<size_t>(chunk)];
  Stash& s = slot(chunk, i);
  PSAR_CHECK(!s.x.empty(), "backward of micro-batch ", i, " on chunk ", chunk, " before its forward");
  const size_t top = layers.size() - 1;
  // The gradient of the top layer's pre-activation: from the loss (already in
  // dpre) on the last virtual stage, through the activation elsewhere.
  if (!layers[top].classifier) {
    PSAR_CHECK(dy.size() == s.act[top].size(), "chunk output gradient has ", dy.size(), " floats");
    const int64_t n = b * layers[top].out;
    if (o_.gelu) ops::gelu_backward(s.dpre[top].data(), dy.data(), s.pre[top].data(), n);
    else ops::relu_backward(s.dpre[top].data(), dy.data(), s.pre[top].data(), n);
  }
  for (size_t j = top + 1; j-- > 0;) {
    const Layer& L = layers[j];
    const float* W = store_->param(L.weight).data();
    if (j == 0) {
      if (!first_vstage(chunk))  // the data needs no gradient
        ops::linear_backward_input(dx.data(), s.dpre[0].data(), W, b, L.in, L.out);
      break;
    }
    // Into layer j−1's pre-activation gradient, then through its activation, in place.
    float* d = s.dpre[j - 1].data();
    ops::linear_backward_input(d, s.dpre[j].data(), W, b, L.in, L.out);
    if (o_.gelu) ops::gelu_backward(d, d, s.pre[j - 1].data(), b * L.in);
    else ops::relu_backward(d, d, s.pre[j - 1].data(), b * L.in);
  }
}

void MlpStages::backward_weight(int chunk, int i) {
  const int64_t b = layout_.microbatch_rows;
  const auto& layers = chunks_[static_cast<size_t>(chunk)];
  Stash& s = slot(chunk, i);
  PSAR_CHECK(!s.x.empty(), "weight gradient of micro-batch ", i, " on chunk ", chunk,
             " before its forward");
  int64_t bytes = bytes_of(s.x);
  for (size_t j = 0; j < layers.size(); ++j) {
    const Layer& L = layers[j];
    const float* h_in = j == 0 ? s.x.data() : s.act[j - 1].data();
    ops::linear_backward_weight(store_->grad(L.weight).data(), store_->grad(L.bias).data(),
                                s.dpre[j].data(), h_in, b, L.in, L.out);
  }
  for (size_t j = 0; j < layers.size(); ++j) {
    bytes += bytes_of(s.pre[j]) + bytes_of(s.act[j]) + bytes_of(s.dpre[j]);
    release(s.pre[j]);
    release(s.act[j]);
    release(s.dpre[j]);
  }
  release(s.x);
  live_ -= 1;
  live_bytes_ -= bytes;
}

EvalStats MlpStages::eval_forward(int chunk, const Batch& batch, std::span<const float> x,
                                  std::span<float> y) {
  const int64_t rows = batch.size;
  const auto& layers = chunks_[static_cast<size_t>(chunk)];
  eval_pre_.resize(layers.size());
  eval_act_.resize(layers.size());
  for (size_t j = 0; j < layers.size(); ++j) {
    eval_pre_[j].resize(static_cast<size_t>(rows * layers[j].out));
    eval_act_[j].resize(static_cast<size_t>(rows * layers[j].out));
  }
  run_layers(chunk, first_vstage(chunk) ? batch.inputs.data() : x.data(), rows, eval_pre_,
             eval_act_);
  EvalStats s;
  if (!last_vstage(chunk)) {
    std::memcpy(y.data(), eval_act_.back().data(), y.size() * sizeof(float));
    return s;
  }
  const float* logits = eval_act_.back().data();
  s.count = rows;
  s.loss_sum = ops::softmax_cross_entropy(logits, batch.targets.data(), rows, o_.classes, nullptr) *
               static_cast<double>(rows);
  s.correct = ops::count_correct(logits, batch.targets.data(), rows, o_.classes);
  return s;
}

int mlp_layers(const Config& config, const Dataset&) {
  return static_cast<int>(config.get_int_list("model.hidden").size()) + 1;
}

std::unique_ptr<PipelineStages> make_mlp_stages(const Config& config, const Dataset& data,
                                                const StageLayout& layout) {
  MlpOptions o;
  o.inputs = data.features();
  o.classes = data.classes();
  o.hidden = config.get_int_list("model.hidden");
  o.gelu = config.get_string("model.activation") == "gelu";
  return std::make_unique<MlpStages>(o, layout);
}

}  // namespace psar
