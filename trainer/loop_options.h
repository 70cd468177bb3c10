#pragma once
// Every key a training run reads, read once at its start (run_options) into
// typed options per subsystem, so that neither the loop (trainer.cc) nor
// the subsystems it calls read a config key as they go: the loop's own
// (LoopOptions: the grid and the schedule, parallel.*; the device, the seed,
// the steps, checkpoints and early stops, train.*), the sync seam's
// (SyncOptions, sync/sync_options.h), the model's and the data's
// (WorkloadOptions, workloads/workload_options.h), the optimizer's, the injected
// heterogeneity (HeteroPlan) and this rank's emulated network (NetModel).
// Every ConfigError a key alone can cause is raised here, naming the key,
// before any work; those that need the world, the data or the backend stay
// with the step that learns them.

#include <cstdint>
#include <string>
#include <vector>

#include "comm/netem.h"
#include "core/config.h"
#include "core/device.h"
#include "core/optim.h"
#include "modelpar/pp/partition.h"
#include "sync/sync_options.h"
#include "trainer/hetero.h"
#include "workloads/workload_options.h"

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

// train.*: how long the run is and how often it logs and evaluates
// (plan_steps turns them into a StepPlan once the data's size is known).
struct StepOptions {
  int64_t steps = 0;    // train.steps (0 = unset)
  double epochs = 0;    // train.epochs (0 = unset)
  bool has_steps = false, has_epochs = false;
  int64_t batch_size = 0;
  int64_t log_every = 1;
  int64_t eval_every = 0;
};

// What summary.csv records of the configuration beside the result.
struct RecordOptions {
  std::string experiment;  // experiment.name
  std::string device;      // train.device
  // sync.nccl_algo and sync.nccl_proto where NCCL runs (the sync backend or
  // the TP all-reduces), "" otherwise.
  std::string nccl_algo, nccl_proto;
};

struct LoopOptions {
  ParallelOptions parallel;
  StepOptions steps;
  RecordOptions records;
  std::string model_type;    // model.type
  Device device = Device::kCpu;  // train.device, parsed (not yet checked against the run)
  uint64_t seed = 0;
  bool trace = false;            // train.trace
  int64_t checkpoint_every = 0;  // 0 = off
  int64_t exit_at_step = 0;      // 0 = off
  double exit_after = 0;         // seconds; 0 = off
};

struct RunOptions {
  LoopOptions loop;
  SyncOptions sync;
  WorkloadOptions workload;    // model.*, data.*
  OptimizerOptions optimizer;  // optimizer.*
  HeteroPlan hetero;           // hetero.*
  NetModel network;            // net.*, hetero.nic_* for this world rank
};

// ConfigError naming the key for a negative train.checkpoint_every,
// train.exit_at_step or train.exit_after, an unknown train.device, and for
// whatever sync_options, HeteroPlan::from_config and net_model_of_rank refuse.
RunOptions run_options(const Config& config, int rank, int world_size);

}  // namespace psar
