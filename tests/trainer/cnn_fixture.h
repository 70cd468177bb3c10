#pragma once
// The CNN of the equivalence tests (in-process and under mpirun): 8×8
// one-channel images of 4 synthetic classes, conv 1→4 and 4→8 (3×3,
// padding 1, each with a 2×2 pool: 8×8 → 4×4 → 2×2, F = 32 features), FC
// 32→8→4 (column-parallel, row-parallel under hybrid), a batch of 16, 10
// SGD steps. hybrid = true: Krizhevsky's scheme over all the ranks.

#include <string>
#include <vector>

#include "core/config.h"
#include "trainer/schema.h"

namespace psar::testing {

// The closed forms of this network: conv parameters 1·9·4 + 4 + 4·9·8 + 8,
// FC 32·8 + 8 + 8·4 + 4; F = 8·2·2.
constexpr int64_t kCnnBatch = 16, kCnnFeatures = 32, kCnnClasses = 4;
constexpr int64_t kCnnConvParams = 1 * 9 * 4 + 4 + 4 * 9 * 8 + 8;
constexpr int64_t kCnnFcParams = 32 * 8 + 8 + 8 * 4 + 4;

inline Config cnn_config(bool hybrid, const std::vector<std::string>& overrides = {}) {
  return Config::load_string(
      std::string("model: {type: cnn, image: [1, 8, 8], conv: [4, 8], kernel: 3, stride: 1, "
                  "padding: 1, pool: 2, hidden: [8]}\n"
                  "data: {dataset: synthetic, synthetic_samples: 320, synthetic_features: 64, "
                  "synthetic_classes: 4, test_limit: 64}\n"
                  "optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n"
                  "train: {steps: 10, batch_size: 16, seed: 5, log_every: 1000, eval_every: 0}\n"
                  "sync: {backend: ring, timeout: 30s}\n"
                  "parallel: {hybrid: ") +
          (hybrid ? "true" : "false") + ", tp_allreduce: ring}\n",
      config_schema(), overrides);
}

}  // namespace psar::testing
