#include "core/errors.h"
#include "workloads/gpt.h"
#include "workloads/mlp.h"
#include "workloads/model.h"
#include "workloads/text_data.h"

namespace psar {

namespace {
// Adding a model: its own file and one line here.
constexpr ModelEntry kModels[] = {
    {"mlp", &make_mlp},
    {"gpt", &make_gpt},
};
}  // namespace

std::unique_ptr<Model> make_model(const Config& config, const Dataset& data,
                                  const ModelContext& context) {
  const std::string type = config.get_string("model.type");
  for (const auto& m : kModels)
    if (type == m.name) return m.make(config, data, context);
  std::string known;
  for (const auto& m : kModels) known += (known.empty() ? "" : ", ") + std::string(m.name);
  throw ConfigError("model.type: '" + type + "' is not available in `psar train` (known: " +
                    known + ")");
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
  } else {
    throw ConfigError("data.dataset: '" + kind + "' is not available for model.type " +
                      config.get_string("model.type"));
  }
  d.train->truncate(config.get_int("data.train_limit"));
  d.test->truncate(config.get_int("data.test_limit"));
  return d;
}

}  // namespace psar
