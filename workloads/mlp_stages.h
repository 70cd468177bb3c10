#pragma once
// The MLP classifier (mlp.h) cut into pipeline stages. Layer l is
// Linear(widths[l] → widths[l+1]) followed by the activation, except the last
// (the classifier), whose logits feed softmax cross-entropy on the last
// virtual stage: L = len(model.hidden) + 1 layers, parameters fc{l}.weight
// and fc{l}.bias as in the serial Mlp. A chunk passes the activated output
// of its top layer on, [b, widths[last + 1]], and gets back its gradient; it
// applies its own activation's backward.

#include <memory>
#include <vector>

#include "workloads/mlp.h"
#include "workloads/pipeline_stages.h"

namespace psar {

class MlpStages final : public PipelineStages {
 public:
  MlpStages(MlpOptions options, StageLayout layout);

  std::string name() const override { return "mlp"; }
  void declare(ParamStore& store, int chunk) override;
  void bind(ParamStore& store) override;
  void set_batch(const Batch& batch) override;
  double batch_loss() const override { return loss_; }

  int64_t boundary_numel(int vstage) const override;
  void forward(int chunk, int microbatch, std::span<const float> x, std::span<float> y) override;
  void backward_input(int chunk, int microbatch, std::span<const float> dy,
                      std::span<float> dx) override;
  void backward_weight(int chunk, int microbatch) override;
  int live_activations() const override { return live_; }
  int64_t live_activation_bytes() const override { return live_bytes_; }
  int64_t stash_bytes(int chunk) const override;

  bool evaluates() const override { return true; }
  int64_t eval_numel(int vstage, int64_t rows) const override;
  EvalStats eval_forward(int chunk, const Batch& batch, std::span<const float> x,
                         std::span<float> y) override;

 private:
  struct Layer {
    int index = 0;        // l in the serial model
    int64_t in = 0, out = 0;
    bool classifier = false;  // the last layer: no activation, logits
    int weight = -1, bias = -1;
  };
  // One micro-batch's stash on one chunk, from its forward to its weight
  // gradient. Per layer j of the chunk, [b, out_j] each: the pre-activation,
  // the activation (the logits for the classifier) and, after the input
  // gradient, the gradient of the pre-activation. x: the chunk's input [b, in_0].
  struct Stash {
    std::vector<float> x;
    std::vector<std::vector<float>> pre, act, dpre;
  };

  // Layers j of `chunk` on `rows` rows of x into pre/act (sized by the caller).
  void run_layers(int chunk, const float* x, int64_t rows, std::vector<std::vector<float>>& pre,
                  std::vector<std::vector<float>>& act);
  Stash& slot(int chunk, int microbatch);
  bool last_vstage(int chunk) const { return layout_.vstage(chunk) == layout_.vstages() - 1; }
  bool first_vstage(int chunk) const { return layout_.vstage(chunk) == 0; }

  MlpOptions o_;
  StageLayout layout_;
  std::vector<int64_t> widths_;                // inputs, hidden..., classes
  std::vector<std::vector<Layer>> chunks_;     // [chunk] -> its layers, bottom up
  ParamStore* store_ = nullptr;
  const Batch* batch_ = nullptr;
  std::vector<Stash> stash_;                   // [chunk · m + i]
  std::vector<std::vector<float>> eval_pre_, eval_act_;
  double loss_ = 0;
  int live_ = 0;
  int64_t live_bytes_ = 0;
};

std::unique_ptr<PipelineStages> make_mlp_stages(const Config& config, const Dataset& data,
                                                const StageLayout& layout);
int mlp_layers(const Config& config, const Dataset& data);

}  // namespace psar
