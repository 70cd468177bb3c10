#include "ps/sharding.h"

#include <algorithm>
#include <cmath>

#include "core/errors.h"

namespace psar::ps {

std::string to_string(const KeyRange& r) {
  std::string s = "[";
  s += std::to_string(r.begin);
  s += ", ";
  s += std::to_string(r.end);
  s += ")";
  return s;
}

int ShardLayout::chunks() const {
  if (chunk_floats <= 0 || range.size() == 0) return 1;
  return static_cast<int>((range.size() + chunk_floats - 1) / chunk_floats);
}

KeyRange ShardLayout::chunk(int i) const {
  if (chunk_floats <= 0) return range;
  const int64_t begin = range.begin + i * chunk_floats;
  return {begin, std::min(range.end, begin + chunk_floats)};
}

int ShardLayout::chunk_containing(const KeyRange& keys) const {
  if (keys.begin > keys.end || !range.contains(keys)) return -1;
  if (chunk_floats <= 0 || range.size() == 0) return 0;
  const int64_t first = std::min<int64_t>((keys.begin - range.begin) / chunk_floats, chunks() - 1);
  return chunk(static_cast<int>(first)).contains(keys) ? static_cast<int>(first) : -1;
}

std::vector<ChunkRef> send_order(int worker, std::span<const int64_t> chunks_per_shard) {
  const int shards = static_cast<int>(chunks_per_shard.size());
  PSAR_CHECK(worker >= 0, "send_order: worker ", worker);
  int64_t most = 0;
  for (int64_t c : chunks_per_shard) most = std::max(most, c);
  std::vector<ChunkRef> order;
  for (int64_t c = 0; c < most; ++c)
    for (int j = 0; j < shards; ++j) {
      const int s = (worker + j) % shards;
      if (c < chunks_per_shard[static_cast<size_t>(s)]) order.push_back({s, c});
    }
  return order;
}

int64_t chunk_floats_for(int64_t chunk_bytes) {
  if (chunk_bytes <= 0)
    throw ConfigError("ps.chunk_bytes: must be positive, got " + std::to_string(chunk_bytes));
  return std::max<int64_t>(1, chunk_bytes / 4);
}

int64_t auto_shard_chunks(int64_t shard_floats, int workers) {
  PSAR_CHECK(workers >= 1, "auto_shard_chunks: ", workers, " workers");
  // With several workers the N·k messages cost more than the exposed tail
  // they save (measured, docs/theory.md): one message per shard.
  if (workers > 1) return 1;
  // Exposed tail c·B/k plus message costs k·o, in units of o: x/k + k with
  // x = B/B0 and B0 = o/c, the size whose update + copy-out costs as much as
  // a message (docs/theory.md, "PS chunking"). k beats k + 1 while
  // k(k + 1) < x, so the least k with k(k + 1) >= x is the best (ties: fewer
  // messages); it is floor(sqrt(x)) or one more.
  const double x = static_cast<double>(std::max<int64_t>(shard_floats, 0)) *
                   static_cast<double>(sizeof(float)) / static_cast<double>(kMinChunkBytes);
  auto k = std::max<int64_t>(1, static_cast<int64_t>(std::sqrt(x)));
  while (static_cast<double>(k) * static_cast<double>(k + 1) < x) ++k;
  return k;
}

int64_t chunk_floats_for(int64_t chunk_bytes, int64_t shard_floats, int64_t shard_chunks,
                         int workers) {
  if (shard_chunks < 0)
    throw ConfigError("ps.shard_chunks: must be 0 (auto) or at least 1, got " +
                      std::to_string(shard_chunks));
  if (shard_chunks == kAutoShardChunks) shard_chunks = auto_shard_chunks(shard_floats, workers);
  const int64_t most = chunk_floats_for(chunk_bytes);
  const int64_t least = std::min(most, kMinChunkBytes / static_cast<int64_t>(sizeof(float)));
  const int64_t even = (std::max<int64_t>(shard_floats, 0) + shard_chunks - 1) / shard_chunks;
  return std::clamp(even, least, most);
}

int64_t plan_chunk_floats(int64_t chunk_bytes, int64_t shard_chunks,
                          std::span<const KeyRange> plan, int workers) {
  int64_t largest = 0;
  for (const KeyRange& r : plan) largest = std::max(largest, r.size());
  return chunk_floats_for(chunk_bytes, largest, shard_chunks, workers);
}

std::vector<KeyRange> plan_shards(int64_t size, int shards, std::span<const ParamInfo> align_to) {
  if (shards < 1)
    throw ConfigError("ps.servers: need at least one server shard, got " + std::to_string(shards));
  PSAR_CHECK(size >= 0, "plan_shards: negative size ", size);
  // Boundaries b_0 = 0 < ... < b_S = size; shard s is [b_s, b_{s+1}).
  std::vector<int64_t> bounds(static_cast<size_t>(shards) + 1);
  for (int s = 0; s <= shards; ++s) bounds[s] = size * s / shards;

  if (!align_to.empty()) {
    std::vector<int64_t> tensor_bounds;
    for (const auto& info : align_to) tensor_bounds.push_back(info.offset);
    tensor_bounds.push_back(size);
    PSAR_CHECK(
        std::is_sorted(tensor_bounds.begin(), tensor_bounds.end()) && tensor_bounds.front() == 0,
        "plan_shards: tensors do not tile the parameter vector");
    for (int s = 1; s < shards; ++s) {
      // Nearest tensor boundary at or after the previous shard boundary (ties go low).
      auto hi = std::lower_bound(tensor_bounds.begin(), tensor_bounds.end(), bounds[s]);
      int64_t best = *hi;
      if (hi != tensor_bounds.begin()) {
        const int64_t lo = *std::prev(hi);
        if (bounds[s] - lo <= best - bounds[s]) best = lo;
      }
      bounds[s] = std::max(best, bounds[s - 1]);
    }
  }

  std::vector<KeyRange> plan;
  for (int s = 0; s < shards; ++s) plan.push_back({bounds[s], bounds[s + 1]});
  return plan;
}

}  // namespace psar::ps
