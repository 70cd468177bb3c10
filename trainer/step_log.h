#pragma once
// StepLog: the per-step files of a run directory — steps.csv, axes.csv,
// tp.csv (t > 1) and eval.csv — on disk as the run goes on, so that a run
// killed at any moment keeps its rows up to the last flush.
//
// Every worker keeps its rows of the steps since the last flush (a few
// hundred bytes each). flush() — at every log interval, every checkpoint and
// the end, on every worker at the same steps — first gives each pending row
// its replica's loss (the last pipeline stage's, over the pipeline group),
// then gathers the workers' rows over their control plane to rank 0, which
// appends them to the files in one write each and fsyncs them. The cost is
// one small all-gather per log interval; the rows are not counted in any
// traffic column.
//
// A resumed run (resume_step ≥ 0) continues the files of the run it resumes
// (resume_from): rank 0 writes the rows of steps ≤ resume_step back (rows a
// killed run flushed after its last checkpoint are recomputed, bitwise the
// same) — into the same files, or, for a branch, into out_dir's, leaving the
// old run's as they are.
//
// Every append holds whole rows: when a write or its fsync fails (a full
// disk), the file is cut back to its length before the append and the error
// is thrown, so a reader never sees part of a row or ranks ending at
// different steps.

#include <cstdint>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "core/csv.h"
#include "core/recompute.h"
#include "modelpar/grid.h"
#include "trainer/axes.h"
#include "trainer/run_common.h"

namespace psar {

struct StepLogOptions {
  std::string out_dir;       // "" = write nothing (the gathers still happen)
  bool tp_csv = false;       // also write tp.csv (t > 1)
  int64_t resume_step = -1;  // ≥ 0: continue the run directory's files after this step
  std::string resume_from;   // the run directory resumed (with resume_step ≥ 0)
  // The run's modes, written on every row so that a steps.csv read or
  // plotted alone says what produced it.
  bool sequence_parallel = false;          // parallel.sequence_parallel
  Recompute recompute = Recompute::kNone;  // train.recompute
};

class StepLog {
 public:
  // Collective over `workers`: rank 0 starts the files.
  StepLog(Comm& workers, Comm& pipeline, const GridShape& shape, const GridCoord& coord,
          StepLogOptions options);
  void add(const StepRow& row, const AxisRow& axis);
  // Worker rank 0's evaluations are the ones written (every rank computed the same).
  void add_eval(int64_t step, double epoch, double test_loss, double test_accuracy);
  // Collective over the workers (and each one's pipeline group).
  void flush();
  // This replica's loss of every step flushed so far in this process.
  const std::vector<double>& losses() const { return losses_; }

 private:
  Comm& workers_;
  Comm& pipeline_;
  GridShape shape_;
  GridCoord coord_;
  StepLogOptions options_;
  std::vector<StepRow> rows_;  // pending
  std::vector<AxisRow> axes_;  // pending
  CsvWriter evals_{{"step", "epoch", "test_loss", "test_accuracy"}};
  std::vector<double> losses_;
};

// The header line of steps.csv.
extern const char* const kStepsCsvHeader;

}  // namespace psar
