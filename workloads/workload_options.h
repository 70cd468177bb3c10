#pragma once
// The workload's keys — model.*, data.* and the few of other sections a
// model is built with (train.seed, train.recompute, parallel.tp_split,
// parallel.sequence_parallel, parallel.hybrid, parallel.hybrid_fc) — read
// once at the start of a run (workload_options) into one typed struct that
// the model registry and the datasets take; no model reads the config.
// Checks that need the data (the image against its features, the
// vocabulary against its tokens) stay with the model that is built from it.

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/recompute.h"
#include "modelpar/tp/parallel_mlp.h"

namespace psar {

struct DataOptions {
  std::string dataset;  // data.dataset
  std::string path;     // data.path
  int64_t synthetic_samples = 0, synthetic_features = 0, synthetic_classes = 0;
  int64_t train_limit = 0, test_limit = 0;  // data.train_limit, data.test_limit
  std::vector<int64_t> zipf_ids;            // data.zipf_ids ([] = model.tables)
  double zipf_skew = 0;
};

// The options each model is built with (workloads/gpt.h, cnn.h,
// synthetic_stages.h): workload_options fills them from the config, the
// model fills in what only the data says (the vocabulary, the classes).
struct GptOptions {
  int64_t vocab = 0;  // model.vocab (0: from the data)
  int64_t seq_len = 32, layers = 2, d_model = 64, heads = 4;
  float dropout = 0.0f;  // embeddings, attention probabilities, both residual branches
  float init_std = 0.02f;
  MlpSplit split = MlpSplit::kColumnRow;
  uint64_t seed = 1;  // train.seed: the shards' initial values and the dropout masks
  bool sequence_parallel = false;         // parallel.sequence_parallel
  Recompute recompute = Recompute::kNone;  // train.recompute
};

struct CnnOptions {
  int64_t channels = 1, height = 28, width = 28;  // model.image
  std::vector<int64_t> conv = {32, 64};           // model.conv: output channels per stage
  int64_t kernel = 3, stride = 1, padding = 1;    // model.kernel, model.stride, model.padding
  int64_t pool = 2;                               // model.pool (≤ 1: no pooling)
  std::vector<int64_t> hidden = {256};            // model.hidden: FC hidden widths
  int64_t classes = 10;
  bool hybrid = false;  // parallel.hybrid
  bool fc_replicated = false;  // parallel.hybrid_fc: replicated (every rank the whole FC)
  uint64_t seed = 1;    // train.seed, for the TP shards' serial values
};

struct SyntheticStagesOptions {
  int layers = 2;
  double forward_s = 1e-3;         // per layer and micro-batch
  double backward_s = 1e-3;        // input gradient
  double weight_grad_s = 1e-3;     // weight gradient
  int64_t activation_bytes = 64 << 10;  // rounded up to whole floats
};

struct WorkloadOptions {
  std::string type;  // model.type
  uint64_t seed = 0;  // train.seed
  // mlp, dlrm: hidden widths and the activation (the cnn's FC widths: cnn.hidden).
  std::vector<int64_t> hidden;
  bool gelu = false;  // model.activation: gelu
  GptOptions gpt;
  CnnOptions cnn;
  std::vector<int64_t> image;  // model.image: [channels, height, width] (the cnn checks it)
  // dlrm.
  std::vector<int64_t> tables;  // model.tables: ids per table
  int64_t embedding_dim = 0;
  SyntheticStagesOptions synthetic;
  DataOptions data;
};

// The schema checked every key's type and choices; what the keys mean
// together is each model's to check.
WorkloadOptions workload_options(const Config& config);

}  // namespace psar
