#pragma once
// Pipeline-parallel training: `psar train` with parallel.pp = p > 1.
//
// The world is a (p, t = 1, d) grid (modelpar/grid.h): p pipeline stages,
// each replicated d times. Each step, every replica takes its slice of the
// global batch (B/d samples, the same slice the data-parallel trainer would
// give it), cuts it into m micro-batches of b = B/(d·m), and its p stages run
// the configured schedule (parallel.schedule, parallel.chunks = v) with the
// stage executor (modelpar/pp/executor.h); the m micro-batches' gradients add
// up to the gradient of the slice's mean loss. Then each stage averages its
// gradients over its d replicas with the configured sync backend and steps
// its optimizer once: the result equals the serial model trained on the
// whole batch, up to float rounding. docs/pipeline.md, "Training".

#include "comm/comm.h"
#include "comm/netem.h"
#include "core/config.h"
#include "modelpar/grid.h"
#include "trainer/trainer.h"
#include "workloads/dataset.h"

namespace psar {

// Called by train() once the grid exists. ConfigError (before any step) for
// tensor parallelism alongside, a model without pipeline stages, a schedule
// that cannot run the shape (m < p, m % p for interleaved, p·v > layers), or
// a global batch that d·m does not divide. TrainResult::params holds the
// whole model, gathered from the stages in the serial model's order.
TrainResult train_pipeline(Comm& world, ProcessGrid& grid, const Config& config,
                           const TrainOptions& options, const DatasetPair& data,
                           const NetModel& network);

}  // namespace psar
