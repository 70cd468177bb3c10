#pragma once
// The GPT (gpt.h) cut into pipeline stages, the Megatron way. The L
// transformer blocks are the layers partition.h cuts over the p·v virtual
// stages; the first virtual stage also holds the embeddings, the last the
// final layer norm, the LM head and the loss:
//
//   u = 0:        tokens ─▶ wte[token] + wpe[position] ─▶ Dropout ─▶ blocks ─▶
//   0 < u < last:                                          blocks ─▶
//   u = last:                                              blocks ─▶ LN_f ─▶ ·wteᵀ ─▶ loss
//
// Every boundary carries the residual stream of one micro-batch, [b·T, d]
// (and its gradient back). Parameters keep the serial model's names, shapes
// and initializers, so they start from its values.
//
// The tied head. The serial GPT's LM head is its token embedding wte. When
// the first and the last virtual stage sit on different ranks (p > 1), the
// last one holds a copy of wte under the same name (same initial values):
// its head's gradient lands in the copy, the embedding's in the original,
// and before the optimizer step the trainer adds the two gradients on both
// ranks (Megatron's embedding-group all-reduce; PipelineStages::tied_params),
// so the two copies take identical steps and stay bitwise equal to each
// other and to the serial model's wte. The gathered model leaves the copy out.
//
// Per micro-batch state. The attention and MLP modules (modelpar/tp, here at
// t = 1) keep their forward's tensors inside themselves, so each micro-batch
// in flight on a chunk gets its own instances, bound to the same parameters;
// they come from a pool per chunk, taken at the forward and returned at the
// weight gradient, so the pool grows to the schedule's peak of in-flight
// micro-batches and no further. live_activation_bytes() counts the live
// stashes at stash_bytes(chunk), the floats those instances and this file's
// buffers hold for one micro-batch (the modules' buffers are private, so the
// count is by formula from their sizes; see stash_floats in gpt_stages.cc).
//
// Dropout (model.dropout > 0) draws one fresh mask per (step, micro-batch):
// the masks differ from the serial model's, as data-parallel replicas' do
// (modelpar/tp/dropout.h); with dropout 0 the pipeline computes the serial
// model's numbers up to float summation order.

#include <memory>
#include <vector>

#include "workloads/gpt.h"
#include "workloads/pipeline_stages.h"

namespace psar {

class GptStages final : public PipelineStages {
 public:
  // Throws ConfigError for a split the model cannot take (tensor-parallel
  // sizes are those of the serial GPT at t = 1).
  GptStages(GptOptions options, StageLayout layout);
  ~GptStages() override;

  std::string name() const override { return "gpt"; }
  void declare(ParamStore& store, int chunk) override;
  void bind(ParamStore& store) override;
  void set_batch(const Batch& batch) override;
  double batch_loss() const override { return loss_; }
  std::vector<TiedParam> tied_params() const override;

  int64_t boundary_numel(int vstage) const override;
  void forward(int chunk, int microbatch, std::span<const float> x, std::span<float> y) override;
  void backward_input(int chunk, int microbatch, std::span<const float> dy,
                      std::span<float> dx) override;
  void backward_weight(int chunk, int microbatch) override;
  int live_activations() const override { return live_; }
  int64_t live_activation_bytes() const override { return live_bytes_; }
  int64_t stash_bytes(int chunk) const override;

  bool evaluates() const override { return true; }
  int64_t eval_numel(int vstage, int64_t rows) const override;
  EvalStats eval_forward(int chunk, const Batch& batch, std::span<const float> x,
                         std::span<float> y) override;

 private:
  struct BlockRun;  // one block's modules and tensors for one micro-batch
  struct Run;       // one chunk's, for one micro-batch
  struct BlockParams {
    int layer = 0;
    int ln1_w = -1, ln1_b = -1, ln2_w = -1, ln2_b = -1;
    int attn_first = -1, mlp_first = -1;  // store index of the modules' first parameter
  };
  struct Chunk {
    int first = 0, last = 0;  // blocks [first, last)
    bool embeds = false, head = false;
    std::vector<BlockParams> blocks;
    std::vector<std::unique_ptr<Run>> pool;  // free runs
  };

  std::unique_ptr<Run> take_run(int chunk);
  // Forward of `rows` sequences through `chunk` into run (tokens / x in, the
  // chunk's output or the logits left in run).
  void run_forward(int chunk, Run& run, const int32_t* tokens, const float* x, int64_t rows,
                   const DropoutContext& drop);
  int64_t stash_floats(int chunk) const;

  GptOptions o_;
  StageLayout layout_;
  TpGroup tp_;  // serial (t = 1): the modules' group; outlives them
  std::vector<Chunk> chunks_;
  ParamStore* store_ = nullptr;
  const Batch* batch_ = nullptr;
  int wte_ = -1, wpe_ = -1, head_wte_ = -1, lnf_w_ = -1, lnf_b_ = -1;
  std::vector<std::unique_ptr<Run>> stash_;  // [chunk · m + i], live between forward and weight gradient
  uint64_t batches_ = 0;                     // set_batch calls: the dropout masks' step
  double loss_ = 0;
  int live_ = 0;
  int64_t live_bytes_ = 0;
};

std::unique_ptr<PipelineStages> make_gpt_stages(const Config& config, const Dataset& data,
                                                const StageLayout& layout);
int gpt_layers(const Config& config, const Dataset& data);

}  // namespace psar
