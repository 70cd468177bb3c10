#pragma once
// 3D-parallel training configurations shared by the in-process and the MPI
// tests: a grid (p, t, d), a schedule with v chunks, scatter/gather on or
// off, and the workloads sized so that every grid with p·t·d ≤ 8 can cut them.

#include <gtest/gtest.h>

#include <mutex>
#include <ostream>
#include <string>
#include <vector>

#include "comm/inproc_comm.h"
#include "core/config.h"
#include "tests/trainer/train_fixture.h"
#include "trainer/schema.h"
#include "trainer/trainer.h"

namespace psar::testing {

struct Grid3d {
  int p = 1, t = 1, d = 1;
  std::string schedule = "1f1b";
  int v = 1;
  bool sg = false;  // parallel.scatter_gather
  int m() const { return 2 * p; }  // micro-batches: 2p (m ≥ p, m % p = 0 for interleaved)
  int world() const { return p * t * d; }
};

inline std::string describe(const Grid3d& g) {
  return "(p, t, d) = (" + std::to_string(g.p) + ", " + std::to_string(g.t) + ", " +
         std::to_string(g.d) + ") " + g.schedule + " v=" + std::to_string(g.v) +
         (g.sg ? " scatter/gather" : "");
}
inline void PrintTo(const Grid3d& g, std::ostream* os) { *os << describe(g); }

inline std::string parallel_yaml(const Grid3d& g, int m) {
  return "parallel: {pp: " + std::to_string(g.p) + ", tp: " + std::to_string(g.t) +
         ", microbatches: " + std::to_string(m) + ", schedule: " + g.schedule +
         ", chunks: " + std::to_string(g.v) + ", scatter_gather: " + (g.sg ? "true" : "false") +
         ", tp_allreduce: ring}\n";
}

// An 8-block GPT (d_model 32, 8 heads, context 8, 16 tokens): heads and
// d_model divide by every t ≤ 8, 8 blocks by every p·v ≤ 8; a 16-sequence
// global batch splits into d·m for every grid; dropout 0, so every grid
// computes the serial model's numbers up to float summation order. 10 steps.
// The serial model: Grid3d{} with m = 1.
inline Config gpt_3d_config(const Grid3d& g, const std::vector<std::string>& overrides = {}) {
  const int m = g.world() == 1 && g.schedule == "1f1b" ? 1 : g.m();
  return Config::load_string(
      "model: {type: gpt, layers: 8, d_model: 32, heads: 8, seq_len: 8, vocab: 16, "
      "init_std: 0.05, dropout: 0.0}\n"
      "data: {dataset: synthetic_tokens, synthetic_samples: 160, test_limit: 16}\n"
      "optimizer: {type: sgd, lr: 0.2, momentum: 0.9}\n"
      "train: {steps: 10, batch_size: 16, seed: 3, log_every: 1000, eval_every: 0}\n"
      "sync: {backend: ring, timeout: 30s}\n" +
          parallel_yaml(g, m),
      config_schema(), overrides);
}

// The 8-layer MLP of the pipeline tests (t = 1 only): a 48-sample batch, m = p.
inline Config mlp_3d_config(const Grid3d& g, const std::vector<std::string>& overrides = {}) {
  return Config::load_string(
      "model: {type: mlp, hidden: [16, 16, 12, 16, 16, 12, 16]}\n"
      "data: {dataset: synthetic, synthetic_samples: 960, synthetic_features: 20, "
      "synthetic_classes: 5, test_limit: 200}\n"
      "optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n"
      "train: {steps: 10, batch_size: 48, seed: 3, log_every: 1000, eval_every: 0}\n"
      "sync: {backend: ring, timeout: 30s}\n" +
          parallel_yaml(g, g.p),
      config_schema(), overrides);
}

// Trains on `ranks` in-process threads; every rank must return the same whole model.
inline std::vector<float> train_grid(int ranks, const Config& cfg, const std::string& out = "") {
  return train_result(ranks, cfg, out).params;
}

}  // namespace psar::testing
