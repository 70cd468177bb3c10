#pragma once
// The bucket plan of an overlapped gradient sync (PyTorch DDP's buckets):
// which arena ranges are synced together, in the order the backward makes
// them final.
//
// Input: the tensors as arena ranges [begin, end) in the order their
// gradients become final — the reverse of the forward, so the last layer's
// first — and a capacity. Buckets fill in that order; a tensor that does not
// fit in the current bucket starts the next one; a bucket splits a tensor
// only when the tensor alone exceeds the capacity (then into pieces of the
// capacity, the last one shorter, each a bucket of its own; with
// `whole_tensors` such a tensor is one bucket of its own instead, for a user
// that maps each tensor into one buffer, ZeRO stage 2's layers). A tensor left
// out (`skip`: the tied parameters, synced after their own reduction) closes
// the bucket in progress, so every bucket is one contiguous range.

#include <cstdint>
#include <vector>

namespace psar {

struct ArenaRange {
  int64_t begin = 0, end = 0;  // floats [begin, end)
  int64_t size() const { return end - begin; }
  bool operator==(const ArenaRange&) const = default;
};

struct BucketTensor {
  ArenaRange range;
  bool skip = false;  // not bucketed
};

// Buckets in launch order. capacity_floats >= 1.
std::vector<ArenaRange> plan_buckets(const std::vector<BucketTensor>& ready_order,
                                     int64_t capacity_floats, bool whole_tensors = false);

// Cuts each bucket into chunks of at most chunk_floats (front_first's
// preemption unit), keeping the buckets' order.
std::vector<ArenaRange> cut_chunks(const std::vector<ArenaRange>& buckets, int64_t chunk_floats);

}  // namespace psar
