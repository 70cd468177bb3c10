#pragma once
// MLP classifier: Linear → act → … → Linear → softmax cross-entropy.

#include <vector>

#include "workloads/model.h"

namespace psar {

struct MlpOptions {
  int64_t inputs = 784;
  std::vector<int64_t> hidden = {256, 128};
  int64_t classes = 10;
  bool gelu = false;  // relu otherwise
};

class Mlp final : public Model {
 public:
  explicit Mlp(MlpOptions options);
  std::string name() const override { return "mlp"; }
  void declare(ParamStore& store) override;
  void bind(ParamStore& store) override;
  double forward_backward(const Batch& batch, float grad_scale) override;
  EvalStats evaluate(const Batch& batch) override;

 private:
  // Runs the layers on batch.inputs; leaves logits in acts_.back().
  void forward(const Batch& batch);

  MlpOptions o_;
  std::vector<int64_t> widths_;  // inputs, hidden..., classes
  std::vector<int> weight_ids_, bias_ids_;
  ParamStore* store_ = nullptr;
  // Per layer l: pre_[l] = h_{l-1}·W_l + b_l: [B, widths_[l+1]]; acts_[l] = act(pre_[l])
  // (for the last layer acts_ holds the logits).
  std::vector<Tensor> pre_, acts_;
  Tensor dcur_, dprev_;
};

std::unique_ptr<Model> make_mlp(const Config& config, const Dataset& data, const ModelContext&);

}  // namespace psar
