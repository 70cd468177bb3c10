#pragma once
// How a model's layers are split over the p·v virtual stages, in virtual
// stage order (u = c·p + s, as in schedule.h): an explicit count per virtual
// stage (the `parallel.stage_layers` key), or an even split where the first
// `layers mod p·v` virtual stages take one layer more. Every virtual stage
// needs at least one layer: more stages than layers is a ConfigError.

#include <cstdint>
#include <span>
#include <vector>

namespace psar::pp {

// Layers per virtual stage (p·v entries).
std::vector<int> partition_layers(int layers, int stages, int chunks,
                                  std::span<const int64_t> counts = {});

// First layer of each virtual stage, plus the total at the end (p·v + 1 entries).
std::vector<int> layer_offsets(const std::vector<int>& per_vstage);

}  // namespace psar::pp
