#include "workloads/gpt_stages.h"

#include <cmath>
#include <cstring>

#include "core/errors.h"
#include "core/ops.h"
#include "modelpar/tp/parallel_attention.h"
#include "modelpar/tp/parallel_mlp.h"
#include "modelpar/tp/shard.h"

namespace psar {

using psar::detail::concat;

namespace {

// Gives `module` (declared first into `store` by another instance at index
// `first`) the same parameter indices and binds it to `store`: it declares
// into a scratch store padded to `first` entries (ParamStore::add returns the
// entry's index), and the names and shapes must then match the real ones.
template <typename Module>
void attach(Module& module, ParamStore& store, int first) {
  ParamStore shadow;
  for (int k = 0; k < first; ++k) shadow.add("pad." + std::to_string(k), {1}, Init::zeros());
  ShardedParams params(0, 1);
  module.declare(params, shadow);
  for (size_t k = static_cast<size_t>(first); k < shadow.infos().size(); ++k) {
    PSAR_CHECK(k < store.infos().size() && shadow.infos()[k].name == store.infos()[k].name &&
                   shadow.infos()[k].shape == store.infos()[k].shape,
               "gpt stages: a module instance's parameter ", shadow.infos()[k].name,
               " does not line up with the store's entry ", k);
  }
  module.bind(store);
}

}  // namespace

// One transformer block of one micro-batch: its modules (whose private
// buffers hold their forward's tensors) and the tensors around them, [N, d]
// each (N = b·T) and [N] for the layer norms' statistics.
struct GptStages::BlockRun {
  BlockRun(TpGroup& tp, const GptOptions& o, int l)
      : attn(tp, gpt_attention_options(o, l)), mlp(tp, gpt_mlp_options(o, l)) {}

  ParallelSelfAttention attn;
  ParallelMLP mlp;
  // LN1(x), attention output, x after the attention residual, LN2 of it, MLP
  // output; the gradients at LN2's and LN1's outputs (for the weight half)
  std::vector<float> ln1, attn_out, mid, ln2, mlp_out, dln2, dln1;
  std::vector<float> mean1, rstd1, mean2, rstd2;
};

// One chunk of one micro-batch.
struct GptStages::Run {
  std::vector<std::unique_ptr<BlockRun>> blocks;
  // xs[j]: the residual stream entering block j; xs[n] leaves the chunk
  std::vector<std::vector<float>> xs;
  // The residual stream's gradient walked down the chunk; on the embedding
  // chunk it ends as the gradient of x_0 (after dropout's backward).
  std::vector<float> dres;
  // Head chunk: LN_f output and statistics, logits [N, V], (1/m)·∂loss/∂logits, ∂/∂xf
  std::vector<float> xf, lnf_mean, lnf_rstd, logits, dlogits, dxf;
  DropoutContext drop;
};

GptStages::GptStages(GptOptions options, StageLayout layout)
    : o_(std::move(options)), layout_(std::move(layout)) {
  if (o_.vocab < 2 || o_.seq_len < 1 || o_.layers < 1 || o_.d_model < 1)
    throw ConfigError("gpt: needs vocab >= 2, model.seq_len, model.layers and model.d_model >= 1");
  if (o_.dropout < 0.0f || o_.dropout >= 1.0f)
    throw ConfigError("model.dropout must be in [0, 1), got " + std::to_string(o_.dropout));
  PSAR_CHECK(static_cast<int>(layout_.layers.size()) == layout_.vstages(), "stage layout has ",
             layout_.layers.size(), " layer counts for ", layout_.vstages(), " virtual stages");
  for (int c = 0; c < layout_.chunks; ++c) {
    const int u = layout_.vstage(c);
    const auto [first, last] = layout_.layer_range(u);
    PSAR_CHECK(first < last && last <= o_.layers, "virtual stage ", u, " has blocks [", first,
               ", ", last, ") of ", o_.layers);
    Chunk ch;
    ch.first = first;
    ch.last = last;
    ch.embeds = u == 0;
    ch.head = u == layout_.vstages() - 1;
    chunks_.push_back(std::move(ch));
  }
  stash_.resize(static_cast<size_t>(layout_.chunks * layout_.microbatches));
}

GptStages::~GptStages() = default;

// The serial GPT's names, shapes and initializers (Gpt::declare), chunk by
// chunk. The first instance of each block's modules declares into the real
// store and becomes the chunk's first pooled run.
void GptStages::declare(ParamStore& store, int chunk) {
  Chunk& ch = chunks_.at(static_cast<size_t>(chunk));
  const int64_t d = o_.d_model;
  if (ch.embeds) {
    wte_ = store.add("wte", {o_.vocab, d}, Init::normal(o_.init_std));
    wpe_ = store.add("wpe", {o_.seq_len, d}, Init::normal(o_.init_std));
  }
  auto run = std::make_unique<Run>();
  ShardedParams params(0, 1);
  for (int l = ch.first; l < ch.last; ++l) {
    const std::string name = gpt_block_name(l);
    BlockParams bp;
    bp.layer = l;
    auto block = std::make_unique<BlockRun>(tp_, o_, l);
    bp.ln1_w = store.add(name + ".ln1.weight", {d}, Init::ones());
    bp.ln1_b = store.add(name + ".ln1.bias", {d}, Init::zeros());
    bp.attn_first = static_cast<int>(store.infos().size());
    block->attn.declare(params, store);
    bp.ln2_w = store.add(name + ".ln2.weight", {d}, Init::ones());
    bp.ln2_b = store.add(name + ".ln2.bias", {d}, Init::zeros());
    bp.mlp_first = static_cast<int>(store.infos().size());
    block->mlp.declare(params, store);
    ch.blocks.push_back(bp);
    run->blocks.push_back(std::move(block));
  }
  if (ch.head) {
    lnf_w_ = store.add("lnf.weight", {d}, Init::ones());
    lnf_b_ = store.add("lnf.bias", {d}, Init::zeros());
    // The tied head: this rank's own copy of wte unless it holds the embedding too.
    if (layout_.stage != 0) head_wte_ = store.add("wte", {o_.vocab, d}, Init::normal(o_.init_std));
  }
  ch.pool.push_back(std::move(run));
}

void GptStages::bind(ParamStore& store) {
  store_ = &store;
  for (Chunk& ch : chunks_)
    for (auto& run : ch.pool)
      for (auto& block : run->blocks) {
        block->attn.bind(store);
        block->mlp.bind(store);
      }
}

std::vector<TiedParam> GptStages::tied_params() const {
  if (layout_.stages == 1) return {};  // embedding and head on one rank: one wte
  if (layout_.stage == 0) return {{wte_, layout_.stages - 1, false}};
  if (layout_.stage == layout_.stages - 1) return {{head_wte_, 0, true}};
  return {};
}

std::unique_ptr<GptStages::Run> GptStages::take_run(int chunk) {
  PSAR_CHECK(store_, "gpt stages used before bind()");
  Chunk& ch = chunks_[static_cast<size_t>(chunk)];
  if (!ch.pool.empty()) {
    auto run = std::move(ch.pool.back());
    ch.pool.pop_back();
    return run;
  }
  auto run = std::make_unique<Run>();
  for (const BlockParams& bp : ch.blocks) {
    auto block = std::make_unique<BlockRun>(tp_, o_, bp.layer);
    attach(block->attn, *store_, bp.attn_first);
    attach(block->mlp, *store_, bp.mlp_first);
    run->blocks.push_back(std::move(block));
  }
  return run;
}

void GptStages::set_batch(const Batch& batch) {
  const int64_t rows = layout_.microbatch_rows * layout_.microbatches;
  PSAR_CHECK(batch.size == rows, "the pipeline batch has ", batch.size, " rows, expected m·b = ",
             rows);
  PSAR_CHECK(static_cast<int64_t>(batch.tokens.size()) == rows * o_.seq_len &&
                 batch.targets.size() == batch.tokens.size(),
             "batch holds ", batch.tokens.size(), " tokens, expected ", rows, " × ", o_.seq_len);
  batch_ = &batch;
  loss_ = 0;
  ++batches_;
}

int64_t GptStages::boundary_numel(int vstage) const {
  return eval_numel(vstage, layout_.microbatch_rows);
}

int64_t GptStages::eval_numel(int, int64_t rows) const { return rows * o_.seq_len * o_.d_model; }

// Floats one micro-batch keeps on `chunk` from its forward to its weight
// gradient, N = b·T rows, h = 4d:
//   per block   this file: its input, ln1, attn_out, mid, ln2, mlp_out, dln1,
//               dln2 (8·N·d) and the four statistics (4·N);
//               attention: Q|K|V and its gradient (6·N·d), the context, its
//               gradient and the output gradient (3·N·d), the probabilities
//               b·H·T² (twice with dropout) and one T² gradient scratch;
//               MLP: the hidden pre-activation, activation and their
//               gradients (4·N·h) and the output gradient (N·d)
//   per chunk   its output and the residual gradient (2·N·d); on the head
//               chunk LN_f's output, statistics and gradient (2·N·d + 2·N)
//               and the logits and their gradient (2·N·V)
int64_t GptStages::stash_floats(int chunk) const {
  const Chunk& ch = chunks_[static_cast<size_t>(chunk)];
  const int64_t b = layout_.microbatch_rows, T = o_.seq_len, N = b * T, d = o_.d_model,
                h = 4 * d;
  const int64_t probs = b * o_.heads * T * T * (o_.dropout > 0 ? 2 : 1);
  const int64_t block = 8 * N * d + 4 * N + 9 * N * d + probs + T * T + 4 * N * h + N * d;
  int64_t floats = static_cast<int64_t>(ch.blocks.size()) * block + 2 * N * d;
  if (ch.head) floats += 2 * N * d + 2 * N + 2 * N * o_.vocab;
  return floats;
}

int64_t GptStages::stash_bytes(int chunk) const {
  return stash_floats(chunk) * static_cast<int64_t>(sizeof(float));
}

void GptStages::run_forward(int chunk, Run& r, const int32_t* tokens, const float* x, int64_t rows,
                            const DropoutContext& drop) {
  const Chunk& ch = chunks_[static_cast<size_t>(chunk)];
  const int64_t T = o_.seq_len, N = rows * T, d = o_.d_model, V = o_.vocab;
  const size_t Nd = static_cast<size_t>(N * d);
  const size_t n = ch.blocks.size();
  r.xs.resize(n + 1);
  for (auto& v : r.xs) v.resize(Nd);

  if (ch.embeds) {  // x_0 = wte[token] + wpe[position], then dropout
    const float* wte = store_->param(wte_).data();
    const float* wpe = store_->param(wpe_).data();
    for (int64_t k = 0; k < N; ++k) {
      const int32_t tok = tokens[k];
      PSAR_CHECK(tok >= 0 && tok < V, "token ", tok, " outside the vocabulary of ", V);
      ops::add(r.xs[0].data() + k * d, wte + tok * d, wpe + (k % T) * d, d);
    }
    if (drop.p > 0)
      ops::dropout_forward(r.xs[0].data(), r.xs[0].data(), N * d, drop.p, drop.seed,
                           drop.stream("embd_dropout"), 0);
  } else {
    std::memcpy(r.xs[0].data(), x, Nd * sizeof(float));
  }

  for (size_t j = 0; j < n; ++j) {
    BlockRun& b = *r.blocks[j];
    const BlockParams& bp = ch.blocks[j];
    for (auto* v : {&b.ln1, &b.attn_out, &b.mid, &b.ln2, &b.mlp_out}) v->resize(Nd);
    for (auto* v : {&b.mean1, &b.rstd1, &b.mean2, &b.rstd2}) v->resize(static_cast<size_t>(N));
    ops::layernorm_forward(b.ln1.data(), b.mean1.data(), b.rstd1.data(), r.xs[j].data(),
                           store_->param(bp.ln1_w).data(), store_->param(bp.ln1_b).data(), N, d);
    b.attn.forward(b.attn_out.data(), b.ln1.data(), rows, drop);
    ops::add(b.mid.data(), r.xs[j].data(), b.attn_out.data(), N * d);
    ops::layernorm_forward(b.ln2.data(), b.mean2.data(), b.rstd2.data(), b.mid.data(),
                           store_->param(bp.ln2_w).data(), store_->param(bp.ln2_b).data(), N, d);
    b.mlp.forward(b.mlp_out.data(), b.ln2.data(), N, drop);
    ops::add(r.xs[j + 1].data(), b.mid.data(), b.mlp_out.data(), N * d);
  }

  if (ch.head) {  // logits = LN_f(x)·wteᵀ, the head tied to the token embedding
    r.xf.resize(Nd);
    r.lnf_mean.resize(static_cast<size_t>(N));
    r.lnf_rstd.resize(static_cast<size_t>(N));
    ops::layernorm_forward(r.xf.data(), r.lnf_mean.data(), r.lnf_rstd.data(), r.xs[n].data(),
                           store_->param(lnf_w_).data(), store_->param(lnf_b_).data(), N, d);
    r.logits.resize(static_cast<size_t>(N * V));
    const float* wte = store_->param(head_wte_ >= 0 ? head_wte_ : wte_).data();
    ops::gemm(false, true, N, V, d, 1.0f, r.xf.data(), d, wte, d, 0.0f, r.logits.data(), V);
  }
}

void GptStages::forward(int chunk, int i, std::span<const float> x, std::span<float> y) {
  PSAR_CHECK(batch_, "GptStages::forward before set_batch()");
  const Chunk& ch = chunks_[static_cast<size_t>(chunk)];
  const int64_t b = layout_.microbatch_rows, T = o_.seq_len, N = b * T, V = o_.vocab;
  auto& slot = stash_[static_cast<size_t>(chunk * layout_.microbatches + i)];
  PSAR_CHECK(!slot, "micro-batch ", i, " runs forward twice on chunk ", chunk);
  PSAR_CHECK(ch.embeds || static_cast<int64_t>(x.size()) == N * o_.d_model, "chunk input has ",
             x.size(), " floats");
  slot = take_run(chunk);
  Run& r = *slot;
  // A fresh dropout mask per (step, micro-batch).
  r.drop = {o_.dropout, o_.seed,
            (batches_ - 1) * static_cast<uint64_t>(layout_.microbatches) +
                static_cast<uint64_t>(i)};
  run_forward(chunk, r, batch_->tokens.data() + i * N, x.data(), b, r.drop);
  if (ch.head) {
    // The backward starts here: dlogits = (1/m)·∂(mean loss of micro-batch i)/∂logits.
    const float scale = 1.0f / static_cast<float>(layout_.microbatches);
    r.dlogits.resize(static_cast<size_t>(N * V));
    loss_ += ops::softmax_cross_entropy(r.logits.data(), batch_->targets.data() + i * N, N, V,
                                        r.dlogits.data(), scale) *
             scale;
  } else {
    PSAR_CHECK(y.size() == r.xs.back().size(), "chunk output has ", y.size(), " floats");
    std::memcpy(y.data(), r.xs.back().data(), y.size() * sizeof(float));
  }
  live_ += 1;
  live_bytes_ += stash_bytes(chunk);
}

void GptStages::backward_input(int chunk, int i, std::span<const float> dy, std::span<float> dx) {
  const Chunk& ch = chunks_[static_cast<size_t>(chunk)];
  auto& slot = stash_[static_cast<size_t>(chunk * layout_.microbatches + i)];
  PSAR_CHECK(slot, "backward of micro-batch ", i, " on chunk ", chunk, " before its forward");
  Run& r = *slot;
  const int64_t b = layout_.microbatch_rows, T = o_.seq_len, N = b * T, d = o_.d_model,
                V = o_.vocab;
  const size_t Nd = static_cast<size_t>(N * d), n = ch.blocks.size();
  r.dres.resize(Nd);
  if (ch.head) {  // dxf = dlogits·wte, then through LN_f
    r.dxf.resize(Nd);
    const float* wte = store_->param(head_wte_ >= 0 ? head_wte_ : wte_).data();
    ops::gemm(false, false, N, d, V, 1.0f, r.dlogits.data(), V, wte, d, 0.0f, r.dxf.data(), d);
    ops::layernorm_backward_input(r.dres.data(), r.dxf.data(), r.xs[n].data(),
                                  store_->param(lnf_w_).data(), r.lnf_mean.data(),
                                  r.lnf_rstd.data(), N, d);
  } else {
    PSAR_CHECK(dy.size() == Nd, "chunk output gradient has ", dy.size(), " floats");
    std::memcpy(r.dres.data(), dy.data(), Nd * sizeof(float));
  }
  for (size_t j = n; j-- > 0;) {
    BlockRun& blk = *r.blocks[j];
    const BlockParams& bp = ch.blocks[j];
    blk.dln2.resize(Nd);
    blk.dln1.resize(Nd);
    // x_{j+1} = mid + MLP(LN2(mid)): dmid = dx + LN2ᵀ(MLPᵀ(dx))
    blk.mlp.backward_input(blk.dln2.data(), r.dres.data(), N);
    ops::layernorm_backward_input(r.dres.data(), blk.dln2.data(), blk.mid.data(),
                                  store_->param(bp.ln2_w).data(), blk.mean2.data(),
                                  blk.rstd2.data(), N, d, /*accumulate=*/true);
    // mid = x_j + Attn(LN1(x_j)): dx_j = dmid + LN1ᵀ(Attnᵀ(dmid))
    blk.attn.backward_input(blk.dln1.data(), r.dres.data(), b);
    ops::layernorm_backward_input(r.dres.data(), blk.dln1.data(), r.xs[j].data(),
                                  store_->param(bp.ln1_w).data(), blk.mean1.data(),
                                  blk.rstd1.data(), N, d, /*accumulate=*/true);
  }
  if (ch.embeds) {  // kept for the embeddings' weight gradient
    if (r.drop.p > 0)
      ops::dropout_backward(r.dres.data(), r.dres.data(), N * d, r.drop.p, r.drop.seed,
                            r.drop.stream("embd_dropout"), 0);
  } else {
    PSAR_CHECK(dx.size() == Nd, "chunk input gradient has ", dx.size(), " floats");
    std::memcpy(dx.data(), r.dres.data(), Nd * sizeof(float));
  }
}

void GptStages::backward_weight(int chunk, int i) {
  Chunk& ch = chunks_[static_cast<size_t>(chunk)];
  auto& slot = stash_[static_cast<size_t>(chunk * layout_.microbatches + i)];
  PSAR_CHECK(slot, "weight gradient of micro-batch ", i, " on chunk ", chunk,
             " before its forward");
  Run& r = *slot;
  PSAR_CHECK(!r.dres.empty(), "weight gradient of micro-batch ", i, " on chunk ", chunk,
             " before its input gradient");
  const int64_t b = layout_.microbatch_rows, T = o_.seq_len, N = b * T, d = o_.d_model,
                V = o_.vocab;
  const size_t n = ch.blocks.size();
  if (ch.head) {  // dwte += dlogitsᵀ·xf (the head's copy), and LN_f
    float* dwte = store_->grad(head_wte_ >= 0 ? head_wte_ : wte_).data();
    ops::gemm(true, false, V, d, N, 1.0f, r.dlogits.data(), V, r.xf.data(), d, 1.0f, dwte, d);
    ops::layernorm_backward_weight(store_->grad(lnf_w_).data(), store_->grad(lnf_b_).data(),
                                   r.dxf.data(), r.xs[n].data(), r.lnf_mean.data(),
                                   r.lnf_rstd.data(), N, d);
  }
  for (size_t j = n; j-- > 0;) {
    BlockRun& blk = *r.blocks[j];
    const BlockParams& bp = ch.blocks[j];
    blk.mlp.backward_weight(blk.ln2.data(), N);
    ops::layernorm_backward_weight(store_->grad(bp.ln2_w).data(), store_->grad(bp.ln2_b).data(),
                                   blk.dln2.data(), blk.mid.data(), blk.mean2.data(),
                                   blk.rstd2.data(), N, d);
    blk.attn.backward_weight(blk.ln1.data(), b);
    ops::layernorm_backward_weight(store_->grad(bp.ln1_w).data(), store_->grad(bp.ln1_b).data(),
                                   blk.dln1.data(), r.xs[j].data(), blk.mean1.data(),
                                   blk.rstd1.data(), N, d);
  }
  if (ch.embeds) {  // dwte[token] += dx_0, dwpe[position] += dx_0
    float* dwte = store_->grad(wte_).data();
    float* dwpe = store_->grad(wpe_).data();
    const int32_t* tokens = batch_->tokens.data() + i * N;
    for (int64_t k = 0; k < N; ++k) {
      ops::add_inplace(dwte + tokens[k] * d, r.dres.data() + k * d, d);
      ops::add_inplace(dwpe + (k % T) * d, r.dres.data() + k * d, d);
    }
  }
  r.dres.clear();  // keeps its capacity for the next micro-batch taking this run
  ch.pool.push_back(std::move(slot));
  live_ -= 1;
  live_bytes_ -= stash_bytes(chunk);
}

EvalStats GptStages::eval_forward(int chunk, const Batch& batch, std::span<const float> x,
                                  std::span<float> y) {
  const Chunk& ch = chunks_[static_cast<size_t>(chunk)];
  const int64_t rows = batch.size, N = rows * o_.seq_len;
  PSAR_CHECK(static_cast<int64_t>(batch.tokens.size()) == N, "evaluation batch holds ",
             batch.tokens.size(), " tokens, expected ", rows, " × ", o_.seq_len);
  auto run = take_run(chunk);
  run_forward(chunk, *run, batch.tokens.data(), x.data(), rows, {});  // no dropout
  EvalStats s;
  if (!ch.head) {
    std::memcpy(y.data(), run->xs.back().data(), y.size() * sizeof(float));
  } else {
    s.count = N;
    s.loss_sum = ops::softmax_cross_entropy(run->logits.data(), batch.targets.data(), N, o_.vocab,
                                            nullptr) *
                 static_cast<double>(N);
    s.correct = ops::count_correct(run->logits.data(), batch.targets.data(), N, o_.vocab);
  }
  chunks_[static_cast<size_t>(chunk)].pool.push_back(std::move(run));
  return s;
}

int gpt_layers(const Config& config, const Dataset&) {
  return static_cast<int>(config.get_int("model.layers"));
}

// As make_gpt (gpt.cc), at t = 1.
std::unique_ptr<PipelineStages> make_gpt_stages(const Config& config, const Dataset& data,
                                                const StageLayout& layout) {
  const GptOptions o = gpt_options(config, data);
  return std::make_unique<GptStages>(o, layout);
}

}  // namespace psar
