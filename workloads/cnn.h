#pragma once
// Convolutional classifier (model.type: cnn, docs/cnn.md): S convolution
// stages, each Conv2d(K×K, model.stride, model.padding) → ReLU → MaxPool
// (model.pool × model.pool, none when model.pool ≤ 1), then flatten (a
// reshape: NCHW rows are already [C·H·W] vectors), then fully connected
// layers over model.hidden widths to the classes, ReLU between them, softmax
// cross-entropy on the logits. Parameters conv{s}.weight [C_out, C_in·K·K],
// conv{s}.bias [C_out], fc{k}.weight [in, out], fc{k}.bias [out]; the conv
// parameters come first in the arena.
//
// The whole network is one pipeline stage (parallel.pp = 1). Two ways to run
// it on n ranks:
//   - plain data parallelism (parallel.tp = 1): every rank runs the whole
//     network on its slice of the batch; the trainer all-reduces every
//     gradient;
//   - parallel.hybrid (Krizhevsky 2014, "one weird trick"): the n ranks are
//     one tensor-parallel group (ModelContext::tp, t = n) that also splits
//     the batch. Each rank runs the convolutions on its b/n rows of every
//     micro-batch (data parallel), the last stage's features are all-gathered
//     so that every rank holds the micro-batch's [b, F], and the fully
//     connected layers run tensor-parallel on all b rows: column-parallel,
//     row-parallel, column, ... (Megatron's f/g, modelpar/tp); an odd last
//     layer is replicated. Backward mirrors it: f all-reduces the feature
//     gradient [b, F] of the first (column-parallel) layer and each rank
//     takes its rows back into its convolutions. The conv gradients then
//     differ per rank — they are data parallel over the group, all-reduced by
//     the trainer (hybrid_data_parallel_floats); the FC shards' gradients are
//     whole on their rank. parallel.hybrid_fc: replicated keeps the FC layers
//     whole on every rank instead (each runs them on all b rows: no f/g,
//     the same gradients everywhere), the comparison point between plain
//     data parallelism and the tensor-parallel FC.
//
// The conv gradient of rank r is made that of its slice's mean loss (the
// feature gradient it takes back is scaled by n), so that averaging over the
// group — what every data-parallel sync does — gives the batch's gradient.

#include <memory>
#include <vector>

#include "core/ops.h"
#include "modelpar/tp/column_parallel_linear.h"
#include "modelpar/tp/group.h"
#include "modelpar/tp/row_parallel_linear.h"
#include "modelpar/tp/shard.h"
#include "workloads/model.h"
#include "workloads/workload_options.h"

namespace psar {

// Per layer kind, what the notes' argument weighs (docs/cnn.md).
struct CnnCosts {
  int64_t conv_params = 0, fc_params = 0;
  int64_t conv_macs = 0, fc_macs = 0;  // forward multiply-adds per sample
  int64_t features = 0;                // F, the flattened last conv stage
};

class Cnn final : public Model {
 public:
  Cnn(CnnOptions options, const ModelContext& context);
  ~Cnn() override;

  std::string name() const override { return "cnn"; }
  void declare(ParamStore& store, int chunk) override;
  void bind(ParamStore& store) override;
  void set_batch(const Batch& batch) override;
  double batch_loss() const override { return loss_; }
  const ShardedParams* sharded_params() const override { return params_.get(); }

  int64_t boundary_numel(int) const override { return 0; }
  std::unique_ptr<pp::Activations> make_activations(int chunk) const override;
  void forward(int chunk, int microbatch, pp::Activations& a, std::span<const float> x,
               std::span<float> y) override;
  void backward_input(int chunk, int microbatch, pp::Activations& a, std::span<const float> dy,
                      std::span<float> dx) override;
  void backward_weight(int chunk, int microbatch, pp::Activations& a) override;
  int64_t activation_bytes(int chunk) const override;

  bool evaluates() const override { return true; }
  int64_t eval_numel(int, int64_t) const override { return 0; }
  EvalStats eval_forward(int chunk, const Batch& batch, std::span<const float> x,
                         std::span<float> y) override;

  int64_t tp_allreduce_floats(int chunk) const override;
  int64_t tp_all_gather_floats(int chunk) const override;
  int64_t hybrid_data_parallel_floats() const override;

  std::string summary() const override;
  const CnnCosts& costs() const { return costs_; }

 private:
  struct Stage {
    ops::Conv2dShape conv;
    int64_t pool = 1;           // ≤ 1: none
    int64_t out_h = 0, out_w = 0;  // after the pool
    int weight = -1, bias = -1;
    int64_t conv_numel() const { return conv.C_out * conv.col_cols(); }  // per image
    int64_t out_numel() const { return conv.C_out * out_h * out_w; }
  };
  enum class FcKind { kColumn, kRow, kReplicated };
  struct Fc {
    FcKind kind = FcKind::kReplicated;
    int64_t in = 0, out = 0;
    bool relu = true;  // not the classifier
    std::unique_ptr<ParallelLinear> tp;  // column or row
    int weight = -1, bias = -1;          // replicated
    // Columns of its input and output on this rank.
    int64_t in_local = 0, out_local = 0;
  };
  struct Stash;

  // Convolutions of `rows` images x [rows, C·H·W] into s's conv buffers.
  void conv_forward(Stash& s, const float* x, int64_t rows);
  // FC layers of `rows` rows from s.feat; the logits in s.fc_act.back().
  void fc_forward(Stash& s, int64_t rows);
  // The hybrid's all-gather of the features [b, F] over the workers (through
  // host memory when they live on a CUDA device).
  void all_gather_features(Buffer& feat);
  int rank() const { return tp_->rank(); }
  int64_t conv_rows(int64_t b) const { return o_.hybrid ? b / tp_->size() : b; }

  CnnOptions o_;
  StageLayout layout_;
  TpGroup serial_tp_;
  TpGroup* tp_;
  std::vector<Stage> stages_;
  std::vector<Fc> fcs_;
  CnnCosts costs_;
  std::unique_ptr<ShardedParams> params_;
  ParamStore* store_ = nullptr;
  const Batch* batch_ = nullptr;
  Device device_ = Device::kCpu;    // the parameter store's (train.device)
  DeviceBatch staged_;              // batch_ on device_
  DeviceBatch eval_staged_;         // the evaluation batch on device_
  Buffer cols_;                     // im2col scratch of the largest stage
  std::vector<float> gather_host_;  // the features' all-gather, staged on a CUDA device
  double loss_ = 0;
};

std::unique_ptr<Model> make_cnn(const WorkloadOptions& options, const Dataset& data,
                                const ModelContext& context);
int cnn_layers(const WorkloadOptions& options, const Dataset& data);

}  // namespace psar
