#pragma once
// The one training loop. Every rank of `world` calls train(); the sync backend
// decides which ranks are workers (all of them, except dedicated PS servers).
//
// Each step: the global batch (train.batch_size) is cut into equal contiguous
// slices, one per data-parallel rank; each rank runs forward/backward on its
// slice (mean loss over the slice), then GradientSync::step averages the
// gradients over the ranks and updates the parameters. With the same seed the
// result equals one rank training on the whole batch, up to float rounding.

#include <string>
#include <vector>

#include "comm/comm.h"
#include "core/config.h"

namespace psar {

struct TrainOptions {
  std::string out_dir;   // "" = write no files
  bool verbose = false;  // rank 0 prints progress lines
};

struct TrainResult {
  bool server = false;           // this rank was a dedicated PS server
  int64_t steps = 0;
  double epochs = 0;             // passes over the training set completed
  std::vector<float> params;     // final parameters (worker ranks)
  std::vector<double> losses;    // this rank's mean loss per step
  double final_loss = 0;         // global-batch mean loss of the last step
  double test_accuracy = -1;     // last evaluation (-1 = none)
  double test_loss = -1;
  double wall_s = 0;
  double samples_per_s = 0;
  int workers = 0;               // data-parallel world size
};

TrainResult train(Comm& world, const Config& config, const TrainOptions& options = {});

}  // namespace psar
