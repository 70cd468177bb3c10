#pragma once
// Models cut into pipeline stages: what one pipeline rank holds of a model.
//
// A PipelineStages is the executor's StageModel (modelpar/pp/stage_model.h:
// forward / backward_input / backward_weight of micro-batch i on chunk c,
// fixed activation shapes) plus what the trainer needs around it: the
// parameters of this rank's chunks, registered under the serial model's
// names so that they start from the serial model's values (ParamStore
// initializes by name), the batch of the step, the loss, and optionally a
// forward-only pass for evaluation.
//
// Layers: the model is a sequence of L layers cut over the p·v virtual
// stages by partition.h (evenly, or parallel.stage_layers). Whatever sits
// before the first layer (reading the micro-batch: the MLP's inputs) belongs
// to virtual stage 0, whatever sits after the last (the classifier's loss)
// to virtual stage p·v − 1; the executor's measured costs, and the simulator
// replaying them, see that extra work on those stages.
//
// Tied parameters: a parameter the serial model uses on two virtual stages
// that sit on different ranks (the GPT's token embedding, also its LM head)
// is held by both ranks, one of them holding a copy under the same name; the
// trainer adds the two gradients on both ranks before the optimizer step,
// so the copies stay equal, and leaves the copy out of the gathered model.
//
// Models: `mlp` (mlp_stages.cc), `gpt` (gpt_stages.cc) and `synthetic_stages`
// (synthetic_stages.cc), one line each in pipeline_registry.cc.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "core/param_store.h"
#include "modelpar/pp/stage_model.h"
#include "workloads/dataset.h"
#include "workloads/model.h"

namespace psar {

// Where a stage model sits in the pipeline.
struct StageLayout {
  int stages = 1;               // p
  int chunks = 1;               // v
  int stage = 0;                // s, this rank's stage
  int microbatches = 1;         // m
  int64_t microbatch_rows = 1;  // b, samples per micro-batch
  std::vector<int> layers;      // layers per virtual stage (p·v entries, partition.h)

  int vstages() const { return stages * chunks; }
  int vstage(int chunk) const { return chunk * stages + stage; }
  // [first, last) model layers of virtual stage u.
  std::pair<int, int> layer_range(int vstage) const;
};

// One rank's side of a tied parameter.
struct TiedParam {
  int param = -1;     // index in this rank's ParamStore
  int peer = -1;      // the pipeline stage holding the other copy
  bool copy = false;  // this side is the copy: not part of the gathered (serial) model
};

class PipelineStages : public pp::StageModel {
 public:
  virtual std::string name() const = 0;
  // Registers the parameters of `chunk` under the serial model's names.
  // Called for chunk 0, 1, ..., v − 1, before ParamStore::finalize(), so the
  // arena holds the chunks in order and the virtual stages' slices, put end
  // to end in virtual-stage order, are the serial model's arena.
  virtual void declare(ParamStore& store, int chunk) = 0;
  virtual void bind(ParamStore& store) = 0;
  // The step's local batch: m·b samples, micro-batch i being rows
  // [i·b, (i+1)·b). Must outlive the batch's actions.
  virtual void set_batch(const Batch& batch) = 0;
  // After a batch: the mean loss over the local batch (Σ_i loss_i / m) on the
  // rank holding the last virtual stage; 0 on the others.
  virtual double batch_loss() const = 0;
  // After bind(): this rank's tied parameters (see above); none by default.
  virtual std::vector<TiedParam> tied_params() const { return {}; }

  // Evaluation: a forward of `batch` (any row count) through `chunk` without
  // stashing; x/y as in forward(). On the last virtual stage it returns the
  // loss and accuracy counts. Models without it return false from evaluates().
  virtual bool evaluates() const { return false; }
  virtual int64_t eval_numel(int vstage, int64_t rows) const;
  virtual EvalStats eval_forward(int chunk, const Batch& batch, std::span<const float> x,
                                 std::span<float> y);
};

struct PipelineModelEntry {
  const char* name;  // model.type
  int (*layers)(const Config& config, const Dataset& data);
  std::unique_ptr<PipelineStages> (*make)(const Config& config, const Dataset& data,
                                          const StageLayout& layout);
};

// The layer count L that parallel.pp · parallel.chunks cut; ConfigError for a
// model.type without pipeline stages.
int pipeline_layers(const Config& config, const Dataset& data);
std::unique_ptr<PipelineStages> make_pipeline_stages(const Config& config, const Dataset& data,
                                                     const StageLayout& layout);

}  // namespace psar
