#pragma once
// Dropout masks that a tensor-parallel shard can reproduce exactly.
//
// Element i of a site's tensor in forward pass `step` is kept iff
// Philox(seed, stream, i) ≥ p with stream = fnv1a(site) + step (core/ops.h,
// core/rng.h). i is the element's index in the serial model's tensor, so a rank
// that holds heads [h0, h0 + H/t) of the attention probabilities applies, to
// its part, exactly the mask the serial model applies there; replicated
// tensors (after g) get the same mask on every rank. Masks are indexed within
// the local batch: data-parallel ranks therefore draw different, equally
// distributed masks from the serial model's (see docs/tensor_parallel.md).

#include <cstdint>
#include <string>

#include "core/rng.h"

namespace psar {

struct DropoutContext {
  float p = 0.0f;     // drop probability; 0 = no dropout (evaluation)
  uint64_t seed = 0;  // train.seed
  uint64_t step = 0;  // forward pass number: a fresh mask every step

  uint64_t stream(const std::string& site) const { return fnv1a(site) + step; }
};

}  // namespace psar
