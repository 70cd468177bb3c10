#pragma once
// The synchronization seam's keys (sync.*, ps.*), read once at the start of
// a run into typed options: the registry, the backends and the overlap take
// these and never the config. Every ConfigError a key alone can cause is
// raised by sync_options, naming the key; those that need the model, the
// grid or the backend stay with the step that learns them.

#include <string>

#include "allreduce/allreducer.h"
#include "core/config.h"
#include "ps/launch.h"

namespace psar {

// Overlap (sync.overlap, docs/overlap.md): buckets synced on a
// communication thread while the backward runs.
struct OverlapConfig {
  bool on = false;
  int64_t bucket_floats = 0;          // sync.bucket_bytes / 4, at least 1
  bool front_first = false;           // sync.priority: front_first
  int64_t priority_chunk_floats = 0;  // sync.priority_chunk_bytes / 4, at least 1
};

struct SyncOptions {
  std::string backend;        // sync.backend
  std::string algorithm;      // sync.algorithm: the dense layers' allreduce under `hybrid`
  AllreduceOptions allreduce; // sync.segment_bytes, dtype, accumulate, nccl_* (allreduce_options)
  int zero = 0;               // sync.zero (checked against the backend by zero_stage)
  OverlapConfig overlap;
  std::string priority;       // sync.priority, as written (named in refusals)
  bool gather_sparse_tables = false;  // sync.sparse_tables: gather
  std::string tuning;         // sync.tuning ("" = unset)
  double timeout = 0;         // sync.timeout, seconds
  // The parameter server (ps.*); its optimizer is the run's, set when the
  // backend starts.
  ps::PsOptions ps;
  bool ps_sparse = false;     // ps.sparse
  // What the backends check themselves against, named in their refusals.
  std::string model_type;     // model.type
  std::string device;         // train.device
};

SyncOptions sync_options(const Config& config);

// The `ps` section alone (ps.servers, ps.colocated, ps.consistency,
// ps.staleness, ps.backup_workers, ps.on_worker_failure, ps.interface,
// ps.align_shards, ps.chunk_bytes, ps.shard_chunks, ps.timeout,
// ps.security), with `optimizer` for the servers; for the tools and tests
// that launch the parameter server without a training run.
ps::PsOptions ps_options(const Config& config, const OptimizerOptions& optimizer = {});

}  // namespace psar
