#include "modelpar/pp/partition.h"

#include "core/errors.h"

namespace psar::pp {

using psar::detail::concat;

std::vector<int> partition_layers(int layers, int stages, int chunks,
                                  std::span<const int64_t> counts, EndCosts ends) {
  if (stages < 1 || chunks < 1)
    throw ConfigError(
        concat("layer partition: needs p ≥ 1 and v ≥ 1 (p=", stages, ", v=", chunks, ")"));
  const int vstages = stages * chunks;
  if (layers < vstages)
    throw ConfigError(concat("layer partition: more virtual stages (p·v = ", stages, "·", chunks,
                             " = ", vstages, ") than model layers (", layers,
                             "); every virtual stage needs at least one layer"));
  std::vector<int> out(static_cast<size_t>(vstages));
  if (ends.first < 0 || ends.last < 0)
    throw ConfigError(concat("layer partition: negative end costs (", ends.first, ", ",
                             ends.last, ")"));
  const bool accounted = ends.first > 0 || ends.last > 0;
  if (counts.empty()) {
    const int total = layers + ends.first + ends.last;
    for (int u = 0; u < vstages; ++u)
      out[static_cast<size_t>(u)] = total / vstages + (u < total % vstages ? 1 : 0);
    out.front() -= ends.first;
    out.back() -= ends.last;
    for (int u = 0; u < vstages; ++u)
      if (out[static_cast<size_t>(u)] < 1)
        throw ConfigError(concat(
            "layer partition: counting the embedding (", ends.first, ") and the head (",
            ends.last, ") as layers leaves virtual stage ", u, " of ", vstages, " with ",
            out[static_cast<size_t>(u)], " of the model's ", layers,
            " layers; every virtual stage needs at least one (unset "
            "parallel.account_embedding / parallel.account_head, or use fewer stages)"));
    return out;
  }
  if (accounted)
    throw ConfigError(
        "parallel.stage_layers places every layer itself: it does not combine with "
        "parallel.account_embedding or parallel.account_head");
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
