#pragma once
// The training loop's own keys, read once at the start of a run
// (loop_options) into typed options, so that the loop (trainer.cc) reads
// no config key as it goes: the grid and the schedule (parallel.*), the
// device, the seed, checkpoints and early stops (train.*), the overlap's
// buckets (sync.*) and what a failed worker does (ps.on_worker_failure).
// Every ConfigError a key alone can cause is raised here, naming the key,
// before any work; those that need the world or the backend stay with the
// step that learns them. The subsystems the loop calls (the sync backends,
// the models, the datasets) parse their own keys.

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/device.h"
#include "modelpar/pp/partition.h"

namespace psar {

// parallel.*: the grid, the schedule and the micro-batches.
struct ParallelOptions {
  int t = 1, p = 1, v = 1, m = 1;
  std::string order, schedule;
  bool scatter_gather = false;
  bool hybrid = false;  // the hybrid CNN: the workers are one TP group that also splits the batch
  std::vector<int64_t> stage_layers;  // parallel.stage_layers ([] = balanced)
  pp::EndCosts ends;                  // parallel.account_embedding, parallel.account_head
  std::string tp_allreduce;           // the TP group's all-reduce algorithm
  std::string tp_split;               // parallel.tp_split
};

// Overlap (sync.overlap, docs/overlap.md): buckets synced on a
// communication thread while the backward runs.
struct OverlapConfig {
  bool on = false;
  int64_t bucket_floats = 0;          // sync.bucket_bytes / 4, at least 1
  bool front_first = false;           // sync.priority
  int64_t priority_chunk_floats = 0;  // sync.priority_chunk_bytes / 4, at least 1
};

struct LoopOptions {
  ParallelOptions parallel;
  std::string model_type;    // model.type
  std::string sync_backend;  // sync.backend
  OverlapConfig overlap;
  Device device = Device::kCpu;  // train.device, parsed (not yet checked against the run)
  uint64_t seed = 0;
  bool trace = false;            // train.trace
  int64_t checkpoint_every = 0;  // 0 = off
  int64_t exit_at_step = 0;      // 0 = off
  double exit_after = 0;         // seconds; 0 = off
  double sync_timeout = 0;       // sync.timeout, seconds
  double ps_timeout = 0;         // ps.timeout, seconds
  // ps.on_worker_failure: continue — the workers' control plane goes on
  // without a worker that died (sync_capabilities refuses it for any
  // backend but the parameter server).
  bool survives_worker_failure = false;
};

// ConfigError naming the key for a negative train.checkpoint_every,
// train.exit_at_step or train.exit_after, an unknown train.device.
LoopOptions loop_options(const Config& config);

}  // namespace psar
