#pragma once
// Sharding policy of the parameter server: which contiguous key range of the
// flat parameter vector each of the S server shards owns.
//
// Each shard is further cut into chunks of at most ps.chunk_bytes: a chunk is
// the unit of aggregation and of a message, so a large push streams as several
// messages and the server updates and answers the first chunks while the later
// ones are still on the wire (pipelining, as BytePS partitions large tensors).
// The chunk size follows the shard (ps.shard_chunks: 0, the default): with
// one worker a shard of B bytes streams as k ≈ sqrt(B / B0) chunks (B0 =
// kMinChunkBytes), each at most ps.chunk_bytes, so that a mid-size push_pull
// pipelines too instead of travelling as one message that the server can
// only update, and the worker only copy out, once all of it has arrived. k
// balances the work left exposed after the last chunk arrives (update +
// copy-out of one chunk, ∝ B/k) against the fixed cost of k messages (∝ k);
// docs/theory.md, "PS chunking". With several workers the messages cost
// more than they save (measured there), so a shard below ps.chunk_bytes
// stays one message. A positive ps.shard_chunks K overrides it: a shard
// smaller than K chunks of ps.chunk_bytes is cut into K chunks (none below
// kMinChunkBytes; 1 = whole ps.chunk_bytes chunks).
//
// Balanced (default): shard s owns [s·M/S, (s+1)·M/S), so sizes differ by at
// most one float and every server carries the same share of the traffic.
// Aligned (ps.align_shards): each balanced boundary moves to the nearest
// tensor boundary of the ParamStore (never backwards), so no tensor is split
// across servers — at the price of imbalance, and of empty shards when there
// are fewer tensors than servers. Every rank computes the same plan from the
// same inputs; nothing about it travels on the wire.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/param_store.h"

namespace psar::ps {

struct KeyRange {
  int64_t begin = 0;
  int64_t end = 0;  // exclusive
  int64_t size() const { return end - begin; }
  bool contains(const KeyRange& r) const { return begin <= r.begin && r.end <= end; }
  bool operator==(const KeyRange&) const = default;
};

std::string to_string(const KeyRange& r);  // "[0, 1024)"

// One shard's key range cut into chunks of `chunk_floats` (the last one may be
// shorter; 0 = the whole range is one chunk). An empty shard has one empty chunk.
struct ShardLayout {
  int shard = 0;
  KeyRange range;
  int64_t chunk_floats = 0;

  int chunks() const;
  KeyRange chunk(int i) const;
  // The chunk whose keys include all of `keys`, or -1 (outside, or across a boundary).
  int chunk_containing(const KeyRange& keys) const;
};

// A chunk of a job: shard (index into the plan) and chunk within it.
struct ChunkRef {
  int shard = 0;
  int64_t chunk = 0;
  bool operator==(const ChunkRef&) const = default;
};

// The order in which `worker` sends the chunks of one push_pull, given each
// shard's chunk count: round c sends chunk c of every shard that has one,
// worker w visiting the shards from w mod S on (w, w + 1, ..., S − 1, 0, ...).
// With S ≥ N workers at any moment of a round each worker's chunk heads to a
// shard of its own, so no shard's ingress takes N chunks at once while the
// others idle — and a shard, which answers in arrival order, answers them
// staggered too, so no worker's ingress takes S replies at once. The pipeline
// fill stays one chunk's N replies (docs/theory.md, "The parameter server's
// α-β form").
std::vector<ChunkRef> send_order(int worker, std::span<const int64_t> chunks_per_shard);

// Floats per chunk for a chunk size in bytes (at least one float).
int64_t chunk_floats_for(int64_t chunk_bytes);

constexpr int64_t kMinChunkBytes = 64 << 10;  // below it a message's fixed cost dominates
constexpr int64_t kAutoShardChunks = 0;        // ps.shard_chunks: chunk count from the shard size
// Chunks of a shard of `shard_floats` floats pushed by `workers` workers
// under the automatic rule: one worker, the k >= 1 that minimises x/k + k
// for x = shard bytes / kMinChunkBytes (≈ sqrt(x); 1 MiB 4, 4 MiB 8,
// 16 MiB 16); more workers, 1 (chunks of ps.chunk_bytes).
int64_t auto_shard_chunks(int64_t shard_floats, int workers = 1);
// Floats per chunk of a shard of `shard_floats` floats: ps.chunk_bytes, or
// less so that the shard streams as `shard_chunks` chunks (ps.shard_chunks;
// kAutoShardChunks = auto_shard_chunks for `workers`; 1 = always
// ps.chunk_bytes), but never less than kMinChunkBytes (nor more than
// ps.chunk_bytes). Throws ConfigError for shard_chunks < 0.
int64_t chunk_floats_for(int64_t chunk_bytes, int64_t shard_floats, int64_t shard_chunks,
                         int workers = 1);
// The one chunk size of a job, the same on every server and worker:
// chunk_floats_for its largest shard and the job's `workers`.
int64_t plan_chunk_floats(int64_t chunk_bytes, int64_t shard_chunks,
                          std::span<const KeyRange> plan, int workers = 1);

// `size` floats over `shards` servers; with `align_to` non-empty, boundaries
// snap to tensor boundaries (offsets of align_to, which must tile [0, size)).
// Throws ConfigError for shards < 1.
std::vector<KeyRange> plan_shards(int64_t size, int shards,
                                  std::span<const ParamInfo> align_to = {});

}  // namespace psar::ps
