#pragma once
// A small GPT-style language model (GPT-2 layout, llm.c style), one
// definition for every (p, t, d):
//
//   front:  tokens [b, T] ─▶ wte[token] + wpe[position] ─▶ Dropout ─▶ x_0 [b·T, d]
//   layers: L pre-LN blocks  x ← x + Attention(LN1(x));  x ← x + MLP(LN2(x))
//   back:   LN_f ─▶ logits = x·wteᵀ [b·T, V] ─▶ cross-entropy, mean over all b·T positions
//
// Layers. The L blocks are the layers the pipeline cuts (model.h): a chunk
// holds blocks [first, last), the front on virtual stage 0 and the back on
// the last; every boundary carries the residual stream of one micro-batch,
// [b·T, d], and its gradient back. The serial GPT is the one-stage case.
//
// Tensor parallelism. Attention and MLP are modelpar/tp's
// ParallelSelfAttention and ParallelMLP over the TpGroup of ModelContext:
// 4 all-reduces of [b·T, d] per block per micro-batch, forward (g) plus
// backward (f), with the column_row split. Everything else — embeddings,
// layer norms, the LM head — is replicated on every rank of the group
// (their inputs and gradients are whole after g and f, so replicas stay
// bitwise identical), and so is the residual stream a stage sends on. The
// LM head is tied to the token embedding (GPT-2) and not vocabulary-
// parallel: with a character vocabulary it is a small part of the work
// (docs/tensor_parallel.md).
//
// The tied head. When the front and the back sit on different pipeline
// ranks (p > 1), the back holds a copy of wte under the same name (same
// initial values): its head's gradient lands in the copy, the embedding's in
// the original, and the trainer reduces the two (TiedParam, model.h).
//
// Activations. One micro-batch's tensors on one chunk are a Gpt::Stash the
// executor owns (stage_model.h); the modules keep none. activation_bytes()
// predicts its size from the shapes (see activation_floats in gpt.cc).
//
// Sequence parallelism (parallel.sequence_parallel, t > 1; Korthikanti et
// al. 2022): inside a chunk each TP rank keeps rows [r·N/t, (r+1)·N/t) of
// the residual stream, N = b·T (the rows are [b, T] token-major, so the cut
// runs along the flattened batch·sequence; seq_len % t = 0 as in Megatron);
// layer norms, dropouts and residual adds run on those rows, and the
// attention's and the MLP's f/g all-reduces become all-gathers and
// reduce-scatters (conjugate.h). The layer norms' weight gradients are then
// partial per rank and all-reduced over the group (4·d floats per block and
// micro-batch). The chunk's input is the replicated boundary (each rank
// takes its rows) and its output is all-gathered, so the pipeline boundary,
// LN_f and the (replicated) head are as without it.
//
// Recomputation (train.recompute): selective drops the attention
// probabilities and recomputes scores, softmax and dropout in the backward
// (ParallelSelfAttention::recompute_core); full keeps only each block's
// input and reruns the block's forward from it just before its backward
// (its buffers are freed again once its weight gradient is done). Both are
// bitwise the plain run: the same code on the same inputs, the same masks.
//
// Dropout (model.dropout > 0) draws one fresh mask per (step, micro-batch),
// the element's index in its micro-batch's tensor: the masks differ from the
// serial model's with several micro-batches or data-parallel replicas
// (modelpar/tp/dropout.h); with dropout 0 every (p, t, d) computes the
// serial model's numbers up to float summation order.

#include <memory>
#include <string>
#include <vector>

#include "core/recompute.h"
#include "modelpar/tp/group.h"
#include "modelpar/tp/parallel_attention.h"
#include "modelpar/tp/parallel_mlp.h"
#include "modelpar/tp/shard.h"
#include "workloads/model.h"
#include "workloads/workload_options.h"

namespace psar {

// Forward work counted as it runs: what recomputation adds.
struct GptComputeCounts {
  int64_t block_forwards = 0;  // transformer blocks run forward (full recomputation reruns each)
  int64_t core_passes = 0;     // attention scores-softmax-dropout over one (sequence, head)
  // FLOPs (2 per multiply-add) of the forward GEMMs this rank ran — the
  // blocks' linears and attention products and the head — recomputation's
  // included (tests compare it with the closed form from the shapes).
  int64_t forward_flops = 0;
};

class Gpt final : public Model {
 public:
  // Throws ConfigError for sizes the TP group cannot split (heads % t,
  // d_model % t) or a layer split the model does not have.
  Gpt(GptOptions options, const ModelContext& context);
  ~Gpt() override;

  std::string name() const override { return "gpt"; }
  void declare(ParamStore& store, int chunk) override;
  void bind(ParamStore& store) override;
  void set_batch(const Batch& batch) override;
  uint64_t batches_seen() const override { return batches_; }
  void set_batches_seen(uint64_t n) override { batches_ = n; }
  double batch_loss() const override { return loss_; }
  std::vector<TiedParam> tied_params() const override;
  const ShardedParams* sharded_params() const override { return params_.get(); }

  int64_t boundary_numel(int vstage) const override;
  std::unique_ptr<pp::Activations> make_activations(int chunk) const override;
  void forward(int chunk, int microbatch, pp::Activations& a, std::span<const float> x,
               std::span<float> y) override;
  void backward_input(int chunk, int microbatch, pp::Activations& a, std::span<const float> dy,
                      std::span<float> dx) override;
  void backward_weight(int chunk, int microbatch, pp::Activations& a) override;
  // Fused: each block's weight gradient right after its input gradient.
  void backward(int chunk, int microbatch, pp::Activations& a, std::span<const float> dy,
                std::span<float> dx) override;
  int64_t activation_bytes(int chunk) const override;

  bool evaluates() const override { return true; }
  int64_t eval_numel(int vstage, int64_t rows) const override;
  EvalStats eval_forward(int chunk, const Batch& batch, std::span<const float> x,
                         std::span<float> y) override;
  int64_t tp_allreduce_floats(int chunk) const override;
  int64_t tp_all_gather_floats(int chunk) const override;
  // Reduce-scatter floats (the input size) of one micro-batch on `chunk` (sequence parallelism).
  int64_t tp_reduce_scatter_floats(int chunk) const;
  GptComputeCounts compute_counts() const;
  // The front (embeddings), each block, the back (final layer norm, and the
  // head's own embedding copy), per chunk.
  std::vector<std::pair<int64_t, int64_t>> layer_ranges() const override;

  const GptOptions& options() const { return o_; }
  TpGroup& tp() { return *tp_; }

 private:
  struct Block;       // one block's modules and parameter indices
  struct BlockStash;  // one block's tensors of one micro-batch
  struct Stash;       // one chunk's, of one micro-batch
  struct Chunk {
    int first = 0, last = 0;  // blocks [first, last)
    bool front = false, back = false;
    // Store indices [begin, end) of the front's and the back's parameters.
    std::pair<int, int> front_params{0, 0}, back_params{0, 0};
  };
  // Reports store indices [begin, end) of `chunk` as done (gradient_ready).
  void params_ready(int chunk, std::pair<int, int> range);
  // Asks the gate (stage_model.h) for store indices [begin, end) of `chunk`:
  // before the forward reads them, before the backward does, or done.
  enum class Read { kForward, kBackward, kDone };
  void params_read(int chunk, std::pair<int, int> range, Read read = Read::kForward);
  std::pair<int64_t, int64_t> arena_range(std::pair<int, int> range) const;
  std::pair<int, int> head_embedding() const;
  // The backward's pieces (gpt.cc).
  void head_input(Stash& s, int64_t N);
  void head_weight(int chunk, const Stash& s, int64_t N);
  void block_input(int chunk, size_t j, Stash& s, int64_t b);
  void block_weight(int chunk, size_t j, Stash& s, int64_t b);
  void begin_backward(int chunk, Stash& s, std::span<const float> dy, int64_t N);
  void end_backward(int chunk, Stash& s, std::span<float> dx, int64_t N);
  void front_weight(int chunk, int i, const Stash& s, int64_t N);
  // One block forward from x into out, filling its stash (forward and full recomputation).
  void block_forward(Block& b, BlockStash& a, const float* x, float* out, int64_t rows,
                     const DropoutContext& drop);
  // Block j's stash again before its backward (full recomputation).
  void recompute_block(int chunk, size_t j, Stash& s, int64_t b);
  static void release(BlockStash& a);
  bool sp() const { return o_.sequence_parallel; }
  // Rows of the residual stream on this rank (N, or N/t) and its first row.
  int64_t local_rows(int64_t N) const { return sp() ? N / tp_->size() : N; }
  int64_t first_row(int64_t N) const { return sp() ? tp_->rank() * (N / tp_->size()) : 0; }
  // The chunk's output, whole [N, d]: xs[n], or its rows gathered (sequence parallelism).
  const float* output(const Stash& s) const;

  // Forward of `rows` sequences through `chunk` into s (tokens for the
  // front, x otherwise; the chunk's output, or the logits, left in s).
  void run_forward(int chunk, Stash& s, const int32_t* tokens, const float* x, int64_t rows,
                   const DropoutContext& drop);
  int64_t activation_floats(int chunk, int64_t rows, bool dropout) const;
  int head_param() const { return head_wte_ >= 0 ? head_wte_ : wte_; }

  GptOptions o_;
  StageLayout layout_;
  TpGroup serial_tp_;  // the group when the context has none (t = 1)
  TpGroup* tp_;
  std::unique_ptr<ShardedParams> params_;
  std::vector<Chunk> chunks_;
  std::vector<std::unique_ptr<Block>> blocks_;  // [l − first block of chunk 0 ...], by layer
  std::vector<int> block_index_;                // layer l -> index into blocks_, -1 if not held
  ParamStore* store_ = nullptr;
  const Batch* batch_ = nullptr;
  // The targets where the store's arenas are (tokens index on the host).
  DeviceBatch staged_, eval_staged_;
  int wte_ = -1, wpe_ = -1, head_wte_ = -1, lnf_w_ = -1, lnf_b_ = -1;
  Buffer dwhole_, ln_grads_;  // sequence parallelism: [N, d] scratch, the layer norms' 4·d gradients
  int64_t block_forwards_ = 0;
  int64_t head_flops_ = 0;  // the head's forward GEMMs (GptComputeCounts::forward_flops)
  uint64_t batches_ = 0;  // set_batch calls: the dropout masks' step
  double loss_ = 0;
};

// Block l's name ("h<l>") and the options of its attention and MLP (GPT-2
// scales the residual projections' init by 1/√(2L)).
std::string gpt_block_name(int l);
ParallelAttentionOptions gpt_attention_options(const GptOptions& o, int l);
ParallelMlpOptions gpt_mlp_options(const GptOptions& o, int l);

// The GPT's options from model.* (and parallel.tp_split, train.seed); a
// ConfigError for a dataset without tokens or a vocabulary too small for it.
GptOptions gpt_options(const WorkloadOptions& options, const Dataset& data);

std::unique_ptr<Model> make_gpt(const WorkloadOptions& options, const Dataset& data,
                                const ModelContext& context);
int gpt_layers(const WorkloadOptions& options, const Dataset& data);

}  // namespace psar
