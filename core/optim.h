#pragma once
// Optimizers over flat spans. The same code runs in the trainer (over the whole
// parameter arena) and in a parameter-server shard (over its key range): all
// state is elementwise, so updating a slice equals slicing the full update.

#include <cstdint>
#include <memory>
#include <span>
#include <string>

namespace psar {

struct OptimizerOptions {
  std::string type = "sgd";  // sgd | adam
  float lr = 0.1f;
  float momentum = 0.0f;     // sgd
  float weight_decay = 0.0f; // L2 added to the gradient (sgd) / decoupled (adam: AdamW)
  float beta1 = 0.9f;        // adam
  float beta2 = 0.999f;      // adam
  float eps = 1e-8f;         // adam
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // params -= update(grads); both spans cover the `size` floats given at creation.
  virtual void step(std::span<float> params, std::span<const float> grads) = 0;
  int64_t steps() const { return steps_; }

 protected:
  int64_t steps_ = 0;
};

// Creates the optimizer named by options.type for `size` parameters.
// Throws ConfigError for an unknown type.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerOptions& options, int64_t size);

}  // namespace psar
