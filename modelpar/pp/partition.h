#pragma once
// How a model's layers are split over the p·v virtual stages, in virtual
// stage order (u = c·p + s, as in schedule.h): an explicit count per virtual
// stage (the `parallel.stage_layers` key), or an even split where the first
// `layers mod p·v` virtual stages take one layer more, optionally counting
// the embedding and the head as layers of the first and last virtual stage
// (EndCosts). Every virtual stage needs at least one layer: more stages than
// layers is a ConfigError.

#include <cstdint>
#include <span>
#include <vector>

namespace psar::pp {

// Work outside the layers, in layers' worth, that an even split charges to
// the first and the last virtual stage (Megatron's
// --account-for-embedding-in-pipeline-split / -loss-in-pipeline-split): the
// split spreads layers + first + last evenly, then the first virtual stage
// gives `first` of its share to the embedding and the last `last` to the head.
struct EndCosts {
  int first = 0;  // the embedding
  int last = 0;   // the head and the loss
};

// Layers per virtual stage (p·v entries).
std::vector<int> partition_layers(int layers, int stages, int chunks,
                                  std::span<const int64_t> counts = {}, EndCosts ends = {});

// First layer of each virtual stage, plus the total at the end (p·v + 1 entries).
std::vector<int> layer_offsets(const std::vector<int>& per_vstage);

}  // namespace psar::pp
