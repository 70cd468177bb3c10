#pragma once
// Model: one definition per workload, cut by (p, t, d).
//
// A model is a sequence of L layers with a front (reading the input: the
// MLP's features, the GPT's embeddings) and a back (the head and the loss).
// A rank holds the layer ranges of its pipeline stage's chunks — virtual
// stage u = c·p + s for chunk c of stage s (StageLayout, partition.h cuts the
// L layers over the p·v virtual stages) — with the front on virtual stage 0
// and the back on the last; the serial model is the one-stage case (p = v =
// m = 1, StageLayout::serial). Tensor parallelism lives inside the layers
// (modelpar/tp: f/g, column- and row-parallel linears, heads split over the
// TpGroup of ModelContext); data parallelism outside, in the trainer.
//
// A Model is the pipeline executor's StageModel (modelpar/pp/stage_model.h:
// forward / backward_input / backward_weight of micro-batch i on chunk c,
// its activations in an Activations object the caller owns, fixed boundary
// shapes) plus what the trainer needs around it: the parameters of this
// rank's chunks, registered under the serial model's names so that they
// start from its values (ParamStore initializes by name, ShardedParams gives
// a TP shard its slice), the batch of the step, the loss, a forward-only
// pass for evaluation, and the tied parameters.
//
// Tied parameters: a parameter the serial model uses on two virtual stages
// that sit on different ranks (the GPT's token embedding, also its LM head)
// is held by both ranks, one of them holding a copy under the same name; the
// trainer reduces the two gradients over the pair before the optimizer step
// (Megatron's embedding group), so the copies take the same step, and leaves
// the copy out of the gathered model.
//
// Models: `mlp` (mlp.cc), `gpt` (gpt.cc), `cnn` (cnn.cc), `dlrm` (dlrm.cc) and
// `synthetic_stages` (synthetic_stages.cc), one line each in registry.cc.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "workloads/workload_options.h"
#include "core/param_store.h"
#include "core/tensor.h"
#include "modelpar/pp/stage_model.h"
#include "workloads/dataset.h"

namespace psar {

class ShardedParams;
class TpGroup;

// An embedding table of a sparse model: arena floats
// [offset, offset + rows·dim), row r at offset + r·dim.
struct SparseTable {
  std::string name;
  int64_t offset = 0;
  int64_t rows = 0;
  int64_t dim = 0;
};

struct EvalStats {
  double loss_sum = 0;  // summed over rows
  int64_t correct = 0;
  int64_t count = 0;
};

// Where a rank's part of the model sits in the pipeline.
struct StageLayout {
  int stages = 1;               // p
  int chunks = 1;               // v
  int stage = 0;                // s, this rank's stage
  int microbatches = 1;         // m
  int64_t microbatch_rows = 1;  // b, samples per micro-batch
  std::vector<int> layers;      // layers per virtual stage (p·v entries, partition.h)

  // The whole model on one rank, the batch in one micro-batch of `rows`.
  static StageLayout serial(int layers, int64_t rows);
  int vstages() const { return stages * chunks; }
  int vstage(int chunk) const { return chunk * stages + stage; }
  bool front(int chunk) const { return vstage(chunk) == 0; }
  bool back(int chunk) const { return vstage(chunk) == vstages() - 1; }
  // [first, last) model layers of virtual stage u.
  std::pair<int, int> layer_range(int vstage) const;
};

// One rank's side of a tied parameter.
struct TiedParam {
  int param = -1;     // index in this rank's ParamStore
  int peer = -1;      // the pipeline stage holding the other copy
  bool copy = false;  // this side is the copy: not part of the gathered (serial) model
};

// What a model is built with besides its config and data.
struct ModelContext {
  // The tensor-parallel group of this rank's stage (t ranks, modelpar/tp/
  // group.h); null: the serial layers (t = 1). Outlives the model.
  TpGroup* tp = nullptr;
  StageLayout layout;  // this rank's place in the pipeline
};

class Model : public pp::StageModel {
 public:
  virtual std::string name() const = 0;
  // Registers the parameters of `chunk` under the serial model's names.
  // Called for chunk 0, 1, ..., v − 1, before ParamStore::finalize(), so the
  // arena holds the chunks in order and the virtual stages' slices, put end
  // to end in virtual-stage order (and unsharded), are the serial arena.
  virtual void declare(ParamStore& store, int chunk) = 0;
  // After finalize(): takes views of the store; TP shards take their slices
  // of the serial values.
  virtual void bind(ParamStore& store) = 0;
  // The step's local batch: m·b samples, micro-batch i being rows
  // [i·b, (i+1)·b). Must outlive the batch's actions.
  virtual void set_batch(const Batch& batch) = 0;
  // After a batch: the mean loss over the local batch (Σ_i loss_i / m) on the
  // ranks holding the last virtual stage; 0 on the others.
  virtual double batch_loss() const = 0;
  // The model's random state: batches taken so far (the GPT draws its
  // dropout masks by it). A checkpoint saves it; a resumed run restores it.
  virtual uint64_t batches_seen() const { return 0; }
  virtual void set_batches_seen(uint64_t) {}
  // After bind(): this rank's tied parameters (see above); none by default.
  virtual std::vector<TiedParam> tied_params() const { return {}; }
  // How each parameter of this rank is cut over its TP group (modelpar/tp/
  // shard.h); null: every parameter whole (t = 1).
  virtual const ShardedParams* sharded_params() const { return nullptr; }

  // Evaluation: a forward of `batch` (any row count) through `chunk` without
  // keeping activations; x/y as in forward(). On the last virtual stage it
  // returns the loss and accuracy counts. Models without it return false
  // from evaluates().
  virtual bool evaluates() const { return false; }
  virtual int64_t eval_numel(int vstage, int64_t rows) const;
  virtual EvalStats eval_forward(int chunk, const Batch& batch, std::span<const float> x,
                                 std::span<float> y);

  // Tensor-parallel all-reduce floats one micro-batch's forward plus backward
  // on `chunk` runs, from the layer shapes (the GPT: 4·b·T·d per block with
  // the column_row split); 0 for models without tensor parallelism.
  virtual int64_t tp_allreduce_floats(int chunk) const { return 0; }
  // Tensor-parallel all-gather floats (the gathered size) of one
  // micro-batch on `chunk`: the hybrid CNN's features; 0 for the others.
  virtual int64_t tp_all_gather_floats(int chunk) const { return 0; }
  // Hybrid parallelism (parallel.hybrid, the CNN): the arena's first n
  // floats are parameters every rank of the tensor-parallel group holds
  // whole but trains on its own slice of the batch, so their gradients are
  // averaged over the group (the data-parallel axis); 0 for the others.
  virtual int64_t hybrid_data_parallel_floats() const { return 0; }
  // Sparse models (dlrm.h): the embedding tables, and after set_batch() the
  // rows of table t the batch touches (sorted, unique) — every other row's
  // gradient is exactly zero. None by default.
  virtual std::vector<SparseTable> sparse_tables() const { return {}; }
  virtual std::span<const int64_t> touched_rows(int) const { return {}; }
  // The arena ranges [begin, end) of this rank's layers, in arena order,
  // tiling the arena: what one need(), need_backward() and done() of its
  // ParamGate ask for around each layer (stage_model.h) — the seam that lets
  // ZeRO stage 3 gather one layer's parameters at a time. Empty: the model
  // reads its parameters without asking (it cannot train with them sharded).
  virtual std::vector<std::pair<int64_t, int64_t>> layer_ranges() const { return {}; }
  // A line the trainer prints at the start (the CNN: its parameter and
  // FLOP shares per layer kind); "" for none.
  virtual std::string summary() const { return ""; }
};

struct ModelEntry {
  const char* name;  // model.type
  // L, the layer count that parallel.pp · parallel.chunks cut.
  int (*layers)(const WorkloadOptions& options, const Dataset& data);
  std::unique_ptr<Model> (*make)(const WorkloadOptions& options, const Dataset& data,
                                 const ModelContext& context);
};

// Every model.type, as the registry lists them.
std::vector<std::string> model_names();
// ConfigError for an unknown model.type.
int model_layers(const WorkloadOptions& options, const Dataset& data);
std::unique_ptr<Model> make_model(const WorkloadOptions& options, const Dataset& data,
                                  const ModelContext& context);

// Declares every chunk of `model` into `store`, finalizes it and binds.
void build_params(Model& model, ParamStore& store, int chunks, uint64_t seed);

// The serial case (StageLayout::serial, one micro-batch): forward and
// backward of `batch` through chunk 0, gradients added into the store.
// Returns the batch's mean loss. For tests and tools; the trainer runs
// every layout through the pipeline executor.
double forward_backward(Model& model, const Batch& batch);

// Data for the configured `data.dataset`, truncated as configured.
DatasetPair load_dataset(const WorkloadOptions& options);
// Every data.dataset, as load_dataset knows them.
std::vector<std::string> dataset_names();

}  // namespace psar
