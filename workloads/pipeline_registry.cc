// The registry of models with pipeline stages, and StageLayout's helpers.

#include "core/errors.h"
#include "workloads/gpt_stages.h"
#include "workloads/mlp_stages.h"
#include "workloads/pipeline_stages.h"
#include "workloads/synthetic_stages.h"

namespace psar {

namespace {
// Adding a model to pipeline training: its stages in their own file, one line here.
constexpr PipelineModelEntry kStageModels[] = {
    {"mlp", &mlp_layers, &make_mlp_stages},
    {"gpt", &gpt_layers, &make_gpt_stages},
    {"synthetic_stages", &synthetic_layers, &make_synthetic_stages},
};

const PipelineModelEntry& find(const Config& config) {
  const std::string type = config.get_string("model.type");
  for (const auto& e : kStageModels)
    if (type == e.name) return e;
  std::string known;
  for (const auto& e : kStageModels) known += (known.empty() ? "" : ", ") + std::string(e.name);
  throw ConfigError("model.type: '" + type + "' cannot be cut into pipeline stages yet "
                    "(parallel.pp > 1 runs: " + known + ")");
}
}  // namespace

std::pair<int, int> StageLayout::layer_range(int vstage) const {
  int first = 0;
  for (int u = 0; u < vstage; ++u) first += layers.at(static_cast<size_t>(u));
  return {first, first + layers.at(static_cast<size_t>(vstage))};
}

int64_t PipelineStages::eval_numel(int, int64_t) const {
  throw ConfigError(name() + ": no evaluation pass through pipeline stages");
}

EvalStats PipelineStages::eval_forward(int, const Batch&, std::span<const float>,
                                       std::span<float>) {
  throw ConfigError(name() + ": no evaluation pass through pipeline stages");
}

int pipeline_layers(const Config& config, const Dataset& data) {
  return find(config).layers(config, data);
}

std::unique_ptr<PipelineStages> make_pipeline_stages(const Config& config, const Dataset& data,
                                                     const StageLayout& layout) {
  return find(config).make(config, data, layout);
}

}  // namespace psar
