#include "workloads/gpt.h"

#include <cmath>

#include "core/errors.h"
#include "core/ops.h"
#include "modelpar/tp/conjugate.h"

namespace psar {

using psar::detail::concat;

std::string gpt_block_name(int l) {
  std::string n = "h";  // by append: GCC 12 falsely warns (-Wrestrict) on "h" + std::to_string(l)
  return n.append(std::to_string(l));
}

namespace {
// GPT-2 scales the residual projections by 1/√(2L).
float proj_std(const GptOptions& o) {
  return o.init_std / std::sqrt(2.0f * static_cast<float>(o.layers));
}

int64_t floats_of(std::initializer_list<const Buffer*> buffers) {
  size_t n = 0;
  for (const auto* b : buffers) n += b->size();
  return static_cast<int64_t>(n);
}
}  // namespace

ParallelAttentionOptions gpt_attention_options(const GptOptions& o, int l) {
  return {.name = gpt_block_name(l) + ".attn",
          .d_model = o.d_model,
          .heads = o.heads,
          .seq_len = o.seq_len,
          .init_std = o.init_std,
          .proj_init_std = proj_std(o),
          .sequence_parallel = o.sequence_parallel,
          .recompute_core = o.recompute == Recompute::kSelective};
}

ParallelMlpOptions gpt_mlp_options(const GptOptions& o, int l) {
  return {.name = gpt_block_name(l) + ".mlp",
          .d_model = o.d_model,
          .hidden = 4 * o.d_model,
          .split = o.split,
          .init_std = o.init_std,
          .proj_init_std = proj_std(o),
          .sequence_parallel = o.sequence_parallel};
}

// One pre-LN transformer block: x ← x + Attn(LN1(x)); x ← x + MLP(LN2(x)).
struct Gpt::Block {
  Block(TpGroup& tp, const GptOptions& o, int l)
      : name(gpt_block_name(l)), attn(tp, gpt_attention_options(o, l)), mlp(tp, gpt_mlp_options(o, l)) {}

  std::string name;
  ParallelSelfAttention attn;
  ParallelMLP mlp;
  int ln1_w = -1, ln1_b = -1, ln2_w = -1, ln2_b = -1;
  std::pair<int, int> params{0, 0};  // its store indices [begin, end)
};

// One block of one micro-batch, N = b·T rows: [N, d] each, [N] for the
// layer norms' statistics (N/t rows with sequence parallelism; all empty
// between forward and backward with full recomputation). Every buffer is on the device the model runs on.
struct Gpt::BlockStash {
  ParallelSelfAttention::Activations attn;
  ParallelMLP::Activations mlp;
  // LN1(x), attention output, x after the attention residual, LN2 of it, MLP
  // output; the gradients at LN2's and LN1's outputs (for the weight half)
  Buffer ln1, attn_out, mid, ln2, mlp_out, dln2, dln1;
  Buffer mean1, rstd1, mean2, rstd2;

  int64_t bytes() const {
    return attn.bytes() + mlp.bytes() +
           floats_of({&ln1, &attn_out, &mid, &ln2, &mlp_out, &dln2, &dln1, &mean1, &rstd1, &mean2,
                      &rstd2}) *
               static_cast<int64_t>(sizeof(float));
  }
};

// One chunk of one micro-batch.
struct Gpt::Stash final : pp::Activations {
  std::vector<BlockStash> blocks;
  // xs[j]: the residual stream entering block j; xs[n] leaves the chunk
  std::vector<Buffer> xs;
  // The residual stream's gradient walked down the chunk; on the front chunk
  // it ends as the gradient of x_0 (after dropout's backward).
  Buffer dres;
  // Sequence parallelism: the back's output gathered whole [N, d]; the
  // front's input gradient gathered whole [N, d] (the embeddings' gradient).
  Buffer out, dx0;
  // Back: LN_f output and statistics, logits [N, V], (1/m)·∂loss/∂logits, ∂/∂xf
  Buffer xf, lnf_mean, lnf_rstd, logits, dlogits, dxf;
  DropoutContext drop;

  int64_t bytes() const override {
    int64_t b = floats_of({&dres, &out, &dx0, &xf, &lnf_mean, &lnf_rstd, &logits, &dlogits, &dxf}) *
                static_cast<int64_t>(sizeof(float));
    for (const auto& x : xs) b += static_cast<int64_t>(x.size() * sizeof(float));
    for (const auto& blk : blocks) b += blk.bytes();
    return b;
  }
};

Gpt::Gpt(GptOptions options, const ModelContext& context)
    : o_(std::move(options)), layout_(context.layout), tp_(context.tp ? context.tp : &serial_tp_) {
  if (o_.vocab < 2 || o_.seq_len < 1 || o_.layers < 1 || o_.d_model < 1)
    throw ConfigError("gpt: needs vocab >= 2, model.seq_len, model.layers and model.d_model >= 1");
  if (o_.dropout < 0.0f || o_.dropout >= 1.0f)
    throw ConfigError("model.dropout must be in [0, 1), got " + std::to_string(o_.dropout));
  if (o_.d_model % tp_->size() != 0)
    throw ConfigError(concat("model.d_model = ", o_.d_model, " cannot be split over parallel.tp = ",
                             tp_->size(), " ranks (d_model must be divisible by t)"));
  if (o_.sequence_parallel && tp_->size() == 1)
    throw ConfigError("parallel.sequence_parallel needs parallel.tp > 1 (got parallel.tp = 1)");
  if (o_.sequence_parallel && o_.seq_len % tp_->size() != 0)
    throw ConfigError(concat("parallel.sequence_parallel splits model.seq_len = ", o_.seq_len,
                             " over parallel.tp = ", tp_->size(),
                             " ranks (seq_len must be divisible by t)"));
  if (layout_.layers.empty()) layout_ = StageLayout::serial(static_cast<int>(o_.layers), 1);
  PSAR_CHECK(static_cast<int>(layout_.layers.size()) == layout_.vstages(), "stage layout has ",
             layout_.layers.size(), " layer counts for ", layout_.vstages(), " virtual stages");
  params_ = std::make_unique<ShardedParams>(tp_->rank(), tp_->size());
  block_index_.assign(static_cast<size_t>(o_.layers), -1);
  for (int c = 0; c < layout_.chunks; ++c) {
    const int u = layout_.vstage(c);
    const auto [first, last] = layout_.layer_range(u);
    PSAR_CHECK(first < last && last <= o_.layers, "virtual stage ", u, " has blocks [", first,
               ", ", last, ") of ", o_.layers);
    chunks_.push_back({first, last, layout_.front(c), layout_.back(c)});
    for (int l = first; l < last; ++l) {
      block_index_[static_cast<size_t>(l)] = static_cast<int>(blocks_.size());
      blocks_.push_back(std::make_unique<Block>(*tp_, o_, l));
    }
  }
}

Gpt::~Gpt() = default;

// The serial GPT's names, shapes and initializers, chunk by chunk.
void Gpt::declare(ParamStore& store, int chunk) {
  Chunk& ch = chunks_.at(static_cast<size_t>(chunk));
  const int64_t d = o_.d_model;
  auto replicated = [&](const std::string& name, Shape shape, Init init) {
    return params_->add(store, name, shape, init, ShardSpec::replicated());
  };
  auto count = [&] { return static_cast<int>(store.infos().size()); };
  if (ch.front) {
    ch.front_params.first = count();
    wte_ = replicated("wte", {o_.vocab, d}, Init::normal(o_.init_std));
    wpe_ = replicated("wpe", {o_.seq_len, d}, Init::normal(o_.init_std));
    ch.front_params.second = count();
  }
  for (int l = ch.first; l < ch.last; ++l) {
    Block& b = *blocks_[static_cast<size_t>(block_index_[static_cast<size_t>(l)])];
    b.params.first = count();
    b.ln1_w = replicated(b.name + ".ln1.weight", {d}, Init::ones());
    b.ln1_b = replicated(b.name + ".ln1.bias", {d}, Init::zeros());
    b.attn.declare(*params_, store);
    b.ln2_w = replicated(b.name + ".ln2.weight", {d}, Init::ones());
    b.ln2_b = replicated(b.name + ".ln2.bias", {d}, Init::zeros());
    b.mlp.declare(*params_, store);
    b.params.second = count();
  }
  if (ch.back) {
    ch.back_params.first = count();
    lnf_w_ = replicated("lnf.weight", {d}, Init::ones());
    lnf_b_ = replicated("lnf.bias", {d}, Init::zeros());
    // The tied head: this rank's own copy of wte unless it holds the embedding too.
    if (layout_.stage != 0) head_wte_ = replicated("wte", {o_.vocab, d}, Init::normal(o_.init_std));
    ch.back_params.second = count();
  }
}

void Gpt::params_ready(int chunk, std::pair<int, int> range) {
  if (range.first == range.second) return;
  const auto& infos = store_->infos();
  const ParamInfo& last = infos[static_cast<size_t>(range.second - 1)];
  gradient_ready(chunk, infos[static_cast<size_t>(range.first)].offset, last.offset + last.numel);
}

std::pair<int64_t, int64_t> Gpt::arena_range(std::pair<int, int> range) const {
  if (range.first == range.second) return {0, 0};
  const auto& infos = store_->infos();
  const ParamInfo& last = infos[static_cast<size_t>(range.second - 1)];
  return {infos[static_cast<size_t>(range.first)].offset, last.offset + last.numel};
}

void Gpt::params_read(int chunk, std::pair<int, int> range, Read read) {
  const auto [begin, end] = arena_range(range);
  switch (read) {
    case Read::kForward: params_needed(chunk, begin, end); break;
    case Read::kBackward: params_needed_backward(chunk, begin, end); break;
    case Read::kDone: params_done(chunk, begin, end); break;
  }
}

// The head reads the token embedding: its own copy, or the front's when this
// rank holds the embedding too (then a second range of the front chunk's).
std::pair<int, int> Gpt::head_embedding() const {
  if (head_wte_ >= 0) return {0, 0};
  for (const Chunk& ch : chunks_)
    if (ch.front) return ch.front_params;
  return {0, 0};
}

std::vector<std::pair<int64_t, int64_t>> Gpt::layer_ranges() const {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const Chunk& ch : chunks_) {
    if (ch.front) ranges.push_back(arena_range(ch.front_params));
    for (int l = ch.first; l < ch.last; ++l)
      ranges.push_back(
          arena_range(blocks_[static_cast<size_t>(block_index_[static_cast<size_t>(l)])]->params));
    if (ch.back) ranges.push_back(arena_range(ch.back_params));
  }
  return ranges;
}

void Gpt::bind(ParamStore& store) {
  store_ = &store;
  params_->initialize(store, o_.seed);  // shards take the serial model's values
  for (auto& b : blocks_) {
    b->attn.bind(store);
    b->mlp.bind(store);
  }
}

std::vector<TiedParam> Gpt::tied_params() const {
  if (layout_.stages == 1) return {};  // embedding and head on one rank: one wte
  if (layout_.stage == 0) return {{wte_, layout_.stages - 1, false}};
  if (layout_.stage == layout_.stages - 1) return {{head_wte_, 0, true}};
  return {};
}

void Gpt::set_batch(const Batch& batch) {
  if (layout_.vstages() == 1 && layout_.microbatches == 1) layout_.microbatch_rows = batch.size;
  const int64_t rows = layout_.microbatch_rows * layout_.microbatches;
  PSAR_CHECK(batch.size == rows, "the batch has ", batch.size, " rows, expected m·b = ", rows);
  PSAR_CHECK(static_cast<int64_t>(batch.tokens.size()) == rows * o_.seq_len &&
                 batch.targets.size() == batch.tokens.size(),
             "batch holds ", batch.tokens.size(), " tokens, expected ", rows, " × ", o_.seq_len);
  batch_ = &batch;
  staged_.load(batch, store_ ? store_->device() : Device::kCpu);
  loss_ = 0;
  ++batches_;
}

int64_t Gpt::boundary_numel(int vstage) const { return eval_numel(vstage, layout_.microbatch_rows); }

int64_t Gpt::eval_numel(int, int64_t rows) const { return rows * o_.seq_len * o_.d_model; }

std::unique_ptr<pp::Activations> Gpt::make_activations(int) const {
  return std::make_unique<Stash>();
}

// Floats one micro-batch of `rows` sequences keeps on `chunk`, N = rows·T,
// n = N/t rows of the residual stream with sequence parallelism (else N):
//   per block   this file's seven [N, d] tensors (ln1, attn_out, mid, ln2,
//               mlp_out, dln2, dln1) and four [N] statistics, plus the
//               attention's and the MLP's Activations (their
//               activation_floats: Q|K|V and its gradient, the
//               probabilities — twice with dropout —, the context and its
//               gradient, the output gradient; the hidden pre-activation,
//               activation and their gradients, the output gradient)
//               (none with full recomputation: the block is rerun from its
//               input before its backward)
//   per chunk   the residual stream entering each block and leaving the
//               last (L + 1 tensors [n, d], L blocks) and its gradient ([n, d])
//   back        LN_f's output and its gradient ([N, d] each), its statistics
//               ([N] each), the logits and their gradient ([N, V] each); with
//               sequence parallelism the gathered output ([N, d])
//   front       with sequence parallelism the gathered input gradient ([N, d])
int64_t Gpt::activation_floats(int chunk, int64_t rows, bool dropout) const {
  const Chunk& ch = chunks_[static_cast<size_t>(chunk)];
  const int64_t N = rows * o_.seq_len, n = local_rows(N), d = o_.d_model, L = ch.last - ch.first;
  int64_t floats = (L + 2) * n * d;
  if (o_.recompute != Recompute::kFull)
    for (int l = ch.first; l < ch.last; ++l) {
      const Block& b = *blocks_[static_cast<size_t>(block_index_[static_cast<size_t>(l)])];
      floats += 7 * n * d + 4 * n + b.attn.activation_floats(rows, dropout) +
                b.mlp.activation_floats(N);
    }
  if (ch.back) floats += 2 * N * d + 2 * N + 2 * N * o_.vocab + (sp() ? N * d : 0);
  if (ch.front && sp()) floats += N * d;
  return floats;
}

int64_t Gpt::activation_bytes(int chunk) const {
  return activation_floats(chunk, layout_.microbatch_rows, o_.dropout > 0) *
         static_cast<int64_t>(sizeof(float));
}

// g in forward and f in backward, around attention and around the MLP:
// 4 all-reduces of [b·T, d] per block (column_row); row_column all-reduces
// [b·T, 4d] before GeLU in both directions instead of the MLP's [b·T, d].
// Full recomputation reruns the forward's g (half of them again).
// Sequence parallelism all-reduces only the layer norms' 4·d weight
// gradients per block.
int64_t Gpt::tp_allreduce_floats(int chunk) const {
  if (tp_->size() == 1) return 0;
  const Chunk& ch = chunks_[static_cast<size_t>(chunk)];
  const int64_t N = layout_.microbatch_rows * o_.seq_len, d = o_.d_model;
  if (sp()) return (ch.last - ch.first) * 4 * d;
  const int64_t mlp = o_.split == MlpSplit::kColumnRow ? 2 * N * d : 2 * N * 4 * d;
  const int64_t forward = (N * d + mlp / 2) * (o_.recompute == Recompute::kFull ? 2 : 1);
  return (ch.last - ch.first) * (N * d + mlp / 2 + forward);
}

// Sequence parallelism, per block (each [N, d] gathered): forward 2 (before
// the QKV and the first MLP GEMM; twice with full recomputation), backward 6
// (dy of both row-parallel GEMMs for the input and again for the weight
// half, x of both column-parallel GEMMs for the weight half); per chunk the
// output and the input gradient. The row_column split's gathers otherwise.
int64_t Gpt::tp_all_gather_floats(int chunk) const {
  if (tp_->size() == 1) return 0;
  const Chunk& ch = chunks_[static_cast<size_t>(chunk)];
  const int64_t N = layout_.microbatch_rows * o_.seq_len, d = o_.d_model;
  if (!sp()) return o_.split == MlpSplit::kRowColumn ? (ch.last - ch.first) * 2 * N * d : 0;
  const int64_t forward = 2 * (o_.recompute == Recompute::kFull ? 2 : 1);
  return (ch.last - ch.first) * (forward + 6) * N * d + 2 * N * d;
}

// Sequence parallelism, per block: the two row-parallel outputs forward
// (twice with full recomputation), the two column-parallel input gradients.
int64_t Gpt::tp_reduce_scatter_floats(int chunk) const {
  if (tp_->size() == 1 || !sp()) return 0;
  const Chunk& ch = chunks_[static_cast<size_t>(chunk)];
  const int64_t N = layout_.microbatch_rows * o_.seq_len, d = o_.d_model;
  const int64_t forward = 2 * (o_.recompute == Recompute::kFull ? 2 : 1);
  return (ch.last - ch.first) * (forward + 2) * N * d;
}

GptComputeCounts Gpt::compute_counts() const {
  GptComputeCounts c{block_forwards_, 0, head_flops_};
  for (const auto& b : blocks_) {
    c.core_passes += b->attn.core_passes();
    c.forward_flops += b->attn.forward_flops() + b->mlp.forward_flops();
  }
  return c;
}

const float* Gpt::output(const Stash& s) const {
  return sp() ? s.out.data() : s.xs.back().data();
}

void Gpt::block_forward(Block& b, BlockStash& a, const float* x, float* out, int64_t rows,
                        const DropoutContext& drop) {
  const int64_t N = rows * o_.seq_len, n = local_rows(N), d = o_.d_model;
  for (auto* v : {&a.ln1, &a.attn_out, &a.mid, &a.ln2, &a.mlp_out, &a.dln2, &a.dln1})
    v->resize(static_cast<size_t>(n * d));
  for (auto* v : {&a.mean1, &a.rstd1, &a.mean2, &a.rstd2}) v->resize(static_cast<size_t>(n));
  ops::layernorm_forward(a.ln1.data(), a.mean1.data(), a.rstd1.data(), x,
                         store_->param(b.ln1_w).data(), store_->param(b.ln1_b).data(), n, d);
  b.attn.forward(a.attn, a.attn_out.data(), a.ln1.data(), rows, drop);  // f … g inside
  ops::add(a.mid.data(), x, a.attn_out.data(), n * d);
  ops::layernorm_forward(a.ln2.data(), a.mean2.data(), a.rstd2.data(), a.mid.data(),
                         store_->param(b.ln2_w).data(), store_->param(b.ln2_b).data(), n, d);
  b.mlp.forward(a.mlp, a.mlp_out.data(), a.ln2.data(), N, drop);  // f … g inside
  ops::add(out, a.mid.data(), a.mlp_out.data(), n * d);
  ++block_forwards_;
}

void Gpt::release(BlockStash& a) {
  for (auto* v : {&a.ln1, &a.attn_out, &a.mid, &a.ln2, &a.mlp_out, &a.dln2, &a.dln1, &a.mean1,
                  &a.rstd1, &a.mean2, &a.rstd2, &a.attn.qkv, &a.attn.att, &a.attn.att_drop,
                  &a.attn.ctx, &a.attn.dy_pre, &a.attn.dctx, &a.attn.dqkv, &a.mlp.h_pre,
                  &a.mlp.h_act, &a.mlp.dz_pre, &a.mlp.dh_act, &a.mlp.dh_pre})
    v->resize(0);
}

void Gpt::recompute_block(int chunk, size_t j, Stash& s, int64_t b) {
  if (o_.recompute != Recompute::kFull) return;
  const Chunk& ch = chunks_[static_cast<size_t>(chunk)];
  Block& blk = *blocks_[static_cast<size_t>(block_index_[static_cast<size_t>(ch.first) + j])];
  // The block's output again into scratch: bitwise xs[j + 1], which is kept.
  dwhole_.resize(s.xs[j].size());
  block_forward(blk, s.blocks[j], s.xs[j].data(), dwhole_.data(), b, s.drop);
}

void Gpt::run_forward(int chunk, Stash& s, const int32_t* tokens, const float* x, int64_t rows,
                      const DropoutContext& drop) {
  PSAR_CHECK(store_, "gpt used before bind()");
  const Chunk& ch = chunks_[static_cast<size_t>(chunk)];
  const int64_t T = o_.seq_len, N = rows * T, d = o_.d_model, V = o_.vocab;
  const int64_t nr = local_rows(N), r0 = first_row(N);  // this rank's rows [r0, r0 + nr)
  const size_t n = static_cast<size_t>(ch.last - ch.first);
  s.drop = drop;
  s.xs.resize(n + 1);
  for (auto& v : s.xs) v.resize(static_cast<size_t>(nr * d));
  s.dres.resize(static_cast<size_t>(nr * d));
  s.out.resize(sp() && ch.back ? static_cast<size_t>(N * d) : 0);
  s.dx0.resize(sp() && ch.front ? static_cast<size_t>(N * d) : 0);
  s.blocks.resize(n);

  if (ch.front) {  // x_0 = wte[token] + wpe[position], then dropout
    params_read(chunk, ch.front_params);
    const float* wte = store_->param(wte_).data();
    const float* wpe = store_->param(wpe_).data();
    for (int64_t k = r0; k < r0 + nr; ++k) {
      const int32_t tok = tokens[k];
      PSAR_CHECK(tok >= 0 && tok < V, "token ", tok, " outside the vocabulary of ", V);
      ops::add(s.xs[0].data() + (k - r0) * d, wte + tok * d, wpe + (k % T) * d, d);
    }
    params_read(chunk, ch.front_params, Read::kDone);
    if (drop.p > 0)
      ops::dropout_forward(s.xs[0].data(), s.xs[0].data(), nr * d, drop.p, drop.seed,
                           drop.stream("embd_dropout"), static_cast<uint64_t>(r0 * d));
  } else {
    ops::copy(s.xs[0].data(), x + r0 * d, nr * d);
  }

  for (size_t j = 0; j < n; ++j) {
    Block& b = *blocks_[static_cast<size_t>(block_index_[static_cast<size_t>(ch.first) + j])];
    params_read(chunk, b.params);
    block_forward(b, s.blocks[j], s.xs[j].data(), s.xs[j + 1].data(), rows, drop);
    params_read(chunk, b.params, Read::kDone);
  }
  if (sp() && ch.back) gather_rows(*tp_, s.out.data(), s.xs[n].data(), N, d);

  if (ch.back) {  // logits = LN_f(x)·wteᵀ, the head tied to the token embedding
    params_read(chunk, ch.back_params);
    params_read(chunk, head_embedding());
    for (auto* v : {&s.xf, &s.dxf}) v->resize(static_cast<size_t>(N * d));
    for (auto* v : {&s.lnf_mean, &s.lnf_rstd}) v->resize(static_cast<size_t>(N));
    for (auto* v : {&s.logits, &s.dlogits}) v->resize(static_cast<size_t>(N * V));
    ops::layernorm_forward(s.xf.data(), s.lnf_mean.data(), s.lnf_rstd.data(), output(s),
                           store_->param(lnf_w_).data(), store_->param(lnf_b_).data(), N, d);
    ops::gemm(false, true, N, V, d, 1.0f, s.xf.data(), d, store_->param(head_param()).data(), d,
              0.0f, s.logits.data(), V);
    head_flops_ += 2 * N * V * d;
    params_read(chunk, ch.back_params, Read::kDone);
    params_read(chunk, head_embedding(), Read::kDone);
  }
}

void Gpt::forward(int chunk, int i, pp::Activations& a, std::span<const float> x,
                  std::span<float> y) {
  PSAR_CHECK(batch_, "Gpt::forward before set_batch()");
  const Chunk& ch = chunks_[static_cast<size_t>(chunk)];
  const int64_t b = layout_.microbatch_rows, T = o_.seq_len, N = b * T, V = o_.vocab;
  PSAR_CHECK(ch.front || static_cast<int64_t>(x.size()) == N * o_.d_model, "chunk input has ",
             x.size(), " floats");
  Stash& s = static_cast<Stash&>(a);
  // A fresh dropout mask per (step, micro-batch).
  const DropoutContext drop{o_.dropout, o_.seed,
                            (batches_ - 1) * static_cast<uint64_t>(layout_.microbatches) +
                                static_cast<uint64_t>(i)};
  run_forward(chunk, s, batch_->tokens.data() + i * N, x.data(), b, drop);
  if (ch.back) {
    // The backward starts here: dlogits = (1/m)·∂(mean loss of micro-batch i)/∂logits.
    const float scale = 1.0f / static_cast<float>(layout_.microbatches);
    loss_ += ops::softmax_cross_entropy(s.logits.data(), staged_.targets() + i * N, N, V,
                                        s.dlogits.data(), scale) *
             scale;
  } else {
    PSAR_CHECK(static_cast<int64_t>(y.size()) == N * o_.d_model, "chunk output has ", y.size(),
               " floats");
    if (sp()) gather_rows(*tp_, y.data(), s.xs.back().data(), N, o_.d_model);
    else ops::copy(y.data(), s.xs.back().data(), static_cast<int64_t>(y.size()));
  }
  // Full recomputation keeps only the blocks' inputs (xs) until the backward.
  if (o_.recompute == Recompute::kFull)
    for (auto& bs : s.blocks) release(bs);
}

// The backward in pieces, so that the split backward (backward_input, then
// backward_weight: zero-bubble schedules) and the fused one (backward: each
// block's weight gradient right after its input gradient, so its gradients
// are final as early as in autograd, for the overlapped sync) run the same
// code. N = b·T rows.

// The input-gradient half of the back: dxf = dlogits·wte, then through LN_f.
void Gpt::head_input(Stash& s, int64_t N) {
  const int64_t d = o_.d_model, V = o_.vocab;
  ops::gemm(false, false, N, d, V, 1.0f, s.dlogits.data(), V, store_->param(head_param()).data(),
            d, 0.0f, s.dxf.data(), d);
  // LN_f runs whole on every rank; sequence parallelism takes this rank's rows of its gradient.
  float* dout = s.dres.data();
  if (sp()) {
    dwhole_.resize(static_cast<size_t>(N * d));
    dout = dwhole_.data();
  }
  ops::layernorm_backward_input(dout, s.dxf.data(), output(s), store_->param(lnf_w_).data(),
                                s.lnf_mean.data(), s.lnf_rstd.data(), N, d);
  if (sp()) ops::copy(s.dres.data(), dout + first_row(N) * d, local_rows(N) * d);
}

// dwte += dlogitsᵀ·xf (the head's copy), and LN_f's weights.
void Gpt::head_weight(int chunk, const Stash& s, int64_t N) {
  const Chunk& ch = chunks_[static_cast<size_t>(chunk)];
  const int64_t d = o_.d_model, V = o_.vocab;
  ops::gemm(true, false, V, d, N, 1.0f, s.dlogits.data(), V, s.xf.data(), d, 1.0f,
            store_->grad(head_param()).data(), d);
  ops::layernorm_backward_weight(store_->grad(lnf_w_).data(), store_->grad(lnf_b_).data(),
                                 s.dxf.data(), output(s), s.lnf_mean.data(),
                                 s.lnf_rstd.data(), N, d);
  params_ready(chunk, ch.back_params);
}

// Block j of the chunk, input-gradient half: s.dres from x_{j+1}'s gradient to x_j's.
void Gpt::block_input(int chunk, size_t j, Stash& s, int64_t b) {
  const Chunk& ch = chunks_[static_cast<size_t>(chunk)];
  const int64_t N = b * o_.seq_len, n = local_rows(N), d = o_.d_model;
  Block& blk = *blocks_[static_cast<size_t>(block_index_[static_cast<size_t>(ch.first) + j])];
  params_read(chunk, blk.params, Read::kBackward);  // read here, gradients written in block_weight
  recompute_block(chunk, j, s, b);
  BlockStash& bs = s.blocks[j];
  // x_{j+1} = mid + MLP(LN2(mid)): dmid = dx + LN2ᵀ(MLPᵀ(dx))
  blk.mlp.backward_input(bs.mlp, bs.dln2.data(), s.dres.data(), N);  // f all-reduces dln2
  ops::layernorm_backward_input(s.dres.data(), bs.dln2.data(), bs.mid.data(),
                                store_->param(blk.ln2_w).data(), bs.mean2.data(), bs.rstd2.data(),
                                n, d, /*accumulate=*/true);
  // mid = x_j + Attn(LN1(x_j)): dx_j = dmid + LN1ᵀ(Attnᵀ(dmid))
  blk.attn.backward_input(bs.attn, bs.dln1.data(), s.dres.data(), b);  // f all-reduces dln1
  ops::layernorm_backward_input(s.dres.data(), bs.dln1.data(), s.xs[j].data(),
                                store_->param(blk.ln1_w).data(), bs.mean1.data(), bs.rstd1.data(),
                                n, d, /*accumulate=*/true);
  params_read(chunk, blk.params, Read::kDone);
}

// Block j's weight-gradient half.
void Gpt::block_weight(int chunk, size_t j, Stash& s, int64_t b) {
  const Chunk& ch = chunks_[static_cast<size_t>(chunk)];
  const int64_t N = b * o_.seq_len, n = local_rows(N), d = o_.d_model;
  Block& blk = *blocks_[static_cast<size_t>(block_index_[static_cast<size_t>(ch.first) + j])];
  BlockStash& bs = s.blocks[j];
  blk.mlp.backward_weight(bs.mlp, bs.ln2.data(), N);
  blk.attn.backward_weight(bs.attn, bs.ln1.data(), b);
  // The layer norms' weight gradients: from this rank's rows only with
  // sequence parallelism, so summed over the group (ln_grads_: ln2 w, b, ln1 w, b).
  float* g[4] = {store_->grad(blk.ln2_w).data(), store_->grad(blk.ln2_b).data(),
                 store_->grad(blk.ln1_w).data(), store_->grad(blk.ln1_b).data()};
  if (sp()) {
    ln_grads_ = Buffer();  // zero-filled by resize
    ln_grads_.resize(static_cast<size_t>(4 * d));
    for (int k = 0; k < 4; ++k) g[k] = ln_grads_.data() + k * d;
  }
  ops::layernorm_backward_weight(g[0], g[1], bs.dln2.data(), bs.mid.data(), bs.mean2.data(),
                                 bs.rstd2.data(), n, d);
  ops::layernorm_backward_weight(g[2], g[3], bs.dln1.data(), s.xs[j].data(), bs.mean1.data(),
                                 bs.rstd1.data(), n, d);
  if (sp()) {
    tp_->allreduce({ln_grads_.data(), static_cast<size_t>(4 * d)});
    ops::add_inplace(store_->grad(blk.ln2_w).data(), g[0], d);
    ops::add_inplace(store_->grad(blk.ln2_b).data(), g[1], d);
    ops::add_inplace(store_->grad(blk.ln1_w).data(), g[2], d);
    ops::add_inplace(store_->grad(blk.ln1_b).data(), g[3], d);
  }
  if (o_.recompute == Recompute::kFull) release(bs);
  params_ready(chunk, blk.params);
}

// The chunk's output gradient into s.dres: from the loss on the back, from dy elsewhere.
void Gpt::begin_backward(int chunk, Stash& s, std::span<const float> dy, int64_t N) {
  const Chunk& ch = chunks_[static_cast<size_t>(chunk)];
  if (ch.back) {  // read here, gradients written in head_weight
    params_read(chunk, ch.back_params, Read::kBackward);
    params_read(chunk, head_embedding(), Read::kBackward);
    head_input(s, N);
    params_read(chunk, ch.back_params, Read::kDone);
    params_read(chunk, head_embedding(), Read::kDone);
    return;
  }
  PSAR_CHECK(static_cast<int64_t>(dy.size()) == N * o_.d_model, "chunk output gradient has ",
             dy.size(), " floats");
  ops::copy(s.dres.data(), dy.data() + first_row(N) * o_.d_model,
            static_cast<int64_t>(s.dres.size()));
}

// The chunk's input gradient out of s.dres; on the front, kept for the
// embeddings' weight gradient (after dropout's backward).
// Sequence parallelism gathers the rows (into s.dx0 on the front).
void Gpt::end_backward(int chunk, Stash& s, std::span<float> dx, int64_t N) {
  const int64_t d = o_.d_model;
  if (chunks_[static_cast<size_t>(chunk)].front) {
    float* g = s.dres.data();
    if (sp()) {
      gather_rows(*tp_, s.dx0.data(), s.dres.data(), N, d);
      g = s.dx0.data();
    }
    if (s.drop.p > 0)
      ops::dropout_backward(g, g, N * d, s.drop.p, s.drop.seed, s.drop.stream("embd_dropout"), 0);
    return;
  }
  PSAR_CHECK(static_cast<int64_t>(dx.size()) == N * d, "chunk input gradient has ", dx.size(),
             " floats");
  if (sp()) gather_rows(*tp_, dx.data(), s.dres.data(), N, d);
  else ops::copy(dx.data(), s.dres.data(), static_cast<int64_t>(dx.size()));
}

// dwte[token] += dx_0, dwpe[position] += dx_0
void Gpt::front_weight(int chunk, int i, const Stash& s, int64_t N) {
  const Chunk& ch = chunks_[static_cast<size_t>(chunk)];
  const int64_t T = o_.seq_len, d = o_.d_model;
  // The embedding's backward reads no parameter; it asks for them as every
  // layer's backward does (its gradients are written here).
  params_read(chunk, ch.front_params, Read::kBackward);
  float* dwte = store_->grad(wte_).data();
  float* dwpe = store_->grad(wpe_).data();
  const int32_t* tokens = batch_->tokens.data() + i * N;
  const float* dx0 = sp() ? s.dx0.data() : s.dres.data();  // [N, d], whole
  for (int64_t k = 0; k < N; ++k) {
    ops::add_inplace(dwte + tokens[k] * d, dx0 + k * d, d);
    ops::add_inplace(dwpe + (k % T) * d, dx0 + k * d, d);
  }
  params_read(chunk, ch.front_params, Read::kDone);
  params_ready(chunk, ch.front_params);
}

void Gpt::backward_input(int chunk, int, pp::Activations& a, std::span<const float> dy,
                         std::span<float> dx) {
  Stash& s = static_cast<Stash&>(a);
  const int64_t b = layout_.microbatch_rows, N = b * o_.seq_len;
  begin_backward(chunk, s, dy, N);
  for (size_t j = s.blocks.size(); j-- > 0;) block_input(chunk, j, s, b);
  end_backward(chunk, s, dx, N);
}

void Gpt::backward_weight(int chunk, int i, pp::Activations& a) {
  const Chunk& ch = chunks_[static_cast<size_t>(chunk)];
  Stash& s = static_cast<Stash&>(a);
  const int64_t b = layout_.microbatch_rows, N = b * o_.seq_len;
  if (ch.back) head_weight(chunk, s, N);
  for (size_t j = s.blocks.size(); j-- > 0;) block_weight(chunk, j, s, b);
  if (ch.front) front_weight(chunk, i, s, N);
}

void Gpt::backward(int chunk, int i, pp::Activations& a, std::span<const float> dy,
                   std::span<float> dx) {
  const Chunk& ch = chunks_[static_cast<size_t>(chunk)];
  Stash& s = static_cast<Stash&>(a);
  const int64_t b = layout_.microbatch_rows, N = b * o_.seq_len;
  begin_backward(chunk, s, dy, N);
  if (ch.back) head_weight(chunk, s, N);
  for (size_t j = s.blocks.size(); j-- > 0;) {
    block_input(chunk, j, s, b);
    block_weight(chunk, j, s, b);
  }
  end_backward(chunk, s, dx, N);
  if (ch.front) front_weight(chunk, i, s, N);
}

EvalStats Gpt::eval_forward(int chunk, const Batch& batch, std::span<const float> x,
                            std::span<float> y) {
  const Chunk& ch = chunks_[static_cast<size_t>(chunk)];
  const int64_t rows = batch.size, N = rows * o_.seq_len;
  PSAR_CHECK(static_cast<int64_t>(batch.tokens.size()) == N, "evaluation batch holds ",
             batch.tokens.size(), " tokens, expected ", rows, " × ", o_.seq_len);
  Stash s;
  run_forward(chunk, s, batch.tokens.data(), x.data(), rows, {});  // no dropout
  eval_staged_.load(batch, store_->device());
  EvalStats stats;
  if (!ch.back) {
    if (sp()) gather_rows(*tp_, y.data(), s.xs.back().data(), N, o_.d_model);
    else ops::copy(y.data(), s.xs.back().data(), static_cast<int64_t>(y.size()));
  } else {
    stats.count = N;
    stats.loss_sum = ops::softmax_cross_entropy(s.logits.data(), eval_staged_.targets(), N,
                                                o_.vocab, nullptr) *
                     static_cast<double>(N);
    stats.correct = ops::count_correct(s.logits.data(), eval_staged_.targets(), N, o_.vocab);
  }
  return stats;
}

GptOptions gpt_options(const WorkloadOptions& options, const Dataset& data) {
  if (data.features() != 0)
    throw ConfigError(
        "model.type gpt needs a token dataset (data.dataset text or "
        "synthetic_tokens), not " +
        options.data.dataset);
  GptOptions o = options.gpt;
  if (o.vocab > 0 && o.vocab < data.classes())
    throw ConfigError("model.vocab = " + std::to_string(o.vocab) + " is smaller than the " +
                      std::to_string(data.classes()) + " distinct tokens of the data");
  if (o.vocab == 0) o.vocab = data.classes();
  return o;
}

std::unique_ptr<Model> make_gpt(const WorkloadOptions& options, const Dataset& data,
                                const ModelContext& context) {
  return std::make_unique<Gpt>(gpt_options(options, data), context);
}

int gpt_layers(const WorkloadOptions& options, const Dataset&) {
  return static_cast<int>(options.gpt.layers);
}

}  // namespace psar
