#pragma once
// The timed synthetic workload (`model.type: synthetic_stages`): a pipeline
// of L identical layers whose compute is a wait — model.forward_time,
// model.backward_time (input gradient) and model.weight_grad_time per layer
// and micro-batch — while real tensors of model.activation_bytes travel
// between the stages. A chunk of k layers waits k·t_f in its forward, k·t_b
// in its input gradient, k·t_w in its weight gradient (k·(t_b + t_w) fused).
// It sleeps rather than spins (all but the last 100 µs of each action, which
// it spins to end on time), so eight ranks on two cores measure the
// schedule, not CPU contention.
//
// The tensors carry a check: element 0 of micro-batch i's activation after
// layer l holds i + l, and of its gradient −(i + 1) − (L − l); every chunk
// verifies what it received, so a transfer delivered to the wrong action is
// a DataError, not a silently wrong measurement. Each layer stashes one
// activation (activation_bytes) from its forward to its weight gradient, in
// the Activations the executor owns, and owns one parameter,
// layer{l}.weight [1], whose gradient grows by 1/m per weight-gradient
// action: 1 per batch when every micro-batch ran. No tensor-parallel layers.

#include <memory>
#include <vector>

#include "workloads/model.h"
#include "workloads/workload_options.h"

namespace psar {

class SyntheticStages final : public Model {
 public:
  SyntheticStages(SyntheticStagesOptions options, const ModelContext& context);

  std::string name() const override { return "synthetic_stages"; }
  void declare(ParamStore& store, int chunk) override;
  void bind(ParamStore& store) override { store_ = &store; }
  void set_batch(const Batch&) override {}
  double batch_loss() const override { return 0; }

  int64_t boundary_numel(int) const override { return numel_; }
  std::unique_ptr<pp::Activations> make_activations(int chunk) const override;
  void forward(int chunk, int microbatch, pp::Activations& a, std::span<const float> x,
               std::span<float> y) override;
  void backward_input(int chunk, int microbatch, pp::Activations& a, std::span<const float> dy,
                      std::span<float> dx) override;
  void backward_weight(int chunk, int microbatch, pp::Activations& a) override;
  void backward(int chunk, int microbatch, pp::Activations& a, std::span<const float> dy,
                std::span<float> dx) override;
  int64_t activation_bytes(int chunk) const override;

 private:
  struct Stash;
  int layers_of(int chunk) const;
  // The input-gradient work, without the wait.
  void input_gradient(int chunk, int microbatch, const Stash& s, std::span<const float> dy,
                      std::span<float> dx);
  void weight_gradient(int chunk);

  SyntheticStagesOptions o_;
  StageLayout layout_;
  int64_t numel_ = 0;
  std::vector<int> params_;  // [chunk] -> index of its first layer's parameter
  ParamStore* store_ = nullptr;
};

std::unique_ptr<Model> make_synthetic_stages(const WorkloadOptions& options, const Dataset& data,
                                             const ModelContext& context);
int synthetic_layers(const WorkloadOptions& options, const Dataset& data);

}  // namespace psar
