#pragma once
// A small GPT-style language model (GPT-2 layout, llm.c style) whose
// transformer layers are tensor-parallel over the group the trainer gives it:
//
//   tokens [B, T] ─▶ wte[token] + wpe[position] ─▶ Dropout ─▶ x_0 [B·T, d]
//   L pre-LN blocks:  x ← x + Attention(LN1(x));  x ← x + MLP(LN2(x))
//   LN_f ─▶ logits = x·wteᵀ [B·T, V] ─▶ cross-entropy, mean over all B·T positions
//
// Attention and MLP are modelpar/tp's ParallelSelfAttention and ParallelMLP:
// 4 all-reduces of [B·T, d] per layer per forward+backward. Everything else —
// embeddings, layer norms, the LM head — is replicated on every rank of the
// group (their inputs and gradients are whole after g and f, so replicas stay
// bitwise identical). The LM head is tied to the token embedding (GPT-2), and
// not vocabulary-parallel: with a character vocabulary it is a small part of
// the work (docs/tensor_parallel.md). At t = 1 this is the serial model.

#include <memory>
#include <string>
#include <vector>

#include "modelpar/tp/group.h"
#include "modelpar/tp/parallel_attention.h"
#include "modelpar/tp/parallel_mlp.h"
#include "modelpar/tp/shard.h"
#include "workloads/model.h"

namespace psar {

struct GptOptions {
  int64_t vocab = 0, seq_len = 32, layers = 2, d_model = 64, heads = 4;
  float dropout = 0.0f;  // embeddings, attention probabilities, both residual branches
  float init_std = 0.02f;
  MlpSplit split = MlpSplit::kColumnRow;
  uint64_t seed = 1;  // train.seed: the shards' initial values and the dropout masks
};

// Tensor-parallel communication of one forward_backward on one rank.
struct TpStepRow {
  int64_t step = 0;
  double compute_s = 0;                  // the whole forward_backward, communication included
  TpCounters tp;                         // f/g calls, collectives, floats and seconds of this step
  int64_t bytes_sent = 0, messages = 0;  // the TP communicator's own counters
};

class Gpt final : public Model {
 public:
  // context.tp: the tensor-parallel group (null = serial). Throws ConfigError
  // for sizes the group cannot split (heads % t, d_model % t).
  Gpt(GptOptions options, const ModelContext& context);
  ~Gpt() override;

  std::string name() const override { return "gpt"; }
  void declare(ParamStore& store) override;
  void bind(ParamStore& store) override;
  double forward_backward(const Batch& batch, float grad_scale) override;
  EvalStats evaluate(const Batch& batch) override;
  void write_run_files(const std::string& out_dir, Comm& workers) override;

  const GptOptions& options() const { return o_; }
  // Every parameter with its serial shape and split (tests slice serial
  // gradients with it).
  const ShardedParams& sharded_params() const { return *params_; }
  TpGroup& tp() { return tp_; }
  const std::vector<TpStepRow>& step_rows() const { return rows_; }
  // [B·T, V] of the last forward.
  const std::vector<float>& logits() const { return logits_; }

 private:
  struct Block;
  void forward(const Batch& batch, const DropoutContext& drop);

  GptOptions o_;
  Comm* tp_comm_ = nullptr;
  TpGroup tp_;
  std::unique_ptr<ShardedParams> params_;
  std::vector<std::unique_ptr<Block>> blocks_;
  ParamStore* store_ = nullptr;
  int wte_ = -1, wpe_ = -1, lnf_w_ = -1, lnf_b_ = -1;
  uint64_t step_ = 0;  // forward_backward calls: a fresh dropout mask each
  DropoutContext drop_;
  // x_[l]: [B·T, d], the residual stream entering block l; x_[L] leaves the last
  std::vector<std::vector<float>> x_;
  std::vector<float> xf_, lnf_mean_, lnf_rstd_, logits_;  // [B·T, d], [B·T] ×2, [B·T, V]
  std::vector<float> dlogits_, dx_, dbuf_;                // [B·T, V], [B·T, d] ×2
  std::vector<TpStepRow> rows_;
};

// Block l's name ("h<l>") and the options of its attention and MLP (GPT-2
// scales the residual projections' init by 1/√(2L)): the serial GPT and its
// pipeline stages build the same blocks.
std::string gpt_block_name(int l);
ParallelAttentionOptions gpt_attention_options(const GptOptions& o, int l);
ParallelMlpOptions gpt_mlp_options(const GptOptions& o, int l);

// The GPT's options from model.* (and parallel.tp_split, train.seed); a
// ConfigError for a dataset without tokens or a vocabulary too small for it.
GptOptions gpt_options(const Config& config, const Dataset& data);

std::unique_ptr<Model> make_gpt(const Config& config, const Dataset& data,
                                const ModelContext& context);

}  // namespace psar
