#pragma once
// The parallelism planner of `psar plan` (docs/simulate.md): every grid
// (p, t, d), micro-batch b (m = B / (d·b)), schedule of the registry whose
// capabilities admit the shape (modelpar/pp/generators.h: ScheduleCaps), v
// from every count of chunks with L divisible by p·v (v > 1 for interleaved
// schedules only), and scatter/gather that fits in one GPU's memory, ranked
// by the simulated step (sim/step.h). The memory of a GPU is the sum of
// five terms, each per GPU of its pipeline stage, and a grid fits when its
// fullest stage fits in (1 − memory_margin) of the GPU's memory (the margin
// stands for the allocator's fragmentation and the CUDA context):
//
//   weights      P_stage · dtype_bytes     (16-bit weights; ZeRO-3: over d)
//   gradients    P_stage · grad_bytes      (Megatron keeps fp32 main gradients;
//                                           ZeRO-2 and 3: over d)
//   optimizer    P_stage · 12              (Adam: fp32 master weight, m and v;
//                                           ZeRO 1–3 (Megatron's distributed
//                                           optimizer is ZeRO-1): over d)
//   gathered     ZeRO-3: two blocks' weights, dtype_bytes · 2·block/t (the
//                block in use and the prefetched next)
//   activations  in_flight · layers per chunk · A_layer (sim/gpt_cost.h,
//                block_activation_bytes: recomputation, sequence parallelism,
//                flash attention) + the working set of the block being
//                recomputed (full: A_layer without recomputation; selective:
//                its attention core) + the fp32 logits of one micro-batch on
//                the last stage, 4·b·s·V/t
//
// P_stage is sim::stage_params. in_flight is the schedule's own peak count
// of (micro-batch, chunk) forwards a stage holds (the `peak` of the
// modelpar/pp registry): 1F1B, stage r holds p − r micro-batches;
// interleaved, Megatron's warm-up count min(2(p − r − 1) + (v − 1)·p + 1, m·v)
// chunks of L/(p·v) layers (m·v on every stage when m = p: all forwards first) — for stage 0 this
// is L·(1 + (p − 1)/(p·v)) layers' worth, the factor of Korthikanti et al. 2022.

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
  double weights = 0, gradients = 0, optimizer = 0, gathered = 0, activations = 0;
  double total() const { return weights + gradients + optimizer + gathered + activations; }
};
// The memory of one GPU of pipeline stage `stage`, and of the fullest stage.
Memory stage_memory(const StepSpec& spec, int stage);
Memory peak_memory(const StepSpec& spec);

struct PlanOptions {
  GptShape model;
  int64_t batch = 0;                              // B
  std::vector<int64_t> microbatches{1, 2, 4, 8};  // b to try
  std::vector<int> chunks;  // v to try; empty: every v with L divisible by p·v
  std::vector<int> tps;     // t to try; empty: every divisor of the node
  std::vector<std::string> schedules;  // empty: every registered schedule
  Recompute recompute = Recompute::kNone;
  bool sequence_parallel = false;  // where t > 1
  bool flash_attention = false;
  int zero = 0;                 // sync.zero
  double memory_margin = 0;     // share of the GPU's memory kept free
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
