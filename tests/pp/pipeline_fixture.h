#pragma once
// Pipeline training configurations shared by the in-process and MPI tests.

#include <ostream>
#include <string>
#include <vector>

#include "core/config.h"
#include "trainer/schema.h"

namespace psar::testing {

struct PipelineCase {
  std::string schedule;
  int p = 2, m = 2, v = 1, d = 1;
};

// An 8-layer MLP (Linear+ReLU ×7, classifier) on seeded synthetic data, 10
// steps of a 48-sample global batch: 48 splits into d·m for every d·m of the
// tests (2, 4, 6, 8, 12, 16, 24). pp = 1 is the serial model.
inline Config pipeline_mlp_config(const PipelineCase& c,
                                  const std::vector<std::string>& overrides = {}) {
  return Config::load_string(
      "model: {type: mlp, hidden: [16, 16, 12, 16, 16, 12, 16]}\n"
      "data: {dataset: synthetic, synthetic_samples: 960, synthetic_features: 20, "
      "synthetic_classes: 5, test_limit: 200}\n"
      "optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n"
      "train: {steps: 10, batch_size: 48, seed: 3, log_every: 1000, eval_every: 0}\n"
      "sync: {backend: ring, timeout: 20s}\n"
      "parallel: {pp: " + std::to_string(c.p) + ", microbatches: " + std::to_string(c.m) +
          ", schedule: " + (c.schedule.empty() ? "1f1b" : c.schedule) +
          ", chunks: " + std::to_string(c.v) + "}\n",
      config_schema(), overrides);
}

// An 8-block GPT (d_model 16, 2 heads, context 8, 16 tokens) on seeded
// synthetic tokens, 6 steps of an 8-sequence global batch (8 splits into
// d·m for m ∈ {2, 4, 8} and d·m = 2·4), dropout 0: the pipeline then computes
// the serial model's numbers up to float summation order. 8 blocks cut over
// p·v ≤ 8 virtual stages. pp = 1 is the serial GPT.
inline Config pipeline_gpt_config(const PipelineCase& c,
                                  const std::vector<std::string>& overrides = {}) {
  return Config::load_string(
      "model: {type: gpt, layers: 8, d_model: 16, heads: 2, seq_len: 8, vocab: 16, "
      "init_std: 0.05, dropout: 0.0}\n"
      "data: {dataset: synthetic_tokens, synthetic_samples: 96, test_limit: 16}\n"
      "optimizer: {type: sgd, lr: 0.2, momentum: 0.9}\n"
      "train: {steps: 6, batch_size: 8, seed: 3, log_every: 1000, eval_every: 0}\n"
      "sync: {backend: ring, timeout: 20s}\n"
      "parallel: {pp: " + std::to_string(c.p) + ", microbatches: " + std::to_string(c.m) +
          ", schedule: " + (c.schedule.empty() ? "1f1b" : c.schedule) +
          ", chunks: " + std::to_string(c.v) + "}\n",
      config_schema(), overrides);
}

inline std::string describe(const PipelineCase& c) {
  return c.schedule + " p=" + std::to_string(c.p) + " m=" + std::to_string(c.m) +
         " v=" + std::to_string(c.v) + " d=" + std::to_string(c.d);
}

// How gtest prints a case in a failure message.
inline void PrintTo(const PipelineCase& c, std::ostream* os) { *os << describe(c); }

}  // namespace psar::testing
