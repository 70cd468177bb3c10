#include "workloads/cnn.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/device.h"
#include "core/errors.h"
#include "modelpar/tp/conjugate.h"

namespace psar {

using psar::detail::concat;

// One micro-batch from its forward to its weight gradient. Conv side, per
// stage s, on this rank's rows: pre (conv output), act (after ReLU), pooled
// (after the pool; empty without one), their gradients dpre and dout (of the
// stage's output). FC side, on all b rows: feat [b, F] (gathered), per layer
// pre, act and dpre on this rank's columns, dh the input gradient between two
// layers, dfeat [b, F]. All of it on the model's device.
struct Cnn::Stash final : pp::Activations {
  Buffer x;
  std::vector<Buffer> pre, act, pooled, dpre, dact, dout;
  Buffer feat, dfeat, dh;
  std::vector<Buffer> fc_pre, fc_act, fc_dpre;

  int64_t bytes() const override {
    size_t n = x.size() + feat.size() + dfeat.size() + dh.size();
    for (const auto* list : {&pre, &act, &pooled, &dpre, &dact, &dout, &fc_pre, &fc_act, &fc_dpre})
      for (const auto& v : *list) n += v.size();
    return static_cast<int64_t>(n * sizeof(float));
  }
  // The output of conv stage s: pooled, or act without a pool.
  const Buffer& stage_out(size_t s) const {
    return pooled[s].empty() ? act[s] : pooled[s];
  }
};

Cnn::Cnn(CnnOptions options, const ModelContext& context)
    : o_(std::move(options)), layout_(context.layout), tp_(context.tp ? context.tp : &serial_tp_) {
  if (layout_.layers.empty()) layout_ = StageLayout::serial(1, 1);
  if (layout_.stages != 1 || layout_.chunks != 1)
    throw ConfigError(concat("model.type cnn runs on one pipeline stage: set parallel.pp = 1 "
                             "and parallel.chunks = 1 (got ", layout_.stages, " and ",
                             layout_.chunks, ")"));
  const int t = tp_->size();
  if (t > 1 && !o_.hybrid)
    throw ConfigError(concat("model.type cnn splits its fully connected layers over parallel.tp = ",
                             t, " ranks only in the hybrid scheme: set parallel.hybrid: true "
                             "(and parallel.tp = 1) or parallel.tp = 1"));
  if (o_.channels < 1 || o_.height < 1 || o_.width < 1)
    throw ConfigError(concat("model.image: channels, height and width must be positive, got [",
                             o_.channels, ", ", o_.height, ", ", o_.width, "]"));
  if (o_.conv.empty()) throw ConfigError("model.conv: a cnn needs at least one conv stage");
  if (o_.kernel < 1 || o_.stride < 1 || o_.padding < 0)
    throw ConfigError(concat("model.kernel, model.stride must be >= 1 and model.padding >= 0, "
                             "got ", o_.kernel, ", ", o_.stride, ", ", o_.padding));

  // ---- conv stages: each must fit the image it gets -------------------------
  int64_t c = o_.channels, h = o_.height, w = o_.width;
  const int64_t P = std::max<int64_t>(o_.pool, 1);
  for (size_t s = 0; s < o_.conv.size(); ++s) {
    if (o_.conv[s] < 1)
      throw ConfigError(concat("model.conv: stage ", s, " has ", o_.conv[s], " channels"));
    Stage st;
    st.conv = {c, h, w, o_.conv[s], o_.kernel, o_.stride, o_.padding};
    if (h + 2 * o_.padding < o_.kernel || w + 2 * o_.padding < o_.kernel)
      throw ConfigError(concat("model.kernel ", o_.kernel, " (model.padding ", o_.padding,
                               ") does not fit conv stage ", s, "'s ", h, "x", w,
                               " input (model.image [", o_.channels, ", ", o_.height, ", ",
                               o_.width, "], model.conv, model.stride ", o_.stride,
                               ", model.pool ", o_.pool, ")"));
    const int64_t ho = st.conv.H_out(), wo = st.conv.W_out();
    st.pool = P;
    if (ho < P || wo < P)
      throw ConfigError(concat("model.pool ", P, " does not fit conv stage ", s, "'s ", ho, "x", wo,
                               " output (model.image [", o_.channels, ", ", o_.height, ", ",
                               o_.width, "], model.conv, model.kernel, model.stride, "
                               "model.padding)"));
    st.out_h = ho / P;
    st.out_w = wo / P;
    costs_.conv_params += st.conv.weight_numel() + st.conv.C_out;
    costs_.conv_macs += st.conv.macs();
    stages_.push_back(st);
    c = o_.conv[s];
    h = st.out_h;
    w = st.out_w;
  }
  costs_.features = c * h * w;

  // ---- FC layers: column, row, column, ...; an odd last layer replicated ----
  std::vector<int64_t> widths = {costs_.features};
  for (int64_t v : o_.hidden) {
    if (v < 1) throw ConfigError(concat("model.hidden: layer widths must be positive, got ", v));
    widths.push_back(v);
  }
  widths.push_back(o_.classes);
  const size_t K = widths.size() - 1;
  for (size_t k = 0; k < K; ++k) {
    Fc fc;
    fc.in = widths[k];
    fc.out = widths[k + 1];
    fc.relu = k + 1 < K;
    const std::string name = "fc" + std::to_string(k);
    const float std_he = static_cast<float>(std::sqrt(2.0 / static_cast<double>(fc.in)));
    if (o_.fc_replicated) {
      fc.kind = FcKind::kReplicated;
    } else if (k % 2 == 1) {
      fc.kind = FcKind::kRow;
      fc.tp = std::make_unique<RowParallelLinear>(
          *tp_, RowParallelOptions{name, fc.in, fc.out, true, true, std_he});
    } else if (k + 1 < K) {
      fc.kind = FcKind::kColumn;
      if (fc.out % t != 0)
        throw ConfigError(concat("model.hidden: width ", fc.out, " of fully connected layer ", k,
                                 " is split over the ", t, " ranks of parallel.hybrid and must "
                                 "be divisible by ", t));
      fc.tp = std::make_unique<ColumnParallelLinear>(
          *tp_, ColumnParallelOptions{name, fc.in, fc.out, 1, true, false, std_he});
    }
    fc.in_local = fc.tp ? fc.tp->in_features() : fc.in;
    fc.out_local = fc.tp ? fc.tp->out_features() : fc.out;
    costs_.fc_params += fc.in * fc.out + fc.out;
    costs_.fc_macs += fc.in * fc.out;
    fcs_.push_back(std::move(fc));
  }
  params_ = std::make_unique<ShardedParams>(tp_->rank(), t);
}

Cnn::~Cnn() = default;

void Cnn::declare(ParamStore& store, int) {
  for (size_t s = 0; s < stages_.size(); ++s) {
    Stage& st = stages_[s];
    const std::string p = "conv" + std::to_string(s);
    const double fan_in = static_cast<double>(st.conv.col_rows());
    st.weight = params_->add(store, p + ".weight", {st.conv.C_out, st.conv.col_rows()},
                             Init::normal(static_cast<float>(std::sqrt(2.0 / fan_in))),
                             ShardSpec::replicated());
    st.bias = params_->add(store, p + ".bias", {st.conv.C_out}, Init::zeros(),
                           ShardSpec::replicated());
  }
  for (size_t k = 0; k < fcs_.size(); ++k) {
    Fc& fc = fcs_[k];
    if (fc.tp) {
      fc.tp->declare(*params_, store);
      continue;
    }
    const std::string p = "fc" + std::to_string(k);
    fc.weight = params_->add(store, p + ".weight", {fc.in, fc.out},
                             Init::normal(static_cast<float>(std::sqrt(2.0 / fc.in))),
                             ShardSpec::replicated());
    fc.bias = params_->add(store, p + ".bias", {fc.out}, Init::zeros(), ShardSpec::replicated());
  }
}

void Cnn::bind(ParamStore& store) {
  store_ = &store;
  device_ = store.device();
  params_->initialize(store, o_.seed);
  for (Fc& fc : fcs_)
    if (fc.tp) fc.tp->bind(store);
}

void Cnn::set_batch(const Batch& batch) {
  if (layout_.microbatches == 1) layout_.microbatch_rows = batch.size;
  const int64_t rows = layout_.microbatch_rows * layout_.microbatches;
  PSAR_CHECK(batch.size == rows, "the batch has ", batch.size, " rows, expected m·b = ", rows);
  const int64_t chw = o_.channels * o_.height * o_.width;
  PSAR_CHECK(batch.inputs.numel() == rows * chw, "batch has ", batch.inputs.numel(),
             " inputs, expected ", rows * chw);
  if (o_.hybrid && layout_.microbatch_rows % tp_->size() != 0)
    throw ConfigError(concat("parallel.hybrid: a micro-batch of ", layout_.microbatch_rows,
                             " rows (train.batch_size / parallel.microbatches) cannot be split "
                             "over the ", tp_->size(), " ranks' convolutions"));
  batch_ = &batch;
  staged_.load(batch, device_);
  loss_ = 0;
}

namespace {
// An empty buffer stays unallocated (a stage without a pool has no pooled output).
void sized(Buffer& v, int64_t n) {
  if (n > 0 || !v.empty()) v.resize(static_cast<size_t>(n));
}
void sized_list(std::vector<Buffer>& list, size_t count) { list.resize(count); }
}  // namespace

void Cnn::conv_forward(Stash& s, const float* x, int64_t rows) {
  const size_t S = stages_.size();
  int64_t cols = 0;
  for (const Stage& st : stages_) cols = std::max(cols, st.conv.col_rows() * st.conv.col_cols());
  sized(cols_, cols);
  sized_list(s.pre, S), sized_list(s.act, S), sized_list(s.pooled, S);
  const float* in = x;
  for (size_t j = 0; j < S; ++j) {
    const Stage& st = stages_[j];
    const int64_t n = rows * st.conv_numel();
    sized(s.pre[j], n);
    sized(s.act[j], n);
    ops::conv2d_forward(s.pre[j].data(), in, store_->param(st.weight).data(),
                        store_->param(st.bias).data(), rows, st.conv, cols_.data());
    ops::relu_forward(s.act[j].data(), s.pre[j].data(), n);
    if (st.pool > 1) {
      sized(s.pooled[j], rows * st.out_numel());
      ops::maxpool2d_forward(s.pooled[j].data(), s.act[j].data(), rows * st.conv.C_out,
                             st.conv.H_out(), st.conv.W_out(), st.pool);
    } else {
      sized(s.pooled[j], 0);
    }
    in = s.stage_out(j).data();
  }
}

void Cnn::fc_forward(Stash& s, int64_t rows) {
  const size_t K = fcs_.size();
  sized_list(s.fc_pre, K), sized_list(s.fc_act, K);
  const float* h = s.feat.data();
  for (size_t k = 0; k < K; ++k) {
    Fc& fc = fcs_[k];
    sized(s.fc_pre[k], rows * fc.out_local);
    if (fc.tp)
      fc.tp->forward(s.fc_pre[k].data(), h, rows);
    else
      ops::linear_forward(s.fc_pre[k].data(), h, store_->param(fc.weight).data(),
                          store_->param(fc.bias).data(), rows, fc.in, fc.out);
    if (fc.relu) {
      sized(s.fc_act[k], rows * fc.out_local);
      ops::relu_forward(s.fc_act[k].data(), s.fc_pre[k].data(), rows * fc.out_local);
      h = s.fc_act[k].data();
    }
  }
}

std::unique_ptr<pp::Activations> Cnn::make_activations(int) const {
  return std::make_unique<Stash>();
}

void Cnn::forward(int, int i, pp::Activations& a, std::span<const float>, std::span<float>) {
  PSAR_CHECK(batch_ && store_, "Cnn::forward before bind() and set_batch()");
  Stash& s = static_cast<Stash&>(a);
  const int64_t b = layout_.microbatch_rows, bl = conv_rows(b), F = costs_.features;
  const int64_t chw = o_.channels * o_.height * o_.width;
  const int64_t first = i * b + (o_.hybrid ? rank() * bl : 0);
  sized(s.x, bl * chw);
  ops::copy(s.x.data(), staged_.inputs() + first * chw, bl * chw);
  conv_forward(s, s.x.data(), bl);
  // The features of all b rows: this rank's block, then (hybrid) the all-gather.
  sized(s.feat, b * F);
  const auto& mine = s.stage_out(stages_.size() - 1);
  ops::copy(s.feat.data() + (o_.hybrid ? rank() * bl * F : 0), mine.data(), bl * F);
  if (o_.hybrid) all_gather_features(s.feat);
  fc_forward(s, b);
  // Everything the backward fills, sized now (one allocation per micro-batch).
  sized_list(s.fc_dpre, fcs_.size());
  for (size_t k = 0; k < fcs_.size(); ++k) sized(s.fc_dpre[k], b * fcs_[k].out_local);
  int64_t dh = 0;
  for (size_t k = 1; k < fcs_.size(); ++k) dh = std::max(dh, b * fcs_[k].in_local);
  sized(s.dh, dh);
  sized(s.dfeat, b * F);
  const size_t S = stages_.size();
  sized_list(s.dpre, S), sized_list(s.dact, S), sized_list(s.dout, S);
  for (size_t j = 0; j < S; ++j) {
    sized(s.dpre[j], bl * stages_[j].conv_numel());
    sized(s.dact[j], stages_[j].pool > 1 ? bl * stages_[j].conv_numel() : 0);
    sized(s.dout[j], bl * stages_[j].out_numel());
  }
  // The loss of the micro-batch's b rows (every rank holds the whole logits),
  // and the backward's start: (1/m)·∂(mean loss)/∂logits.
  const float scale = 1.0f / static_cast<float>(layout_.microbatches);
  loss_ += ops::softmax_cross_entropy(s.fc_pre.back().data(), staged_.targets() + i * b, b,
                                      o_.classes, s.fc_dpre.back().data(), scale) *
           scale;
}

void Cnn::backward_input(int, int, pp::Activations& a, std::span<const float>, std::span<float>) {
  Stash& s = static_cast<Stash&>(a);
  const int64_t b = layout_.microbatch_rows, bl = conv_rows(b), F = costs_.features;
  // FC layers, top down: the input gradient of layer k into layer k−1's
  // pre-activation gradient; below the first, dfeat (f all-reduces it).
  for (size_t k = fcs_.size(); k-- > 0;) {
    Fc& fc = fcs_[k];
    float* dx = k > 0 ? s.dh.data() : s.dfeat.data();
    if (fc.tp)
      fc.tp->backward_input(dx, s.fc_dpre[k].data(), b);
    else
      ops::linear_backward_input(dx, s.fc_dpre[k].data(), store_->param(fc.weight).data(), b,
                                 fc.in, fc.out);
    if (k > 0)
      ops::relu_backward(s.fc_dpre[k - 1].data(), dx, s.fc_pre[k - 1].data(),
                         b * fcs_[k - 1].out_local);
  }
  // This rank's rows of dfeat into the convolutions; hybrid: ×n, the gradient
  // of the slice's own mean loss (the data-parallel sync averages).
  const size_t S = stages_.size();
  const float* mine = s.dfeat.data() + (o_.hybrid ? rank() * bl * F : 0);
  ops::copy(s.dout[S - 1].data(), mine, bl * F);
  if (o_.hybrid) ops::scale(s.dout[S - 1].data(), static_cast<float>(tp_->size()), bl * F);
  for (size_t j = S; j-- > 0;) {
    const Stage& st = stages_[j];
    const int64_t n = bl * st.conv_numel();
    const float* dact = s.dout[j].data();
    if (st.pool > 1) {
      ops::maxpool2d_backward(s.dact[j].data(), s.dout[j].data(), s.act[j].data(),
                              bl * st.conv.C_out, st.conv.H_out(), st.conv.W_out(), st.pool);
      dact = s.dact[j].data();
    }
    ops::relu_backward(s.dpre[j].data(), dact, s.pre[j].data(), n);
    if (j > 0)
      ops::conv2d_backward_input(s.dout[j - 1].data(), s.dpre[j].data(),
                                 store_->param(st.weight).data(), bl, st.conv, cols_.data());
  }
}

void Cnn::backward_weight(int chunk, int, pp::Activations& a) {
  Stash& s = static_cast<Stash&>(a);
  const int64_t b = layout_.microbatch_rows, bl = conv_rows(b);
  for (size_t k = fcs_.size(); k-- > 0;) {
    Fc& fc = fcs_[k];
    const float* h = k == 0 ? s.feat.data() : s.fc_act[k - 1].data();
    if (fc.tp)
      fc.tp->backward_weight(s.fc_dpre[k].data(), h, b);
    else
      ops::linear_backward_weight(store_->grad(fc.weight).data(), store_->grad(fc.bias).data(),
                                  s.fc_dpre[k].data(), h, b, fc.in, fc.out);
  }
  const auto& infos = store_->infos();
  gradient_ready(chunk, costs_.conv_params, static_cast<int64_t>(store_->size()));
  for (size_t j = stages_.size(); j-- > 0;) {
    const Stage& st = stages_[j];
    const float* in = j == 0 ? s.x.data() : s.stage_out(j - 1).data();
    ops::conv2d_backward_weight(store_->grad(st.weight).data(), store_->grad(st.bias).data(),
                                s.dpre[j].data(), in, bl, st.conv, cols_.data());
    const ParamInfo& w = infos[static_cast<size_t>(st.weight)];
    const ParamInfo& bias = infos[static_cast<size_t>(st.bias)];
    gradient_ready(chunk, w.offset, bias.offset + bias.numel);
  }
}

int64_t Cnn::activation_bytes(int) const {
  const int64_t b = layout_.microbatch_rows, bl = conv_rows(b), F = costs_.features;
  int64_t n = bl * o_.channels * o_.height * o_.width + 2 * b * F;
  for (const Stage& st : stages_) {
    const int64_t conv = bl * st.conv_numel(), out = bl * st.out_numel();
    const bool pool = st.pool > 1;
    n += 3 * conv + (pool ? 2 * conv : 0) + out + (pool ? out : 0);  // pre act dpre [dact pooled] dout
  }
  int64_t dh = 0;
  for (size_t k = 0; k < fcs_.size(); ++k) {
    n += b * fcs_[k].out_local * (fcs_[k].relu ? 3 : 2);
    if (k > 0) dh = std::max(dh, b * fcs_[k].in_local);
  }
  return (n + dh) * static_cast<int64_t>(sizeof(float));
}

EvalStats Cnn::eval_forward(int, const Batch& batch, std::span<const float>, std::span<float>) {
  // Every rank runs the convolutions on all rows (no gradient to keep apart,
  // and the evaluation rows need not divide by n); the FC layers run as in
  // training, tensor-parallel under hybrid.
  Stash s;
  const int64_t rows = batch.size;
  eval_staged_.load(batch, device_);
  conv_forward(s, eval_staged_.inputs(), rows);
  const Buffer& features = s.stage_out(stages_.size() - 1);
  sized(s.feat, static_cast<int64_t>(features.size()));
  ops::copy(s.feat.data(), features.data(), static_cast<int64_t>(features.size()));
  fc_forward(s, rows);
  EvalStats e;
  const float* logits = s.fc_pre.back().data();
  e.count = rows;
  e.loss_sum =
      ops::softmax_cross_entropy(logits, eval_staged_.targets(), rows, o_.classes, nullptr) *
      static_cast<double>(rows);
  e.correct = ops::count_correct(logits, eval_staged_.targets(), rows, o_.classes);
  return e;
}

void Cnn::all_gather_features(Buffer& feat) {
  const size_t n = feat.size();
  if (device_ == Device::kCpu) {
    tp_->all_gather({feat.data(), n});
    return;
  }
  // The TP group's all-gather sends host memory.
  gather_host_.resize(n);
  device_copy(gather_host_.data(), Device::kCpu, feat.data(), device_, static_cast<int64_t>(n));
  tp_->all_gather(gather_host_);
  device_copy(feat.data(), device_, gather_host_.data(), Device::kCpu, static_cast<int64_t>(n));
}

// f in backward before every column-parallel layer (its input [b, in]), g in
// forward after every row-parallel one (its output [b, out]); none at t = 1.
int64_t Cnn::tp_allreduce_floats(int) const {
  if (tp_->size() == 1) return 0;
  const int64_t b = layout_.microbatch_rows;
  int64_t n = 0;
  for (const Fc& fc : fcs_) {
    if (fc.kind == FcKind::kColumn) n += b * fc.in;
    if (fc.kind == FcKind::kRow) n += b * fc.out;
  }
  return n;
}

// One all-gather of the micro-batch's features [b, F] (hybrid).
int64_t Cnn::tp_all_gather_floats(int) const {
  return o_.hybrid && tp_->size() > 1 ? layout_.microbatch_rows * costs_.features : 0;
}

int64_t Cnn::hybrid_data_parallel_floats() const { return o_.hybrid ? costs_.conv_params : 0; }

std::string Cnn::summary() const {
  const CnnCosts& c = costs_;
  const double params = static_cast<double>(c.conv_params + c.fc_params);
  const double macs = static_cast<double>(c.conv_macs + c.fc_macs);
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "cnn: %ld parameters, %.1f%% in conv and %.1f%% in fc; %.3g forward MFLOP per "
                "sample, %.1f%% in conv and %.1f%% in fc; %ld features after the last conv stage",
                static_cast<long>(params), 100.0 * static_cast<double>(c.conv_params) / params,
                100.0 * static_cast<double>(c.fc_params) / params, 2.0 * macs / 1e6,
                100.0 * static_cast<double>(c.conv_macs) / macs,
                100.0 * static_cast<double>(c.fc_macs) / macs, static_cast<long>(c.features));
  return buf;
}

int cnn_layers(const WorkloadOptions&, const Dataset&) { return 1; }

std::unique_ptr<Model> make_cnn(const WorkloadOptions& options, const Dataset& data,
                                const ModelContext& context) {
  CnnOptions o = options.cnn;
  const auto& image = options.image;
  if (image.size() != 3)
    throw ConfigError(concat("model.image: [channels, height, width], got ", image.size(),
                             " numbers"));
  o.channels = image[0], o.height = image[1], o.width = image[2];
  if (o.channels * o.height * o.width != data.features())
    throw ConfigError(concat("model.image [", o.channels, ", ", o.height, ", ", o.width, "] holds ",
                             o.channels * o.height * o.width, " values; the data has ",
                             data.features(), " features per sample"));
  o.classes = data.classes();
  if (o.fc_replicated && !o.hybrid)
    throw ConfigError("parallel.hybrid_fc: replicated is a variant of parallel.hybrid; set "
                      "parallel.hybrid: true");
  return std::make_unique<Cnn>(o, context);
}

}  // namespace psar
