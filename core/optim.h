#pragma once
// Optimizers over flat spans. The same code runs in the trainer (over the whole
// parameter arena) and in a parameter-server shard (over its key range): all
// state is elementwise, so updating a slice equals slicing the full update.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/device.h"

namespace psar {

struct OptimizerOptions {
  std::string type = "sgd";  // sgd | adam
  float lr = 0.1f;
  float momentum = 0.0f;     // sgd
  float weight_decay = 0.0f; // L2 added to the gradient (sgd) / decoupled (adam: AdamW)
  float beta1 = 0.9f;        // adam
  float beta2 = 0.999f;      // adam
  float eps = 1e-8f;         // adam
  // Learning-rate schedule over the optimizer's own step count, so that every
  // holder of the same options (a trainer rank, a parameter-server shard)
  // applies the same rate at the same step.
  std::string schedule = "constant";  // constant | cosine
  int64_t warmup_steps = 0;           // linear warm-up from 0 to lr
  int64_t total_steps = 0;            // cosine: decays to 0 at this step
};

class Config;  // core/config.h
// The optimizer.* keys (the cosine schedule's total_steps comes from the
// run's length, not from a key).
OptimizerOptions optimizer_options(const Config& config);

// The learning rate of step `step` (0-based).
float scheduled_lr(const OptimizerOptions& options, int64_t step);

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // params -= update(grads); both spans cover the `size` floats given at creation.
  void step(std::span<float> params, std::span<const float> grads);
  // A step taken in slices (a sharded optimizer stepping each bucket's piece
  // as soon as its gradient is summed, sync/zero_sync.h): step_slice()
  // updates params and grads against state elements [offset, offset +
  // params.size()) at the rate and bias correction of the step being taken;
  // end_step() then counts the step. Slices that cover the state once give
  // the bits of one step() (every update is elementwise).
  virtual void step_slice(int64_t offset, std::span<float> params, std::span<const float> grads) = 0;
  void end_step() { ++steps_; }
  int64_t steps() const { return steps_; }

  // What a checkpoint saves and restores: the step count (it sets the
  // learning-rate schedule and Adam's bias correction) and the per-element
  // state buffers, each as long as the parameters (SGD with momentum: the
  // velocity; Adam: m, then v; plain SGD: none).
  // On a CUDA optimizer the spans are device memory.
  virtual std::vector<std::span<float>> state() = 0;
  // Where the state lives and step() expects its spans (make_optimizer's device).
  virtual Device device() const = 0;
  void set_steps(int64_t steps) { steps_ = steps; }

 protected:
  explicit Optimizer(const OptimizerOptions& options) : options_(options) {}
  // The rate for the step being taken now.
  float lr() const { return scheduled_lr(options_, steps_); }
  // The state elements this optimizer was created for.
  virtual int64_t size() const = 0;

  OptimizerOptions options_;
  int64_t steps_ = 0;
};

// Creates the optimizer named by options.type for `size` parameters, its
// state on `device`. Throws ConfigError for an unknown type.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& options, int64_t size,
                                          Device device = Device::kCpu);
// What optimizer.type and optimizer.schedule accept.
std::vector<std::string> optimizer_names();
std::vector<std::string> lr_schedule_names();

}  // namespace psar
