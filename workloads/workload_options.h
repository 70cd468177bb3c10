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

struct WorkloadOptions {
  std::string type;  // model.type
  uint64_t seed = 0;  // train.seed
  // mlp, dlrm, cnn: hidden widths; mlp, dlrm: the activation.
  std::vector<int64_t> hidden;
  bool gelu = false;  // model.activation: gelu
  // gpt (and synthetic_stages: layers).
  int64_t layers = 0, d_model = 0, heads = 0, seq_len = 0;
  int64_t vocab = 0;  // 0 = from the data
  float dropout = 0, init_std = 0;
  MlpSplit split = MlpSplit::kColumnRow;  // parallel.tp_split
  bool sequence_parallel = false;
  Recompute recompute = Recompute::kNone;  // train.recompute
  // cnn.
  std::vector<int64_t> image, conv;  // model.image: [channels, height, width]
  int64_t kernel = 0, stride = 0, padding = 0, pool = 0;
  bool hybrid = false;                // parallel.hybrid
  bool fc_replicated = false;         // parallel.hybrid_fc: replicated
  // dlrm.
  std::vector<int64_t> tables;  // model.tables: ids per table
  int64_t embedding_dim = 0;
  // synthetic_stages: per layer and micro-batch.
  double forward_s = 0, backward_s = 0, weight_grad_s = 0;
  int64_t activation_bytes = 0;
  DataOptions data;
};

// The schema checked every key's type and choices; what the keys mean
// together is each model's to check.
WorkloadOptions workload_options(const Config& config);

}  // namespace psar
