#pragma once
// MLP classifier, one definition for the serial model and every pipeline cut
// (model.h): layer l is Linear(widths[l] → widths[l+1]) followed by the
// activation, except the last (the classifier), whose logits feed softmax
// cross-entropy on the back: L = len(model.hidden) + 1 layers, parameters
// fc{l}.weight [in, out] and fc{l}.bias [out]. The front is reading the
// micro-batch's features. A chunk passes the activated output of its top
// layer on, [b, widths[last + 1]], gets back its gradient, and applies its
// own activation's backward. No tensor-parallel layers: parallel.tp > 1 is a
// ConfigError.

#include <memory>
#include <vector>

#include "workloads/model.h"

namespace psar {

struct MlpOptions {
  int64_t inputs = 784;
  std::vector<int64_t> hidden = {256, 128};
  int64_t classes = 10;
  bool gelu = false;  // relu otherwise
  // The front also computes the gradient of its input (dx): for a model
  // that feeds the MLP learned inputs (dlrm.h).
  bool input_gradient = false;
};

class Mlp final : public Model {
 public:
  Mlp(MlpOptions options, const ModelContext& context);

  std::string name() const override { return "mlp"; }
  void declare(ParamStore& store, int chunk) override;
  // Activations live where the store's arenas do (train.device).
  void bind(ParamStore& store) override {
    store_ = &store;
    device_ = store.device();
  }
  void set_batch(const Batch& batch) override;
  double batch_loss() const override { return loss_; }

  int64_t boundary_numel(int vstage) const override;
  std::unique_ptr<pp::Activations> make_activations(int chunk) const override;
  void forward(int chunk, int microbatch, pp::Activations& a, std::span<const float> x,
               std::span<float> y) override;
  void backward_input(int chunk, int microbatch, pp::Activations& a, std::span<const float> dy,
                      std::span<float> dx) override;
  void backward_weight(int chunk, int microbatch, pp::Activations& a) override;
  // Fused: each layer's weight gradient right after its input gradient.
  void backward(int chunk, int microbatch, pp::Activations& a, std::span<const float> dy,
                std::span<float> dx) override;
  int64_t activation_bytes(int chunk) const override;

  bool evaluates() const override { return true; }
  int64_t eval_numel(int vstage, int64_t rows) const override;
  EvalStats eval_forward(int chunk, const Batch& batch, std::span<const float> x,
                         std::span<float> y) override;
  // One range per layer: its weight and bias.
  std::vector<std::pair<int64_t, int64_t>> layer_ranges() const override;

 private:
  struct Layer {
    int index = 0;  // l in the model
    int64_t in = 0, out = 0;
    bool classifier = false;  // the last layer: no activation, logits
    int weight = -1, bias = -1;
  };
  struct Stash;
  // The backward's pieces (mlp.cc).
  void top_gradient(int chunk, Stash& s, std::span<const float> dy);
  void layer_input(int chunk, size_t j, Stash& s, std::span<float> dx);
  void layer_weight(int chunk, size_t j, const Stash& s);
  // Arena floats of a layer's weight and bias (side by side).
  std::pair<int64_t, int64_t> range(const Layer& L) const;

  // Layers of `chunk` on `rows` rows of x into pre/act (sized by the caller).
  void run_layers(int chunk, const float* x, int64_t rows, std::vector<Tensor>& pre,
                  std::vector<Tensor>& act);

  MlpOptions o_;
  StageLayout layout_;
  std::vector<int64_t> widths_;             // inputs, hidden..., classes
  std::vector<std::vector<Layer>> chunks_;  // [chunk] -> its layers, bottom up
  ParamStore* store_ = nullptr;
  Device device_ = Device::kCpu;
  const Batch* batch_ = nullptr;
  DeviceBatch staged_;  // batch_ on device_
  DeviceBatch eval_staged_;
  double loss_ = 0;
};

std::unique_ptr<Model> make_mlp(const WorkloadOptions& options, const Dataset& data,
                                const ModelContext& context);
int mlp_layers(const WorkloadOptions& options, const Dataset& data);

}  // namespace psar
