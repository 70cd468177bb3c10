#pragma once
// The training loop's checkpoints (docs/checkpoints.md): which one --resume
// continues from, what one worker writes, and how a worker restores its
// file — or, onto another data-parallel size, its cell's replica 0 or its
// resharded piece of the optimizer state. The files' format is
// core/checkpoint.h's.

#include <cstdint>
#include <functional>
#include <string>

#include "comm/comm.h"
#include "core/checkpoint.h"
#include "core/param_store.h"
#include "modelpar/grid.h"
#include "sync/gradient_sync.h"
#include "trainer/run_common.h"
#include "trainer/trainer.h"
#include "workloads/model.h"

namespace psar {

// The checkpoint --resume continues from: the latest complete one in
// out_dir as world rank 0 sees it (broadcast, so every rank reads the same
// one), checked against this job on every rank. -1 for a new run.
// `resize`: whether it was written by another data-parallel size (dp_resize).
int64_t find_resume_step(Comm& world, const ConfigRecord& config, const TrainOptions& options,
                         const JobIdentity& job, DpResize& resize);

// This worker's part of a checkpoint: its slice of the parameters, the
// optimizer state it keeps, where the data order stands, the model's RNG.
CheckpointFile rank_checkpoint(int rank, const GridCoord& coord, int64_t step, const StepPlan& plan,
                               uint64_t seed, const ParamStore& store, GradientSync& sync,
                               const Model& model);

// Restores what rank_checkpoint wrote for (rank, coord, step); DataError
// naming the file when it holds another rank, step, coordinate or size.
void restore_rank(const CheckpointFile& f, int rank, const GridCoord& coord, int64_t step,
                  ParamStore& store, GradientSync& sync, Model& model);

// The bytes of the optimizer state this rank keeps (its buffers' sizes).
int64_t optimizer_state_bytes(GradientSync& sync);

// A checkpoint written by `old_n` data-parallel replicas, resumed by replica
// `rank` of `n` of the same (stage, tensor rank) cell (dp_resize's reshard);
// `old_rank(q)` is the world rank that wrote the cell's replica q. The
// parameters (replicated over the cell), the step's counters and the model's
// RNG from replica 0's file, the optimizer state resharded from the old
// replicas' pieces (core/checkpoint.h).
void restore_resharded(const std::string& dir, int old_n, const std::function<int(int)>& old_rank,
                       int rank, int n, int64_t step, ParamStore& store, GradientSync& sync,
                       Model& model);

}  // namespace psar
