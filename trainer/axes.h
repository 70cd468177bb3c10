#pragma once
// Per-axis accounting of a 3D run (axes.csv, docs/outputs.md): per step and
// rank, the floats, bytes and seconds of each kind of communication beside
// the count its formula predicts.
//
//   tp  the tensor-parallel all-reduces inside the layers (modelpar/tp):
//       4 all-reduces of b·T·d floats per block per micro-batch, forward
//       plus backward (the GPT, column_row split; Model::tp_allreduce_floats)
//   pp  the activations and gradients crossing stage boundaries: b·T·d
//       floats per boundary per micro-batch each way, b·T·d/t with
//       scatter/gather (whose all-gathers over the TP group count here too,
//       in pp_gather_bytes_sent, not under tp)
//   dp  the gradient sync of this rank's parameters over its data-parallel
//       group: the stage's (TP-sharded) parameter count per batch; in the
//       hybrid CNN (parallel.hybrid) the conv parameters, all-reduced over
//       the tensor-parallel group, which also splits the batch
//   tp  all-gathers: the hybrid CNN's features, b·F floats per micro-batch
//       (the gradient going back is the f all-reduce of the same b·F)
//
// Floats are what the algorithm is handed (an all-reduce of n floats counts
// n); bytes are what this rank's communicator sent, which depends on the
// algorithm (a ring all-reduce sends 2(t−1)/t·n·4 bytes).

#include <cstdint>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "modelpar/grid.h"
#include "modelpar/tp/group.h"

namespace psar {

struct AxisRow {
  int64_t step = 0;
  double compute_s = 0;
  TpCounters tp;  // this step's
  int64_t tp_floats_formula = 0, tp_bytes_sent = 0, tp_messages = 0;
  int64_t pp_floats_sent = 0, pp_floats_formula = 0, pp_bytes_sent = 0, pp_gather_bytes_sent = 0;
  double pp_s = 0;  // blocked on receives, posting and completing sends, all-gathers
  int64_t dp_floats = 0, dp_floats_formula = 0, dp_bytes_sent = 0;
  double dp_s = 0;
  int64_t tp_gather_floats_formula = 0;  // the all-gathers' floats: tp.all_gather_floats
  // Training state this rank holds allocated after the step, in bytes: the
  // parameter arena, the gradient arena, the optimizer's state buffers (a
  // sharded optimizer's piece only, sync/zero_sync.h; none on a
  // parameter server's worker).
  int64_t params_bytes = 0, grads_bytes = 0, optimizer_bytes = 0;
  // ZeRO stage 3: the layers' gathered parameter and gradient buffers at
  // their largest during the step (sync/layer_gather.h; the parameter
  // arena is then released and params_bytes this rank's piece).
  int64_t gathered_bytes = 0;
};

// The rows of axes.csv and, when t > 1, tp.csv (the tensor-parallel columns
// alone, as experiments/tp_report.py reads them), for worker rank `rank` at
// grid coordinate `coord`; the run's StepLog (step_log.h) writes them.
extern const char* const kAxesCsvHeader;
extern const char* const kTpCsvHeader;
std::string axes_csv_row(int rank, const GridCoord& coord, const AxisRow& row);
std::string tp_csv_row(int rank, const GridShape& shape, const GridCoord& coord,
                       const AxisRow& row);

}  // namespace psar
