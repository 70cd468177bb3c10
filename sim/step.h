#pragma once
// One training step of a GPT on the modelled cluster (docs/simulate.md):
// the pipeline schedule psar executes (modelpar/pp, the same Schedule
// objects), each action's compute from its FLOPs (sim/gpt_cost.h) at
// gemm_efficiency of peak plus a fixed cost per kernel, the tensor-parallel
// all-reduces of every block on the action's critical path, the transfers
// between stages as messages on links, and at the end each stage's
// data-parallel sync — the sync algorithm's own program, every group at
// once on the shared links (sim/collective.h) — or the parameter server's
// pushes and pulls per shard.
//
// Symmetry: the t ranks of a tensor-parallel group run the same actions in
// lockstep (their all-reduces synchronize them), so one pipeline of TP
// groups stands for each data-parallel replica. With `symmetric`, replica 0
// stands for all d (their transfers see the same contention by
// construction); without, every replica is replayed with its own transfer
// times and a stage's sync starts when its slowest replica is done. Both
// simulate every data-parallel group's messages.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "allreduce/allreducer.h"
#include "allreduce/program.h"
#include "core/config.h"
#include "modelpar/pp/schedule.h"
#include "ps/sharding.h"
#include "sim/cluster.h"
#include "sim/gpt_cost.h"

namespace psar::sim {

// Kernels of one block's forward, each paying kernel_overhead: LN, QKV GEMM,
// scores GEMM, softmax, dropout, context GEMM, projection GEMM, bias+dropout+
// residual, LN, fc1 GEMM, GeLU, fc2 GEMM, bias+dropout+residual. Backward
// launches twice as many.
inline constexpr int kKernelsPerBlockForward = 13;
// The head's forward: logits GEMM, cross-entropy.
inline constexpr int kKernelsHeadForward = 2;
// The optimizer step, memory-bound: per parameter Adam reads the fp32
// gradient (4), reads and writes the fp32 master weight, m and v (3 · 8) and
// writes the 16-bit weight (2) — 30 bytes at cluster.gpu.memory_bandwidth,
// over the shard a GPU steps (1/d with ZeRO). Counted, not fitted.
inline constexpr int kAdamStepBytesPerParam = 30;
// The vocabulary-parallel cross-entropy over the b·s·V/t logits, per
// element: forward reads the 16-bit logits and writes and rereads fp32
// probabilities (dtype + 8), backward reads them and writes the 16-bit
// gradient (4 + dtype). Counted, not fitted.
inline constexpr int kCrossEntropyForwardBytes = 8, kCrossEntropyBackwardBytes = 4;
// The embedding on the first virtual stage (Megatron's vocabulary-parallel
// embedding), per element of the micro-batch's [b, s, h] in dtype units D:
// forward the lookup of each TP rank's rows (read D, write D) and the
// position embedding's add (read 2D, write D), 5D, then the dropout (read D,
// write D and a 1-byte mask; on s/t tokens with sequence parallelism);
// backward the dropout's gradient (2D + 1, on s/t tokens with SP) and the
// scatter-add into the fp32 word-embedding gradient (read D and the
// position gradient's D, read and write the fp32 row, 8). Counted, not fitted.
inline constexpr int kKernelsEmbeddingForward = 3, kKernelsEmbeddingBackward = 3;
// Selective recomputation's kernels: scores GEMM, softmax, dropout, context GEMM.
inline constexpr int kAttentionCoreKernels = 4;

struct StepSpec {
  GptShape model;
  int pp = 1, tp = 1, dp = 1;
  std::string order = "tp-dp-pp";
  int64_t batch = 1;       // B, sequences per step
  int microbatches = 1;    // m
  int64_t microbatch = 1;  // b = B / (d·m)
  int chunks = 1;          // v
  std::string schedule = "1f1b";
  bool scatter_gather = false;
  // simulate.blocking_p2p: a stage waits for its send to the next (or
  // previous) stage before its next action, as Megatron's 1F1B and
  // interleaved schedules wait on each batched send/receive (without
  // --overlap-p2p-communication); the sender is held the wire time, the
  // receiver's scatter/gather all-gather stays on the receiver. Off: psar's
  // executor, whose sends are non-blocking (modelpar/pp/replay.h).
  bool blocking_p2p = false;
  // simulate.tp_comm_overlap (needs sequence_parallel; Megatron-Core's
  // --tp-comm-overlap): each block's TP all-gathers and reduce-scatters run
  // beside the GEMMs that read or make them, a pass exposing only what each
  // collective outlasts its GEMM (sim/step.cc, overlap_tp_with_gemms).
  bool tp_comm_overlap = false;
  std::vector<int> vstage_layers;  // [p·v] layers per virtual stage
  std::string sync = "ring";       // allreduce algorithm, or "ps"
  int ps_servers = 1;
  bool ps_colocated = false;
  // The PS streams each shard in chunks as psar's launch plans them
  // (ps/sharding.h: ps.chunk_bytes, ps.shard_chunks).
  int64_t ps_chunk_bytes = 1 << 20;
  int64_t ps_shard_chunks = 0;
  // Overlap (docs/overlap.md, docs/simulate.md): each stage's gradients are
  // synced in buckets of bucket_bytes as its last backward makes them final.
  bool overlap = false;
  int64_t bucket_bytes = 1 << 20;
  std::string tp_allreduce = "ring";
  Recompute recompute = Recompute::kNone;  // train.recompute
  // parallel.sequence_parallel (t > 1): each block's two TP all-reduces per
  // pass become a reduce-scatter and an all-gather (ring programs on the TP
  // group), the layer norms, dropouts and residual adds run on s/t tokens,
  // and a stage sends 1/t of the activation to the next (no all-gather).
  bool sequence_parallel = false;
  // sync.zero (an allreduce sync): 1 and 2 reduce-scatter the gradients over
  // the data-parallel group and all-gather the updated 16-bit weights after
  // the step (ring programs); 3 all-gathers each block's weights before its
  // forward and its backward, prefetched one block ahead, and
  // reduce-scatters its gradients after its backward, on the communication
  // stream beside the compute.
  int zero = 0;
  // simulate.overlap_param_gather (ZeRO 1 and 2, Megatron's
  // --overlap-param-gather): the updated weights are all-gathered bucket by
  // bucket (as the gradients' buckets) behind the next step's forward, so a step exposes
  // one bucket's gather, the first, not the whole stage's.
  bool overlap_param_gather = false;
  bool flash_attention = false;  // the scores never reach GPU memory (block_memory_bytes)
  int dtype_bytes = 2;  // activations and TP all-reduces
  int grad_bytes = 4;   // one gradient element in memory and on the PS's wire
  // The sync.* options (allreduce_options): segments, and an allreduce
  // sync's elements on the wire (dtype); TP all-reduces take them with
  // float32 (activation_allreduce_options).
  AllreduceOptions allreduce;
  bool symmetric = true;
};

// From the config (model.*, parallel.*, train.batch_size, sync.*, ps.*,
// simulate.*) on `cluster`: d = GPUs / (p·t). ConfigError naming the field
// for a grid or batch the cluster cannot hold (t not dividing
// cluster.gpus_per_node, p·t not dividing the GPUs, B not a multiple of d·m,
// heads or hidden not divisible by t, a model that is not a GPT, vocab 0).
StepSpec step_from_config(const Config& config, const ClusterSpec& cluster);
// The model's shape from model.layers, d_model, heads, seq_len, vocab and
// simulate.kv_heads, ffn, mlp; ConfigError naming the key for a negative
// width or a kv_heads that does not divide model.heads.
GptShape gpt_shape_from_config(const Config& config);
// The same checks on a spec built in code (the planner's).
void check_step(const StepSpec& spec, const ClusterSpec& cluster);

// Parameters one GPU of pipeline stage `stage` holds: its blocks, the
// embedding (V·h + s·h) on the first, the tied head's copy (V·h, p > 1) and
// the final layer norm on the last, all divided by t.
int64_t stage_params(const StepSpec& spec, int stage);

struct StageTimes {
  double compute_s = 0;  // Σ FLOP time and kernel overheads of its actions
  double tp_s = 0;       // Σ tensor-parallel all-reduces inside its actions
  double idle_s = 0;     // pipeline makespan − compute − tp: bubble and transfer waits
  double end_s = 0;      // its last action ends
  double sync_s = 0;     // its data-parallel sync, from end_s to done (ZeRO 1, 2: with the step)
  double optimizer_s = 0;  // its optimizer step (kAdamStepBytesPerParam)
  int64_t params = 0;    // parameters one of its GPUs holds
};

struct StepResult {
  double step_s = 0;
  double pipeline_s = 0;         // makespan of the schedule
  double sync_exposed_s = 0;     // step_s − pipeline_s: the sync and the optimizer step
  double bubble_fraction = 0;    // pp::Prediction's: idle over busy
  double idle_share = 0;         // idle over p·makespan
  double tp_allreduce_s = 0;     // one all-reduce of [b, s, h]
  double transfer_s = 0;         // one activation from stage 0 to 1 (0 if p = 1)
  double embedding_sync_s = 0;   // the tied embedding's gradient all-reduce (p > 1)
  double flops = 0;              // of the step, all GPUs, recomputation included
  double tflops_per_gpu = 0;     // flops / (step_s · GPUs) / 1e12
  double model_flops = 0;        // without the recomputed FLOPs
  double mfu = 0;                // model_flops / (step_s · GPUs · peak)
  int gpus = 0;
  std::vector<StageTimes> stages;
  // Replica 0's actions per stage, in the order the replay ran them.
  std::vector<std::vector<pp::Action>> order;
};

StepResult simulate_step(const ClusterSpec& cluster, const StepSpec& spec);

// The parameter server as a program on d workers (ranks 0..d−1) and S
// shards (ranks d..d+S−1), streamed as psar's client streams a push_pull
// (ps/client.h): shard k's key range (`shards`, ps::plan_shards) travels in
// chunks of `chunk_floats` elements (ps::ShardLayout, as the client cuts
// it), chunk 0 of every shard first; in round c every worker pushes chunk c
// of every shard, which adds it, and every shard sends chunk c − 1, updated
// once all workers pushed it (BSP), back to every worker — a NIC sends and
// receives at once, so a shard answers one chunk while the next arrives. A
// shard of C chunks takes C + 1 rounds; with one shard and equal chunks of
// c bytes, (C + 1)·(α + d·c/B), the server NIC's bound d·n/B plus one chunk.
Program ps_program(int workers, std::span<const ps::KeyRange> shards, int64_t chunk_floats);

}  // namespace psar::sim
