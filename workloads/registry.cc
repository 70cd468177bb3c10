// The registry of models, StageLayout's helpers, and the serial case.

#include <algorithm>
#include <iterator>

#include "core/errors.h"
#include "workloads/cnn.h"
#include "workloads/dlrm.h"
#include "workloads/gpt.h"
#include "workloads/mlp.h"
#include "workloads/model.h"
#include "workloads/sparse_data.h"
#include "workloads/synthetic_stages.h"
#include "workloads/text_data.h"

namespace psar {

namespace {
// Adding a model: its own file and one line here.
constexpr ModelEntry kModels[] = {
    {"mlp", &mlp_layers, &make_mlp},
    {"gpt", &gpt_layers, &make_gpt},
    {"cnn", &cnn_layers, &make_cnn},
    {"dlrm", &dlrm_layers, &make_dlrm},
    {"synthetic_stages", &synthetic_layers, &make_synthetic_stages},
};

const ModelEntry& find(const WorkloadOptions& options) {
  const std::string& type = options.type;
  for (const auto& m : kModels)
    if (type == m.name) return m;
  std::string known;
  for (const auto& m : kModels) known += (known.empty() ? "" : ", ") + std::string(m.name);
  throw ConfigError("model.type: '" + type + "' is not a model (known: " + known + ")");
}
}  // namespace

StageLayout StageLayout::serial(int layers, int64_t rows) {
  StageLayout s;
  s.microbatch_rows = rows;
  s.layers = {layers};
  return s;
}

std::pair<int, int> StageLayout::layer_range(int vstage) const {
  int first = 0;
  for (int u = 0; u < vstage; ++u) first += layers.at(static_cast<size_t>(u));
  return {first, first + layers.at(static_cast<size_t>(vstage))};
}

int64_t Model::eval_numel(int, int64_t) const {
  throw ConfigError(name() + ": no evaluation pass");
}

EvalStats Model::eval_forward(int, const Batch&, std::span<const float>, std::span<float>) {
  throw ConfigError(name() + ": no evaluation pass");
}

std::vector<std::string> model_names() {
  std::vector<std::string> names;
  for (const auto& m : kModels) names.emplace_back(m.name);
  return names;
}

int model_layers(const WorkloadOptions& options, const Dataset& data) {
  return find(options).layers(options, data);
}

std::unique_ptr<Model> make_model(const WorkloadOptions& options, const Dataset& data,
                                  const ModelContext& context) {
  return find(options).make(options, data, context);
}

void build_params(Model& model, ParamStore& store, int chunks, uint64_t seed) {
  for (int c = 0; c < chunks; ++c) model.declare(store, c);
  store.finalize(seed);
  model.bind(store);
}

double forward_backward(Model& model, const Batch& batch) {
  model.set_batch(batch);
  const auto stash = model.make_activations(0);
  model.forward(0, 0, *stash, {}, {});
  model.backward(0, 0, *stash, {}, {});
  return model.batch_loss();
}

namespace {
constexpr struct {
  const char* name;  // data.dataset
  DatasetPair (*load)(const WorkloadOptions& options);
} kDatasets[] = {
    {"fashion_mnist", [](const WorkloadOptions& o) { return load_fashion_mnist(o.data.path); }},
    {"synthetic",
     [](const WorkloadOptions& o) {
       return make_synthetic(o.data.synthetic_samples, o.data.synthetic_features,
                             o.data.synthetic_classes, o.seed);
     }},
    {"text",
     [](const WorkloadOptions& o) {
       return load_text(resolve_text_path(o.data.path), o.gpt.seq_len);
     }},
    {"synthetic_tokens",
     [](const WorkloadOptions& o) {
       // The vocabulary: model.vocab, or 64 when it is 0 ("from the data").
       return make_synthetic_tokens(o.data.synthetic_samples, o.gpt.seq_len,
                                    o.gpt.vocab > 0 ? o.gpt.vocab : 64, o.seed);
     }},
    {"zipf", &load_zipf_data},
};
}  // namespace

std::vector<std::string> dataset_names() {
  std::vector<std::string> names;
  for (const auto& d : kDatasets) names.emplace_back(d.name);
  return names;
}

DatasetPair load_dataset(const WorkloadOptions& options) {
  const std::string& kind = options.data.dataset;
  const auto* entry = std::find_if(std::begin(kDatasets), std::end(kDatasets),
                                   [&](const auto& d) { return kind == d.name; });
  if (entry == std::end(kDatasets))
    throw ConfigError("data.dataset: '" + kind + "' is not available for model.type " +
                      options.type);
  DatasetPair d = entry->load(options);
  d.train->truncate(options.data.train_limit);
  d.test->truncate(options.data.test_limit);
  return d;
}

}  // namespace psar
