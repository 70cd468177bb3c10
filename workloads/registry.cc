// The registry of models, StageLayout's helpers, and the serial case.

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

const ModelEntry& find(const Config& config) {
  const std::string type = config.get_string("model.type");
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

int model_layers(const Config& config, const Dataset& data) {
  return find(config).layers(config, data);
}

std::unique_ptr<Model> make_model(const Config& config, const Dataset& data,
                                  const ModelContext& context) {
  return find(config).make(config, data, context);
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

DatasetPair load_dataset(const Config& config) {
  const std::string kind = config.get_string("data.dataset");
  DatasetPair d;
  if (kind == "fashion_mnist") {
    d = load_fashion_mnist(config.get_string("data.path"));
  } else if (kind == "synthetic") {
    d = make_synthetic(config.get_int("data.synthetic_samples"),
                       config.get_int("data.synthetic_features"),
                       config.get_int("data.synthetic_classes"),
                       static_cast<uint64_t>(config.get_int("train.seed")));
  } else if (kind == "text") {
    d = load_text(resolve_text_path(config.get_string("data.path")),
                  config.get_int("model.seq_len"));
  } else if (kind == "synthetic_tokens") {
    // The vocabulary: model.vocab, or 64 when it is 0 ("from the data").
    const int64_t vocab = config.get_int("model.vocab");
    d = make_synthetic_tokens(config.get_int("data.synthetic_samples"),
                              config.get_int("model.seq_len"), vocab > 0 ? vocab : 64,
                              static_cast<uint64_t>(config.get_int("train.seed")));
  } else if (kind == "zipf") {
    d = load_zipf_data(config);
  } else {
    throw ConfigError("data.dataset: '" + kind + "' is not available for model.type " +
                      config.get_string("model.type"));
  }
  d.train->truncate(config.get_int("data.train_limit"));
  d.test->truncate(config.get_int("data.test_limit"));
  return d;
}

}  // namespace psar
