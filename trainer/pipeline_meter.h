#pragma once
// The measured side of a pipeline run (pipeline.csv, docs/pipeline.md).
//
// Every step, each stage's executor returns a StageRun (its actions' start
// and end on the host clock). PipelineMeter keeps per step this stage's
// first start, last end and compute time, and per action the summed
// durations. At the end the stages of one pipeline exchange them, and for
// each step
//     makespan_k = max_s end_k(s) − min_s start_k(s)   (the batch's pipeline phase)
//     idle_k(s)  = makespan_k − compute_k(s)
// which give, averaged over the measured steps (all but the first, which
// pays for allocations and page faults, when there are several):
//     bubble     = idle / compute            (the notes' (p−1)/m)
//     idle_share = idle / makespan           ((p−1)/(m+p−1) for 1F1B)
// per stage and for the pipeline (Σ over stages). Beside them: the
// simulator replaying the same schedule with each action's measured mean
// duration and free communication (simulate_costs), so the difference is
// what communication and the executor add; the same with every transfer
// delayed by the measured median hop latency (producer's end to waiting
// consumer's start), which should account for most of that difference; the
// schedule's closed form at the measured per-stage costs; and the peak
// stash, measured and predicted.

#include <cstdint>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "modelpar/pp/executor.h"
#include "modelpar/pp/schedule.h"

namespace psar {

class PipelineMeter {
 public:
  PipelineMeter(const pp::Schedule& schedule, int stage);
  // After each step; `measured` = false keeps the step out of the means.
  void add(const pp::StageRun& run, bool measured);

  struct Summary {  // of this rank's pipeline
    double bubble = 0, idle_share = 0;          // measured
    double bubble_sim = 0, idle_share_sim = 0;  // simulator at the measured costs
    double bubble_formula = 0;                  // the schedule's closed form
    double hop_latency = 0;                     // median measured producer end -> consumer start
    double bubble_sim_hop = 0;                  // simulator at the measured costs and hop latency
  };
  // Collective over `pipeline` and then `world`. World rank 0 writes
  // out_dir/pipeline.csv (if out_dir is set), the rows of TP rank 0 of each
  // stage; every rank gets its pipeline's summary.
  Summary write(Comm& pipeline, Comm& world, int dp_rank, int tp_rank, const pp::StageModel& model,
                const std::vector<int>& layers_per_stage, const std::string& out_dir) const;

 private:
  const pp::Schedule& schedule_;
  int stage_;
  std::vector<double> start_, end_, compute_;  // per step
  std::vector<char> measured_;                 // per step
  std::vector<double> action_sum_;             // per action of this stage, measured steps
  static constexpr size_t kKeptSteps = 16;     // spans kept for the hop latency
  std::vector<double> kept_;                   // their (start, end) per action
  int measured_steps_ = 0;
  double recv_wait_ = 0, send_ = 0;            // Σ over measured steps
  int peak_ = 0;
  int64_t peak_bytes_ = 0;
};

}  // namespace psar
