#pragma once
// The parallelism planner of `psar plan` (docs/simulate.md): every grid
// (p, t, d), micro-batch b (m = B / (d·b)), schedule (1F1B, or interleaved
// over v chunks) and scatter/gather that fits in one GPU's memory, ranked by
// the simulated step (sim/step.h). The memory of a GPU is the sum of four
// terms, each per GPU of its pipeline stage, and a grid fits when its
// fullest stage fits:
//
//   weights      P_stage · dtype_bytes     (16-bit weights)
//   gradients    P_stage · grad_bytes      (Megatron keeps fp32 main gradients)
//   optimizer    P_stage · 12              (Adam: fp32 master weight, m and v;
//                                           not sharded over d)
//   activations  in_flight · layers per chunk · A_layer (+ one layer's working
//                set with recomputation) (+ the fp32 logits of one
//                micro-batch on the last stage, 4·b·s·V/t)
//
// P_stage is sim::stage_params. in_flight is the schedule's own peak count
// of (micro-batch, chunk) forwards a stage holds (the `peak` of the
// modelpar/pp registry): 1F1B, stage r holds p − r micro-batches;
// interleaved, Megatron's warm-up count min(2(p − r − 1) + (v − 1)·p + 1, m·v)
// chunks of L/(p·v) layers (m·v on every stage when m = p: all forwards first) — for stage 0 this
// is L·(1 + (p − 1)/(p·v)) layers' worth, the factor of Korthikanti et al. 2022. A_layer, what one
// block keeps for its backward (Korthikanti et al. 2022, tensor parallel without sequence
// parallelism, 16-bit activations): s·b·h·(10 + 24/t + 5·a·s/(h·t)) bytes;
// with full recomputation only the block's input, dtype_bytes·s·b·h.

#include <cstdint>
#include <string>
#include <vector>

#include "sim/cluster.h"
#include "sim/gpt_cost.h"
#include "sim/step.h"

namespace psar::sim {

// Adam's state per parameter: fp32 master weight, first and second moment.
inline constexpr int kAdamBytesPerParam = 12;
// The logits one micro-batch keeps for the cross-entropy, per element (fp32).
inline constexpr int kLogitBytes = 4;

struct Memory {
  int stage = 0;       // the fullest stage
  int64_t params = 0;  // parameters per GPU there
  int in_flight = 0;   // (micro-batch, chunk) activations it holds at its peak
  double weights = 0, gradients = 0, optimizer = 0, activations = 0;
  double total() const { return weights + gradients + optimizer + activations; }
};

// One block's activations kept for the backward, one micro-batch, one GPU of
// a TP group of t, without recomputation (the formula above).
double block_activation_bytes(const GptShape& g, int64_t microbatch, int tp, int dtype_bytes);
// The memory of one GPU of pipeline stage `stage`, and of the fullest stage.
Memory stage_memory(const StepSpec& spec, int stage);
Memory peak_memory(const StepSpec& spec);

struct PlanOptions {
  GptShape model;
  int64_t batch = 0;                              // B
  std::vector<int64_t> microbatches{1, 2, 4, 8};  // b to try
  std::vector<int> chunks{1, 2, 4};               // v to try: 1 is 1F1B, more is interleaved
  std::vector<int> tps;                           // t to try; empty: every divisor of the node
  bool recompute = false;
  int dtype_bytes = 2, grad_bytes = 4;
  std::string sync = "ring", tp_allreduce = "ring", order = "tp-dp-pp";
};

struct Candidate {
  StepSpec spec;
  Memory memory;
  StepResult result;  // without the action order
};

struct Plan {
  std::vector<Candidate> ranked;  // every fitting candidate, fastest first
  int enumerated = 0;             // candidates whose memory was counted
  double smallest_total = 0;      // least memory any candidate needs (bytes)
  StepSpec smallest;              // and which
};

// ConfigError naming the field when no candidate can exist or none fits:
// t (parallel.tp) not dividing cluster.gpus_per_node, no t dividing
// model.heads and model.d_model, no grid whose d divides train.batch_size,
// or cluster.gpu.memory below the least any grid needs (stated).
Plan plan(const ClusterSpec& cluster, const PlanOptions& options);

}  // namespace psar::sim
