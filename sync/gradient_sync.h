#pragma once
// GradientSync: the one seam between the training loop and gradient
// synchronization. The trainer calls step() once per step on the flat
// parameter and gradient arenas; every backend — each allreduce algorithm,
// the parameter server, NCCL — sits behind it and is chosen by name
// (`--sync ring`). Adding a backend: one file and one line in sync_registry.cc.

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "core/optim.h"
#include "core/param_store.h"
#include "sync/sync_options.h"

namespace psar {

namespace pp {
class ParamGate;
class GradientSink;
}  // namespace pp

// Training state a backend holds outside the store's arenas, in bytes
// (ZeRO stages 2 and 3): its piece of the parameters (stage 3) or of the
// summed gradients (stage 2), and the layers' gathered parameter and
// gradient buffers at their largest during the last step.
struct HeldBytes {
  int64_t params = 0;
  int64_t grads = 0;
  int64_t gathered_peak = 0;
};

class GradientSync {
 public:
  virtual ~GradientSync() = default;
  virtual std::string name() const = 0;
  // After backward on every worker: leaves in `params` the next step's
  // parameters, as if `optimizer` had stepped on the average of all workers'
  // gradients. `grads` may be overwritten.
  virtual void step(std::span<float> params, std::span<float> grads) = 0;
  // Traffic this backend moved from this rank so far.
  virtual CommCounters counters() const = 0;

  // Overlap (docs/overlap.md): instead of step(), the trainer hands the
  // backend ranges of the arenas as their gradients become final —
  // sync_range() on a communication thread, one range at a time, in an order
  // every rank of the group agrees on — and once every float went through
  // one range, finish() on the main thread completes the step. Backends that
  // cannot return false from overlaps().
  virtual bool overlaps() const { return false; }
  // Arena floats [offset, offset + grads.size()): params and grads are those
  // slices of the arenas.
  virtual void sync_range(int64_t offset, std::span<float> params, std::span<float> grads);
  virtual void finish(std::span<float> params, std::span<float> grads);
  // The parameter server's layer-wise start (docs/overlap.md). Once it is
  // on, the communication thread ends each step itself — complete(), after
  // its last sync_range — while the main thread goes on to the next forward:
  // finish() no longer waits for the new parameters, and `landed` hears, on
  // the communication thread, of each arena range [begin, end) whose next
  // parameters are in place. Returns how long a wait for them may last (the
  // backend's deadline), or 0 for a backend without it.
  virtual double start_layerwise(std::function<void(int64_t, int64_t)> landed);
  virtual void complete() {}
  // Layer-wise, on the communication thread: blocks until the ranges given
  // so far have left this rank, so that the range chosen next by priority
  // is not queued behind them.
  virtual void wait_sent() {}
  // The optimizer this rank steps, for checkpoints; null when the optimizer
  // state lives elsewhere (the parameter server's shards save their own).
  virtual Optimizer* optimizer() { return nullptr; }
  // Whether servers keep part of the training state (the parameter
  // server's shards): they save it at train.checkpoint_every steps only.
  virtual bool servers_keep_state() const { return false; }
  // How many workers' gradients the last step's new parameters averaged,
  // where a backend can average fewer than the group (the parameter server
  // under ps.on_worker_failure: continue); 0 = the whole group.
  virtual int averaged() const { return 0; }
  // Sparse models (docs/sparse.md): before each step, the rows of
  // SyncInit::sparse this rank's batch touched (ascending, unique; every
  // other row's gradient is zero). Dense backends ignore them.
  virtual void set_touched_rows(std::span<const int64_t>) {}

  // Sharded parameters (ZeRO stage 3, sync/layer_gather.h): the model's
  // layers ask this gate for their parameters and report their gradients to
  // this sink (the executor's ParamGate and GradientSink) instead of reading
  // the store's arenas, which the backend releases; null for the others.
  virtual pp::ParamGate* param_gate() { return nullptr; }
  virtual pp::GradientSink* gradient_sink() { return nullptr; }
  // Before each step's forward.
  virtual void begin_step() {}
  // Before an evaluation, a checkpoint and the end of training: the whole
  // parameters back in the store's arenas (collective over the group).
  virtual void gather_params() {}
  // After step() and the trainer's copy of tied parameters into the store
  // (share_tied_params): the backend takes the copied values.
  virtual void params_shared() {}
  virtual HeldBytes held_bytes() const { return {}; }
};

// A sparse model's embedding tables: the arena's head [0, floats) as rows
// of row_floats floats (docs/sparse.md); floats = 0 for a dense model.
struct SparseRows {
  int64_t floats = 0;
  int64_t row_floats = 0;
};

// Where and when the run checkpoints, and the step it resumes from
// (core/checkpoint.h). Backends that keep state outside the worker ranks
// take part: the parameter server's shards save and restore their own.
struct CheckpointPlan {
  std::string run_dir;       // "" = no checkpoints
  int64_t every = 0;         // train.checkpoint_every (0 = never)
  int64_t resume_step = -1;  // ≥ 0: the checkpoint this run continues from
  std::string resume_dir;    // the run directory it is in (run_dir, or the run branched from)
};

// What a backend is built from. Every rank of `world` calls the factory
// collectively, after the model's ParamStore is finalized (identical initial
// parameters everywhere).
struct SyncInit {
  Comm& world;
  SyncOptions options;  // the run's sync.* and ps.* keys, read once (sync_options)
  ParamStore& params;
  OptimizerOptions optimizer;
  // The group whose gradients are averaged, when it is not the world (with
  // tensor or pipeline parallelism: the data-parallel group of this rank).
  Comm* data_parallel = nullptr;
  CheckpointPlan checkpoints;
  SparseRows sparse;
  // The model's layers' arena ranges (Model::layer_ranges: what ZeRO stage 3
  // gathers one at a time) and those of parameters tied across pipeline
  // stages (Model::tied_params).
  std::vector<std::pair<int64_t, int64_t>> layers;
  std::vector<std::pair<int64_t, int64_t>> tied;
};

struct SyncSetup {
  // The backend, on worker ranks; null on a dedicated server rank.
  std::unique_ptr<GradientSync> sync;
  // The data-parallel communicator of the workers. For allreduce backends it
  // is the world; the parameter server with dedicated servers splits them off.
  Comm* workers = nullptr;
  std::unique_ptr<Comm> owned_workers;
  // Set on a dedicated server rank instead of `sync`: serves until the job ends.
  std::function<void()> serve;
  // Where the backend's servers listen, one line for the start of a run's
  // output ("" = nothing to say).
  std::string endpoints;
};

struct SyncEntry {
  const char* name;
  SyncSetup (*make)(SyncInit&);
  const char* summary;
  // World ranks the backend takes as dedicated servers (they do not train).
  int (*server_ranks)(const SyncOptions& options);
  // Whether it can sync one slice of a model cut by tensor or pipeline
  // parallelism over that slice's data-parallel group.
  bool model_parallel;
  // Whether it can go on without some workers: the b slowest of each step
  // (ps.backup_workers) and failed ones (ps.on_worker_failure: continue).
  bool drops_workers = false;
};

// What the trainer plans with before any backend is built: the registry
// entry's capabilities, or an allreduce algorithm's (no servers, any group).
struct SyncCapabilities {
  int server_ranks = 0;
  bool model_parallel = true;
};
// Those of options.backend. A ConfigError for ps.backup_workers or
// ps.on_worker_failure: continue on a backend that cannot drop workers
// (every allreduce: a collective has no "first N to arrive", and a dead rank
// stalls every rank's result), and for sync.zero's refusals.
SyncCapabilities sync_capabilities(const SyncOptions& options);

// Backends other than the allreduce algorithms (which are all available by
// their own names through the allreduce registry).
std::span<const SyncEntry> sync_registry();
std::vector<std::string> sync_names();  // every name --sync accepts
// Throws ConfigError listing the choices for an unknown name.
SyncSetup make_gradient_sync(const std::string& name, SyncInit& init);

}  // namespace psar
