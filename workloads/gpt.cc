#include "workloads/gpt.h"

#include <cmath>
#include <cstdio>

#include "comm/comm.h"
#include "core/csv.h"
#include "core/errors.h"
#include "core/ops.h"
#include "core/timer.h"

namespace psar {

std::string gpt_block_name(int l) {
  std::string n = "h";  // by append: GCC 12 falsely warns (-Wrestrict) on "h" + std::to_string(l)
  return n.append(std::to_string(l));
}

namespace {
// GPT-2 scales the residual projections by 1/√(2L).
float proj_std(const GptOptions& o) {
  return o.init_std / std::sqrt(2.0f * static_cast<float>(o.layers));
}
}  // namespace

ParallelAttentionOptions gpt_attention_options(const GptOptions& o, int l) {
  return {.name = gpt_block_name(l) + ".attn",
          .d_model = o.d_model,
          .heads = o.heads,
          .seq_len = o.seq_len,
          .init_std = o.init_std,
          .proj_init_std = proj_std(o)};
}

ParallelMlpOptions gpt_mlp_options(const GptOptions& o, int l) {
  return {.name = gpt_block_name(l) + ".mlp",
          .d_model = o.d_model,
          .hidden = 4 * o.d_model,
          .split = o.split,
          .init_std = o.init_std,
          .proj_init_std = proj_std(o)};
}

// One pre-LN transformer block: x ← x + Attn(LN1(x)); x ← x + MLP(LN2(x)).
struct Gpt::Block {
  Block(TpGroup& tp, const GptOptions& o, int l)
      : name(gpt_block_name(l)),
        attn(tp, gpt_attention_options(o, l)),
        mlp(tp, gpt_mlp_options(o, l)) {}

  std::string name;
  ParallelSelfAttention attn;
  ParallelMLP mlp;
  int ln1_w = -1, ln1_b = -1, ln2_w = -1, ln2_b = -1;
  // [B·T, d]: LN1(x), attention output, x after the attention residual, LN2 of it, MLP output
  std::vector<float> ln1, attn_out, mid, ln2, mlp_out;
  std::vector<float> mean1, rstd1, mean2, rstd2;  // [B·T]
};

Gpt::Gpt(GptOptions options, const ModelContext& context)
    : o_(options), tp_comm_(context.tp), tp_(context.tp, context.tp_allreduce) {
  if (o_.vocab < 2 || o_.seq_len < 1 || o_.layers < 1 || o_.d_model < 1)
    throw ConfigError("gpt: needs vocab >= 2, model.seq_len, model.layers and model.d_model >= 1");
  if (o_.dropout < 0.0f || o_.dropout >= 1.0f)
    throw ConfigError("model.dropout must be in [0, 1), got " + std::to_string(o_.dropout));
  if (o_.d_model % tp_.size() != 0)
    throw ConfigError("model.d_model = " + std::to_string(o_.d_model) +
                      " cannot be split over parallel.tp = " + std::to_string(tp_.size()) +
                      " ranks (d_model must be divisible by t)");
  params_ = std::make_unique<ShardedParams>(tp_.rank(), tp_.size());
  for (int l = 0; l < o_.layers; ++l) blocks_.push_back(std::make_unique<Block>(tp_, o_, l));
}

Gpt::~Gpt() = default;

void Gpt::declare(ParamStore& store) {
  const int64_t d = o_.d_model;
  auto replicated = [&](const std::string& name, Shape shape, Init init) {
    return params_->add(store, name, shape, init, ShardSpec::replicated());
  };
  wte_ = replicated("wte", {o_.vocab, d}, Init::normal(o_.init_std));
  wpe_ = replicated("wpe", {o_.seq_len, d}, Init::normal(o_.init_std));
  for (auto& b : blocks_) {
    b->ln1_w = replicated(b->name + ".ln1.weight", {d}, Init::ones());
    b->ln1_b = replicated(b->name + ".ln1.bias", {d}, Init::zeros());
    b->attn.declare(*params_, store);
    b->ln2_w = replicated(b->name + ".ln2.weight", {d}, Init::ones());
    b->ln2_b = replicated(b->name + ".ln2.bias", {d}, Init::zeros());
    b->mlp.declare(*params_, store);
  }
  lnf_w_ = replicated("lnf.weight", {d}, Init::ones());
  lnf_b_ = replicated("lnf.bias", {d}, Init::zeros());
}

void Gpt::bind(ParamStore& store) {
  store_ = &store;
  params_->initialize(store, o_.seed);  // shards take the serial model's values
  for (auto& b : blocks_) {
    b->attn.bind(store);
    b->mlp.bind(store);
  }
}

void Gpt::forward(const Batch& batch, const DropoutContext& drop) {
  PSAR_CHECK(store_, "gpt used before bind()");
  const int64_t B = batch.size, T = o_.seq_len, N = B * T, d = o_.d_model, V = o_.vocab;
  PSAR_CHECK(static_cast<int64_t>(batch.tokens.size()) == N, "batch holds ", batch.tokens.size(),
             " tokens, expected ", B, " × ", T);
  drop_ = drop;
  const size_t Nd = static_cast<size_t>(N * d);
  x_.resize(blocks_.size() + 1);
  for (auto& x : x_) x.resize(Nd);

  // x_0 = wte[token] + wpe[position], then dropout
  const float* wte = store_->param(wte_).data();
  const float* wpe = store_->param(wpe_).data();
  for (int64_t n = 0; n < N; ++n) {
    const int32_t tok = batch.tokens[static_cast<size_t>(n)];
    PSAR_CHECK(tok >= 0 && tok < V, "token ", tok, " outside the vocabulary of ", V);
    ops::add(x_[0].data() + n * d, wte + tok * d, wpe + (n % T) * d, d);
  }
  if (drop_.p > 0)
    ops::dropout_forward(x_[0].data(), x_[0].data(), N * d, drop_.p, drop_.seed,
                         drop_.stream("embd_dropout"), 0);

  for (size_t l = 0; l < blocks_.size(); ++l) {
    Block& b = *blocks_[l];
    for (auto* v : {&b.ln1, &b.attn_out, &b.mid, &b.ln2, &b.mlp_out}) v->resize(Nd);
    for (auto* v : {&b.mean1, &b.rstd1, &b.mean2, &b.rstd2}) v->resize(static_cast<size_t>(N));
    ops::layernorm_forward(b.ln1.data(), b.mean1.data(), b.rstd1.data(), x_[l].data(),
                           store_->param(b.ln1_w).data(), store_->param(b.ln1_b).data(), N, d);
    b.attn.forward(b.attn_out.data(), b.ln1.data(), B, drop_);  // f … g inside
    ops::add(b.mid.data(), x_[l].data(), b.attn_out.data(), N * d);
    ops::layernorm_forward(b.ln2.data(), b.mean2.data(), b.rstd2.data(), b.mid.data(),
                           store_->param(b.ln2_w).data(), store_->param(b.ln2_b).data(), N, d);
    b.mlp.forward(b.mlp_out.data(), b.ln2.data(), N, drop_);  // f … g inside
    ops::add(x_[l + 1].data(), b.mid.data(), b.mlp_out.data(), N * d);
  }

  xf_.resize(Nd);
  lnf_mean_.resize(static_cast<size_t>(N));
  lnf_rstd_.resize(static_cast<size_t>(N));
  ops::layernorm_forward(xf_.data(), lnf_mean_.data(), lnf_rstd_.data(), x_.back().data(),
                         store_->param(lnf_w_).data(), store_->param(lnf_b_).data(), N, d);
  // logits = xf·wteᵀ: [N, V] (the head is tied to the token embedding)
  logits_.resize(static_cast<size_t>(N * V));
  ops::gemm(false, true, N, V, d, 1.0f, xf_.data(), d, wte, d, 0.0f, logits_.data(), V);
}

double Gpt::forward_backward(const Batch& batch, float grad_scale) {
  const Stopwatch clock;
  const TpCounters tp_before = tp_.counters;
  const CommCounters comm_before = tp_comm_ ? tp_comm_->counters() : CommCounters{};
  forward(batch, {o_.dropout, o_.seed, step_++});
  const int64_t B = batch.size, T = o_.seq_len, N = B * T, d = o_.d_model, V = o_.vocab;
  const size_t Nd = static_cast<size_t>(N * d);

  // loss: mean over all B·T positions
  dlogits_.resize(static_cast<size_t>(N * V));
  const double loss = ops::softmax_cross_entropy(logits_.data(), batch.targets.data(), N, V,
                                                 dlogits_.data(), grad_scale);
  // LM head: dxf = dlogits·wte, dwte += dlogitsᵀ·xf
  const float* wte = store_->param(wte_).data();
  float* dwte = store_->grad(wte_).data();
  dbuf_.resize(Nd);
  dx_.resize(Nd);
  ops::gemm(false, false, N, d, V, 1.0f, dlogits_.data(), V, wte, d, 0.0f, dbuf_.data(), d);
  ops::gemm(true, false, V, d, N, 1.0f, dlogits_.data(), V, xf_.data(), d, 1.0f, dwte, d);
  // dx_: the gradient of the residual stream, walked back through the blocks
  ops::layernorm_backward_input(dx_.data(), dbuf_.data(), x_.back().data(),
                                store_->param(lnf_w_).data(), lnf_mean_.data(), lnf_rstd_.data(), N,
                                d);
  ops::layernorm_backward_weight(store_->grad(lnf_w_).data(), store_->grad(lnf_b_).data(),
                                 dbuf_.data(), x_.back().data(), lnf_mean_.data(), lnf_rstd_.data(),
                                 N, d);

  for (size_t l = blocks_.size(); l-- > 0;) {
    Block& b = *blocks_[l];
    // x_{l+1} = mid + MLP(LN2(mid)): dmid = dx + LN2ᵀ(MLPᵀ(dx))
    b.mlp.backward_input(dbuf_.data(), dx_.data(), N);  // f all-reduces dbuf_
    b.mlp.backward_weight(b.ln2.data(), N);
    ops::layernorm_backward_input(dx_.data(), dbuf_.data(), b.mid.data(),
                                  store_->param(b.ln2_w).data(), b.mean2.data(), b.rstd2.data(), N,
                                  d, /*accumulate=*/true);
    ops::layernorm_backward_weight(store_->grad(b.ln2_w).data(), store_->grad(b.ln2_b).data(),
                                   dbuf_.data(), b.mid.data(), b.mean2.data(), b.rstd2.data(), N,
                                   d);
    // mid = x_l + Attn(LN1(x_l)): dx_l = dmid + LN1ᵀ(Attnᵀ(dmid))
    b.attn.backward_input(dbuf_.data(), dx_.data(), B);  // f all-reduces dbuf_
    b.attn.backward_weight(b.ln1.data(), B);
    ops::layernorm_backward_input(dx_.data(), dbuf_.data(), x_[l].data(),
                                  store_->param(b.ln1_w).data(), b.mean1.data(), b.rstd1.data(), N,
                                  d, /*accumulate=*/true);
    ops::layernorm_backward_weight(store_->grad(b.ln1_w).data(), store_->grad(b.ln1_b).data(),
                                   dbuf_.data(), x_[l].data(), b.mean1.data(), b.rstd1.data(), N,
                                   d);
  }

  // embeddings: dwte[token] += dx_0, dwpe[position] += dx_0
  if (drop_.p > 0)
    ops::dropout_backward(dx_.data(), dx_.data(), N * d, drop_.p, drop_.seed,
                          drop_.stream("embd_dropout"), 0);
  float* dwpe = store_->grad(wpe_).data();
  for (int64_t n = 0; n < N; ++n) {
    ops::add_inplace(dwte + batch.tokens[static_cast<size_t>(n)] * d, dx_.data() + n * d, d);
    ops::add_inplace(dwpe + (n % T) * d, dx_.data() + n * d, d);
  }

  TpStepRow row;
  row.step = static_cast<int64_t>(step_);
  row.compute_s = clock.seconds();
  row.tp = tp_.counters - tp_before;
  if (tp_comm_) {
    row.bytes_sent = tp_comm_->counters().bytes_sent - comm_before.bytes_sent;
    row.messages = tp_comm_->counters().messages_sent - comm_before.messages_sent;
  }
  rows_.push_back(row);
  return loss;
}

EvalStats Gpt::evaluate(const Batch& batch) {
  forward(batch, {});  // no dropout
  const int64_t N = batch.size * o_.seq_len;
  EvalStats s;
  s.count = N;
  s.loss_sum =
      ops::softmax_cross_entropy(logits_.data(), batch.targets.data(), N, o_.vocab, nullptr) *
      static_cast<double>(N);
  s.correct = ops::count_correct(logits_.data(), batch.targets.data(), N, o_.vocab);
  return s;
}

void Gpt::write_run_files(const std::string& out_dir, Comm& workers) {
  std::string mine;
  for (const auto& r : rows_) {
    char buf[320];
    std::snprintf(buf, sizeof buf, "%d,%d,%d,%ld,%.9g,%.9g,%ld,%ld,%ld,%ld,%ld,%ld,%ld,%ld\n",
                  workers.rank(), tp_.size(), tp_.rank(), static_cast<long>(r.step), r.compute_s,
                  r.tp.seconds, static_cast<long>(r.tp.g_forward),
                  static_cast<long>(r.tp.f_backward), static_cast<long>(r.tp.allreduces),
                  static_cast<long>(r.tp.allreduce_floats), static_cast<long>(r.tp.all_gathers),
                  static_cast<long>(r.tp.all_gather_floats), static_cast<long>(r.bytes_sent),
                  static_cast<long>(r.messages));
    mine += buf;
  }
  const auto all = workers.allgather_bytes(std::as_bytes(std::span<const char>(mine)));
  if (workers.rank() != 0 || out_dir.empty()) return;
  std::string csv =
      "rank,tp,tp_rank,step,compute_s,tp_comm_s,g_forward,f_backward,allreduces,"
      "allreduce_floats,all_gathers,all_gather_floats,tp_bytes_sent,tp_messages\n";
  for (const auto& part : all) csv.append(reinterpret_cast<const char*>(part.data()), part.size());
  write_file_atomic(out_dir + "/tp.csv", csv);
}

GptOptions gpt_options(const Config& config, const Dataset& data) {
  if (data.features() != 0)
    throw ConfigError(
        "model.type gpt needs a token dataset (data.dataset text or "
        "synthetic_tokens), not " +
        config.get_string("data.dataset"));
  GptOptions o;
  const int64_t vocab = config.get_int("model.vocab");
  if (vocab > 0 && vocab < data.classes())
    throw ConfigError("model.vocab = " + std::to_string(vocab) + " is smaller than the " +
                      std::to_string(data.classes()) + " distinct tokens of the data");
  o.vocab = vocab > 0 ? vocab : data.classes();
  o.seq_len = config.get_int("model.seq_len");
  o.layers = config.get_int("model.layers");
  o.d_model = config.get_int("model.d_model");
  o.heads = config.get_int("model.heads");
  o.dropout = static_cast<float>(config.get_float("model.dropout"));
  o.init_std = static_cast<float>(config.get_float("model.init_std"));
  o.split = parse_mlp_split(config.get_string("parallel.tp_split"));
  o.seed = static_cast<uint64_t>(config.get_int("train.seed"));
  return o;
}

std::unique_ptr<Model> make_gpt(const Config& config, const Dataset& data,
                                const ModelContext& context) {
  const GptOptions o = gpt_options(config, data);
  return std::make_unique<Gpt>(o, context);
}

}  // namespace psar
