#include "modelpar/pp/partition.h"

#include "core/errors.h"

namespace psar::pp {

using psar::detail::concat;

std::vector<int> partition_layers(int layers, int stages, int chunks,
                                  std::span<const int64_t> counts) {
  if (stages < 1 || chunks < 1)
    throw ConfigError(
        concat("layer partition: needs p ≥ 1 and v ≥ 1 (p=", stages, ", v=", chunks, ")"));
  const int vstages = stages * chunks;
  if (layers < vstages)
    throw ConfigError(concat("layer partition: more virtual stages (p·v = ", stages, "·", chunks,
                             " = ", vstages, ") than model layers (", layers,
                             "); every virtual stage needs at least one layer"));
  std::vector<int> out(static_cast<size_t>(vstages));
  if (counts.empty()) {
    for (int u = 0; u < vstages; ++u)
      out[static_cast<size_t>(u)] = layers / vstages + (u < layers % vstages ? 1 : 0);
    return out;
  }
  if (counts.size() != static_cast<size_t>(vstages))
    throw ConfigError(concat("parallel.stage_layers has ", counts.size(),
                             " entries; needs one per virtual stage (p·v = ", vstages, ")"));
  int64_t sum = 0;
  for (size_t u = 0; u < counts.size(); ++u) {
    if (counts[u] < 1)
      throw ConfigError(concat("parallel.stage_layers[", u, "] = ", counts[u],
                               ": every virtual stage needs at least one layer"));
    sum += counts[u];
    out[u] = static_cast<int>(counts[u]);
  }
  if (sum != layers)
    throw ConfigError(
        concat("parallel.stage_layers sums to ", sum, " layers; the model has ", layers));
  return out;
}

std::vector<int> layer_offsets(const std::vector<int>& per_vstage) {
  std::vector<int> offsets{0};
  for (int n : per_vstage) offsets.push_back(offsets.back() + n);
  return offsets;
}

}  // namespace psar::pp
