#pragma once
// Model: a workload with explicit forward and backward over a ParamStore.
// Models are chosen by `model.type` through the registry in registry.cc.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/param_store.h"
#include "core/tensor.h"
#include "workloads/dataset.h"

namespace psar {

class Comm;

struct EvalStats {
  double loss_sum = 0;  // summed over rows
  int64_t correct = 0;
  int64_t count = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual std::string name() const = 0;
  // Registers every parameter; called once, before ParamStore::finalize().
  virtual void declare(ParamStore& store) = 0;
  // Takes views of the finalized store.
  virtual void bind(ParamStore& store) = 0;
  // Forward and backward of one batch: ADDS grad_scale · ∂(mean loss)/∂θ into
  // the gradient arena and returns the mean loss over the batch.
  virtual double forward_backward(const Batch& batch, float grad_scale) = 0;
  // Forward only: loss and accuracy counts.
  virtual EvalStats evaluate(const Batch& batch) = 0;
  // Writes the model's own measurements into the run directory (the GPT's
  // tp.csv: tensor-parallel collectives, bytes and seconds per step). Every
  // worker rank calls it once after training, as it may gather over
  // `workers`; rank 0 writes. Default: nothing.
  virtual void write_run_files(const std::string& out_dir, Comm& workers) {}
};

class Allreducer;

// What a model is built with besides its config and data.
struct ModelContext {
  // Tensor-parallel group (parallel.tp ranks, adjacent in the world) and the
  // algorithm its all-reduces use; null/size 1 when there is none.
  Comm* tp = nullptr;
  Allreducer* tp_allreduce = nullptr;
};

struct ModelEntry {
  const char* name;
  std::unique_ptr<Model> (*make)(const Config& config, const Dataset& data,
                                 const ModelContext& context);
};

// Throws ConfigError for an unknown model.type.
std::unique_ptr<Model> make_model(const Config& config, const Dataset& data,
                                  const ModelContext& context = {});

// Data for the configured `data.dataset`, truncated as configured.
DatasetPair load_dataset(const Config& config);

}  // namespace psar
