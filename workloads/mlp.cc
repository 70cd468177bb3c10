#include "workloads/mlp.h"

#include <cmath>
#include <cstring>

#include "core/errors.h"
#include "core/ops.h"
#include "modelpar/tp/group.h"

namespace psar {

using psar::detail::concat;

// One micro-batch on one chunk, from its forward to its weight gradient. Per
// layer j of the chunk, [b, out_j] each: the pre-activation (none for the
// classifier), the activation (the logits for the classifier) and the
// gradient of the pre-activation. x: the chunk's input [b, in_0].
// All of it on the model's device.
struct Mlp::Stash final : pp::Activations {
  explicit Stash(Device device) : x({0}, device) {}
  Tensor x;
  std::vector<Tensor> pre, act, dpre;

  int64_t bytes() const override {
    int64_t n = x.numel();
    for (const auto* list : {&pre, &act, &dpre})
      for (const auto& v : *list) n += v.numel();
    return n * static_cast<int64_t>(sizeof(float));
  }
};

namespace {
// Sizes `list` to `count` tensors on `device` (kept when already there).
void size_list(std::vector<Tensor>& list, size_t count, Device device) {
  while (list.size() < count) list.emplace_back(Shape{0}, device);
  list.resize(count);
}
}  // namespace

Mlp::Mlp(MlpOptions options, const ModelContext& context)
    : o_(std::move(options)), layout_(context.layout) {
  if (context.tp && context.tp->size() > 1)
    throw ConfigError(concat("model.type mlp has no tensor-parallel layers (parallel.tp = ",
                             context.tp->size(), "); set parallel.tp = 1"));
  widths_.push_back(o_.inputs);
  for (int64_t h : o_.hidden) {
    if (h <= 0) throw ConfigError(concat("model.hidden: layer widths must be positive, got ", h));
    widths_.push_back(h);
  }
  widths_.push_back(o_.classes);
  const int L = static_cast<int>(widths_.size()) - 1;
  if (layout_.layers.empty()) layout_ = StageLayout::serial(L, 1);
  PSAR_CHECK(static_cast<int>(layout_.layers.size()) == layout_.vstages(), "stage layout has ",
             layout_.layers.size(), " layer counts for ", layout_.vstages(), " virtual stages");
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
}

void Mlp::declare(ParamStore& store, int chunk) {
  for (Layer& layer : chunks_.at(static_cast<size_t>(chunk))) {
    const std::string p = "fc" + std::to_string(layer.index);
    // He initialization for ReLU-family activations.
    layer.weight = store.add(p + ".weight", {layer.in, layer.out},
                             Init::normal(static_cast<float>(std::sqrt(2.0 / layer.in))));
    layer.bias = store.add(p + ".bias", {layer.out}, Init::zeros());
  }
}

void Mlp::set_batch(const Batch& batch) {
  if (layout_.vstages() == 1 && layout_.microbatches == 1) layout_.microbatch_rows = batch.size;
  const int64_t rows = layout_.microbatch_rows * layout_.microbatches;
  PSAR_CHECK(batch.size == rows, "the batch has ", batch.size, " rows, expected m·b = ", rows);
  PSAR_CHECK(batch.inputs.numel() == rows * o_.inputs, "batch has ", batch.inputs.numel(),
             " inputs, expected ", rows * o_.inputs);
  batch_ = &batch;
  staged_.load(batch, device_);
  loss_ = 0;
}

int64_t Mlp::boundary_numel(int vstage) const { return eval_numel(vstage, layout_.microbatch_rows); }

int64_t Mlp::eval_numel(int vstage, int64_t rows) const {
  return rows * widths_[static_cast<size_t>(layout_.layer_range(vstage).second)];
}

std::unique_ptr<pp::Activations> Mlp::make_activations(int) const {
  return std::make_unique<Stash>(device_);
}

// b·(in_0 + Σ_j out_j·3), two instead of three for the classifier.
int64_t Mlp::activation_bytes(int chunk) const {
  const auto& layers = chunks_[static_cast<size_t>(chunk)];
  int64_t floats = layers.front().in;
  for (const Layer& layer : layers) floats += layer.out * (layer.classifier ? 2 : 3);
  return floats * layout_.microbatch_rows * static_cast<int64_t>(sizeof(float));
}

void Mlp::run_layers(int chunk, const float* x, int64_t rows, std::vector<Tensor>& pre,
                     std::vector<Tensor>& act) {
  PSAR_CHECK(store_, "Mlp used before bind()");
  const float* h = x;
  const auto& layers = chunks_[static_cast<size_t>(chunk)];
  for (size_t j = 0; j < layers.size(); ++j) {
    const Layer& L = layers[j];
    const ParamInfo& w = store_->infos()[static_cast<size_t>(L.weight)];
    const ParamInfo& bias = store_->infos()[static_cast<size_t>(L.bias)];
    params_needed(chunk, w.offset, bias.offset + bias.numel);
    // z = h·W + b: [rows, out]; the classifier writes its logits straight into act.
    float* z = L.classifier ? act[j].data() : pre[j].data();
    ops::linear_forward(z, h, store_->param(L.weight).data(), store_->param(L.bias).data(), rows,
                        L.in, L.out);
    params_done(chunk, w.offset, bias.offset + bias.numel);
    if (!L.classifier) {
      if (o_.gelu) ops::gelu_forward(act[j].data(), z, rows * L.out);
      else ops::relu_forward(act[j].data(), z, rows * L.out);
    }
    h = act[j].data();
  }
}

void Mlp::forward(int chunk, int i, pp::Activations& a, std::span<const float> x,
                  std::span<float> y) {
  PSAR_CHECK(batch_, "Mlp::forward before set_batch()");
  const int64_t b = layout_.microbatch_rows;
  const auto& layers = chunks_[static_cast<size_t>(chunk)];
  Stash& s = static_cast<Stash&>(a);
  const bool front = layout_.front(chunk);
  const float* in = front ? staged_.inputs() + i * b * o_.inputs : x.data();
  PSAR_CHECK(front || static_cast<int64_t>(x.size()) == b * layers.front().in, "chunk input has ",
             x.size(), " floats");
  s.x.ensure({b * layers.front().in});
  ops::copy(s.x.data(), in, s.x.numel());
  size_list(s.pre, layers.size(), device_);
  size_list(s.act, layers.size(), device_);
  size_list(s.dpre, layers.size(), device_);
  for (size_t j = 0; j < layers.size(); ++j) {
    const int64_t n = b * layers[j].out;
    s.pre[j].ensure({layers[j].classifier ? 0 : n});
    s.act[j].ensure({n});
    s.dpre[j].ensure({n});
  }
  run_layers(chunk, s.x.data(), b, s.pre, s.act);
  if (layout_.back(chunk)) {
    // The backward starts here: dlogits = (1/m)·∂(mean loss of micro-batch i)/∂logits.
    const float scale = 1.0f / static_cast<float>(layout_.microbatches);
    loss_ += ops::softmax_cross_entropy(s.act.back().data(), staged_.targets() + i * b, b,
                                        o_.classes, s.dpre.back().data(), scale) *
             scale;
  } else {
    PSAR_CHECK(static_cast<int64_t>(y.size()) == s.act.back().numel(), "chunk output has ",
               y.size(), " floats");
    ops::copy(y.data(), s.act.back().data(), static_cast<int64_t>(y.size()));
  }
}

// The backward in pieces, shared by the split backward (all input gradients,
// then all weight gradients: zero-bubble schedules) and the fused one (each
// layer's weight gradient right after its input gradient, so its gradients
// are final as early as in autograd, and reported only once the backward
// reads its weights no more: pp::GradientSink).

// dpre of the chunk's top layer: from the loss (already there) on the back,
// through the activation elsewhere.
void Mlp::top_gradient(int chunk, Stash& s, std::span<const float> dy) {
  const auto& layers = chunks_[static_cast<size_t>(chunk)];
  const size_t top = layers.size() - 1;
  if (layers[top].classifier) return;
  PSAR_CHECK(static_cast<int64_t>(dy.size()) == s.act[top].numel(), "chunk output gradient has ",
             dy.size(), " floats");
  const int64_t n = layout_.microbatch_rows * layers[top].out;
  if (o_.gelu) ops::gelu_backward(s.dpre[top].data(), dy.data(), s.pre[top].data(), n);
  else ops::relu_backward(s.dpre[top].data(), dy.data(), s.pre[top].data(), n);
}

// From layer j's pre-activation gradient to layer j−1's (or to dx below the
// chunk's first layer; nothing on the front, the data needs no gradient,
// unless the input is learned: input_gradient).
void Mlp::layer_input(int chunk, size_t j, Stash& s, std::span<float> dx) {
  const int64_t b = layout_.microbatch_rows;
  const Layer& L = chunks_[static_cast<size_t>(chunk)][j];
  const auto [begin, end] = range(L);
  params_needed_backward(chunk, begin, end);  // its weights read here, its gradients written next
  const float* W = store_->param(L.weight).data();
  if (j == 0) {
    if (!layout_.front(chunk) || o_.input_gradient)
      ops::linear_backward_input(dx.data(), s.dpre[0].data(), W, b, L.in, L.out);
  } else {
    // Into layer j−1's pre-activation gradient, then through its activation, in place.
    float* d = s.dpre[j - 1].data();
    ops::linear_backward_input(d, s.dpre[j].data(), W, b, L.in, L.out);
    if (o_.gelu) ops::gelu_backward(d, d, s.pre[j - 1].data(), b * L.in);
    else ops::relu_backward(d, d, s.pre[j - 1].data(), b * L.in);
  }
  params_done(chunk, begin, end);
}

std::pair<int64_t, int64_t> Mlp::range(const Layer& L) const {
  const ParamInfo& w = store_->infos()[static_cast<size_t>(L.weight)];
  const ParamInfo& bias = store_->infos()[static_cast<size_t>(L.bias)];
  return {w.offset, bias.offset + bias.numel};
}

std::vector<std::pair<int64_t, int64_t>> Mlp::layer_ranges() const {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const auto& layers : chunks_)
    for (const Layer& L : layers) ranges.push_back(range(L));
  return ranges;
}

// Layer j's weight and bias gradients (side by side in the arena: reported together).
void Mlp::layer_weight(int chunk, size_t j, const Stash& s) {
  const Layer& L = chunks_[static_cast<size_t>(chunk)][j];
  const float* h_in = j == 0 ? s.x.data() : s.act[j - 1].data();
  ops::linear_backward_weight(store_->grad(L.weight).data(), store_->grad(L.bias).data(),
                              s.dpre[j].data(), h_in, layout_.microbatch_rows, L.in, L.out);
  const auto [begin, end] = range(L);
  gradient_ready(chunk, begin, end);
}

void Mlp::backward_input(int chunk, int, pp::Activations& a, std::span<const float> dy,
                         std::span<float> dx) {
  Stash& s = static_cast<Stash&>(a);
  top_gradient(chunk, s, dy);
  for (size_t j = chunks_[static_cast<size_t>(chunk)].size(); j-- > 0;) layer_input(chunk, j, s, dx);
}

void Mlp::backward_weight(int chunk, int, pp::Activations& a) {
  const Stash& s = static_cast<const Stash&>(a);
  for (size_t j = chunks_[static_cast<size_t>(chunk)].size(); j-- > 0;) layer_weight(chunk, j, s);
}

void Mlp::backward(int chunk, int, pp::Activations& a, std::span<const float> dy,
                   std::span<float> dx) {
  Stash& s = static_cast<Stash&>(a);
  top_gradient(chunk, s, dy);
  for (size_t j = chunks_[static_cast<size_t>(chunk)].size(); j-- > 0;) {
    // The input gradient first: it is the backward's last read of layer j's
    // weights, and layer_weight reports them final — the parameter server
    // may then pull the next step's weights into the arena at once.
    // layer_input writes only dpre[j − 1], so dpre[j] is intact for layer_weight.
    layer_input(chunk, j, s, dx);
    layer_weight(chunk, j, s);
  }
}

EvalStats Mlp::eval_forward(int chunk, const Batch& batch, std::span<const float> x,
                            std::span<float> y) {
  const int64_t rows = batch.size;
  const auto& layers = chunks_[static_cast<size_t>(chunk)];
  std::vector<Tensor> pre, act;
  for (size_t j = 0; j < layers.size(); ++j) {
    pre.emplace_back(Shape{rows * layers[j].out}, device_);
    act.emplace_back(Shape{rows * layers[j].out}, device_);
  }
  eval_staged_.load(batch, device_);
  run_layers(chunk, layout_.front(chunk) ? eval_staged_.inputs() : x.data(), rows, pre, act);
  EvalStats s;
  if (!layout_.back(chunk)) {
    ops::copy(y.data(), act.back().data(), static_cast<int64_t>(y.size()));
    return s;
  }
  const float* logits = act.back().data();
  s.count = rows;
  s.loss_sum =
      ops::softmax_cross_entropy(logits, eval_staged_.targets(), rows, o_.classes, nullptr) *
      static_cast<double>(rows);
  s.correct = ops::count_correct(logits, eval_staged_.targets(), rows, o_.classes);
  return s;
}

int mlp_layers(const WorkloadOptions& options, const Dataset&) {
  return static_cast<int>(options.hidden.size()) + 1;
}

std::unique_ptr<Model> make_mlp(const WorkloadOptions& options, const Dataset& data,
                                const ModelContext& context) {
  MlpOptions o;
  o.inputs = data.features();
  o.classes = data.classes();
  o.hidden = options.hidden;
  o.gelu = options.gelu;
  return std::make_unique<Mlp>(o, context);
}

}  // namespace psar
