#include "trainer/schema.h"

#include "allreduce/allreducer.h"
#include "allreduce/element_type.h"
#include "core/device.h"
#include "core/optim.h"
#include "core/recompute.h"
#include "modelpar/grid.h"
#include "modelpar/pp/generators.h"
#include "modelpar/tp/parallel_mlp.h"
#include "ps/curve.h"
#include "ps/shard_state.h"
#include "trainer/hetero.h"
#include "sync/gradient_sync.h"
#include "workloads/model.h"

namespace psar {

namespace {

// Choices the registries hold: read each time, so an entry registered later
// (a test's throwaway algorithm or schedule) is a choice as well.
std::vector<std::string> all_allreducers() { return allreducer_names(/*include_device=*/true); }
std::vector<std::string> sparse_table_modes() { return {"gather", "dense"}; }

Schema build() {
  using T = ValueType;
  Schema s;
  // experiment: identification, and keys only the harness reads.
  s.add({"experiment.name", T::kString, "run", "name of the experiment; names its results folder"});
  s.add({"experiment.description", T::kString, "", "free text"});
  s.add({"experiment.ranks", T::kInt, "", "world size the harness launches (mpirun -np)"});
  s.add({"experiment.sweep", T::kAny, "", "harness only: keys to sweep, each a list of values"});
  s.add({"experiment.plot", T::kAny, "", "harness only: what plot.py draws"});

  // model
  s.add({"model.type", T::kString, "mlp", "workload", {}, &model_names});
  s.add({"model.hidden", T::kIntList, "[256, 128]", "mlp: hidden layer widths; cnn: hidden widths of the fully connected layers"});
  s.add({"model.image", T::kIntList, "[1, 28, 28]", "cnn: [channels, height, width] of a sample (their product is the data's features)"});
  s.add({"model.conv", T::kIntList, "[32, 64]", "cnn: output channels of each conv stage (conv, ReLU, max-pool)"});
  s.add({"model.kernel", T::kInt, "3", "cnn: conv kernel size K (K x K)"});
  s.add({"model.stride", T::kInt, "1", "cnn: conv stride"});
  s.add({"model.padding", T::kInt, "1", "cnn: conv zero padding on every side"});
  s.add({"model.pool", T::kInt, "2", "cnn: max-pool window and stride after each conv stage (1 = none)"});
  s.add({"model.tables", T::kIntList, "[1000, 1000]", "dlrm: rows of each embedding table (one table per categorical feature)"});
  s.add({"model.embedding_dim", T::kInt, "16", "dlrm: floats per embedding row"});
  s.add({"model.activation", T::kString, "relu", "mlp: activation", {"relu", "gelu"}});
  s.add({"model.layers", T::kInt, "2", "gpt / synthetic_stages: transformer blocks or layers"});
  s.add({"model.d_model", T::kInt, "64", "gpt: hidden size"});
  s.add({"model.heads", T::kInt, "4", "gpt: attention heads"});
  s.add({"model.seq_len", T::kInt, "32", "gpt: context length"});
  s.add({"model.vocab", T::kInt, "0", "gpt: vocabulary size (0 = from the data)"});
  s.add({"model.dropout", T::kFloat, "0.0", "gpt: dropout probability"});
  s.add({"model.init_std", T::kFloat, "0.02", "gpt: stddev of weight initialization"});
  s.add({"model.forward_time", T::kDuration, "1ms", "synthetic_stages: forward time per layer"});
  s.add({"model.backward_time", T::kDuration, "1ms", "synthetic_stages: input-gradient time per layer"});
  s.add({"model.weight_grad_time", T::kDuration, "1ms", "synthetic_stages: weight-gradient time per layer"});
  s.add({"model.activation_bytes", T::kBytes, "64K", "synthetic_stages: activation size per micro-batch"});

  // data
  s.add({"data.dataset", T::kString, "fashion_mnist", "dataset", {}, &dataset_names});
  s.add({"data.path", T::kString, "/usr/share/datasets/fashion-mnist", "fashion_mnist: folder of IDX files; text: a plain-text file"});
  s.add({"data.train_limit", T::kInt, "0", "use only the first N training samples (0 = all)"});
  s.add({"data.test_limit", T::kInt, "0", "use only the first N test samples (0 = all)"});
  s.add({"data.synthetic_samples", T::kInt, "4096", "synthetic / zipf: number of samples"});
  s.add({"data.synthetic_features", T::kInt, "32", "synthetic: input features; zipf: dense features"});
  s.add({"data.zipf_ids", T::kIntList, "[]", "zipf: ids drawn per table ([] = model.tables; more than the table's rows is a ConfigError)"});
  s.add({"data.zipf_skew", T::kFloat, "1.05", "zipf: exponent s of the ids' Zipf law, P(rank k) ∝ k^-s (0 = uniform)"});
  s.add({"data.synthetic_classes", T::kInt, "4", "synthetic / zipf: classes"});

  // optimizer
  s.add({"optimizer.type", T::kString, "sgd", "optimizer", {}, &optimizer_names});
  s.add({"optimizer.lr", T::kFloat, "0.1", "learning rate"});
  s.add({"optimizer.momentum", T::kFloat, "0.9", "sgd momentum"});
  s.add({"optimizer.weight_decay", T::kFloat, "0.0", "weight decay"});
  s.add({"optimizer.beta1", T::kFloat, "0.9", "adam beta1"});
  s.add({"optimizer.beta2", T::kFloat, "0.999", "adam beta2"});
  s.add({"optimizer.eps", T::kFloat, "1e-8", "adam epsilon"});
  s.add({"optimizer.schedule", T::kString, "constant", "learning-rate schedule over the run's steps", {}, &lr_schedule_names});
  s.add({"optimizer.warmup_steps", T::kInt, "0", "linear learning-rate warm-up steps"});

  // train
  s.add({"train.steps", T::kInt, "", "optimizer steps (set steps or epochs)"});
  s.add({"train.epochs", T::kFloat, "", "passes over the training set (set steps or epochs)"});
  s.add({"train.batch_size", T::kInt, "64", "global batch, split evenly over data-parallel ranks"});
  s.add({"train.recompute", T::kString, "none", "activation recomputation: selective recomputes the attention core, full each block from its input (psar simulate and plan: docs/simulate.md)", {}, &recompute_names});
  s.add({"train.seed", T::kInt, "1", "seed of initialization, shuffling and dropout"});
  s.add({"train.log_every", T::kInt, "50", "steps between progress lines"});
  s.add({"train.eval_every", T::kInt, "0", "steps between test evaluations (0 = once per epoch)"});
  s.add({"train.trace", T::kBool, "false", "write a Chrome/Perfetto trace.json"});
  s.add({"train.device", T::kString, "cpu", "where parameters, gradients, optimizer state and activations live (cuda: docs/gpu.md)", {}, &device_names});
  s.add({"train.checkpoint_every", T::kInt, "0",
         "steps between checkpoints in the run directory (0 = none; psar train --resume continues "
         "from the latest)"});
  s.add({"train.exit_at_step", T::kInt, "0",
         "stop after this step with a checkpoint and status exited; --resume continues under the "
         "same learning-rate schedule (0 = off)"});
  s.add({"train.exit_after", T::kDuration, "0s",
         "stop after the step that passes this much time in the process, with a checkpoint and "
         "status exited (0s = off)"});

  // sync
  s.add({"sync.backend", T::kString, "mpi", "gradient synchronization backend (--sync)", {}, &sync_names});
  s.add({"sync.algorithm", T::kString, "ring", "hybrid: the allreduce of the dense layers (the parameter server takes the embedding tables)"});
  s.add({"sync.segment_bytes", T::kBytes, "512K", "pipelining segment of the program algorithms (the engine's)"});
  s.add({"sync.dtype", T::kString, "fp32", "element type of gradients on the wire (psar's allreduce programs; mpi and nccl: fp32 only)", {}, &element_type_names});
  s.add({"sync.accumulate", T::kString, "fp32", "partial sums kept in fp32, or rounded to sync.dtype after every addition (dtype)", {"fp32", "dtype"}});
  s.add({"sync.sparse_tables", T::kString, "gather", "allreduce backends, sparse models: gather = all-gather the touched (ids, rows) when fewer bytes than a dense allreduce of the tables (docs/sparse.md); dense = always allreduce them", {}, &sparse_table_modes});
  s.add({"sync.timeout", T::kDuration, "60s", "deadline of every communication wait"});
  s.add({"sync.nccl_algo", T::kString, "auto", "nccl: NCCL_ALGO of the communicator (auto: NCCL's choice or the environment's)", {"auto", "ring", "tree"}});
  s.add({"sync.nccl_proto", T::kString, "auto", "nccl: NCCL_PROTO of the communicator (auto: NCCL's choice or the environment's)", {"auto", "LL", "LL128", "Simple"}});
  s.add({"sync.tuning", T::kString, "", "sync.backend auto: the tuning table psar tune wrote (CSV ranks,algo,bytes,time_us)"});
  s.add({"sync.zero", T::kInt, "0", "ZeRO stage of an allreduce backend with reduce-scatter and all-gather (ring, halving_doubling, mpi): 1 optimizer state sharded over the data-parallel group, 2 each gradient bucket reduce-scattered, stepped and all-gathered as the backward finishes it (with sync.overlap), 3 the parameters sharded too, each layer all-gathered before its forward and its backward and reduce-scattered after it (sync.overlap: the next layer prefetched); docs/zero.md"});
  s.add({"sync.overlap", T::kBool, "false", "sync gradient buckets on a communication thread while the backward runs (false: one sync after the backward)"});
  s.add({"sync.bucket_bytes", T::kBytes, "1M", "overlap: gradients are synced in buckets of this size (a bucket splits a tensor only when the tensor alone is larger)"});
  s.add({"sync.priority", T::kString, "fifo", "overlap: order of the buckets on the wire (front_first: earlier layers first, in chunks of sync.priority_chunk_bytes)", {"fifo", "front_first"}});
  s.add({"sync.priority_chunk_bytes", T::kBytes, "256K", "overlap with front_first: the unit a later-arriving front bucket can overtake at"});

  // parallel
  s.add({"parallel.tp", T::kInt, "1", "tensor-parallel degree t"});
  s.add({"parallel.pp", T::kInt, "1", "pipeline stages p"});
  s.add({"parallel.microbatches", T::kInt, "1", "pipeline micro-batches m per batch"});
  s.add({"parallel.schedule", T::kString, "1f1b", "pipeline schedule", {}, &pp::schedule_names});
  s.add({"parallel.chunks", T::kInt, "1", "virtual chunks per stage v (interleaved)"});
  s.add({"parallel.stage_layers", T::kIntList, "", "explicit layer count per virtual stage (p·v entries; p when chunks = 1)"});
  s.add({"parallel.account_embedding", T::kBool, "false", "even layer split: count the first stage's embedding as one layer (Megatron's account-for-embedding)"});
  s.add({"parallel.account_head", T::kBool, "false", "even layer split: count the last stage's head and loss as one layer (Megatron's account-for-loss)"});
  s.add({"parallel.order", T::kString, "tp-dp-pp", "rank order of the (p, t, d) grid, fastest-varying axis first (Megatron's tp-dp-pp keeps TP groups adjacent)", {}, &grid_order_names});
  s.add({"parallel.scatter_gather", T::kBool, "false", "between pipeline stages each TP rank sends 1/t of the activation and the receiving stage all-gathers it (Megatron's scatter/gather)"});
  s.add({"parallel.sequence_parallel", T::kBool, "false", "t > 1: the TP all-reduces become reduce-scatter + all-gather and layer norm and dropout run on 1/t of the sequence (Megatron's sequence parallelism)"});
  s.add({"parallel.tp_allreduce", T::kString, "ring", "allreduce algorithm of tensor-parallel all-reduces", {}, &all_allreducers});
  s.add({"parallel.hybrid", T::kBool, "false", "cnn: Krizhevsky's hybrid: the n workers run the convolutions data-parallel on their slices of the batch and the fully connected layers tensor-parallel on the all-gathered features (parallel.tp = 1, parallel.pp = 1)"});
  s.add({"parallel.hybrid_fc", T::kString, "tensor", "parallel.hybrid: the fully connected layers tensor-parallel (column, row, ...) or replicated on every rank", {"tensor", "replicated"}});
  s.add({"parallel.tp_split", T::kString, "column_row", "parallel MLP split", {}, &mlp_split_names});

  // ps
  s.add({"ps.servers", T::kInt, "1", "server shards S"});
  s.add({"ps.colocated", T::kBool, "false", "run a shard as a thread in every worker instead of dedicated server ranks"});
  s.add({"ps.consistency", T::kString, "bsp", "consistency model", {}, &ps::consistency_names});
  s.add({"ps.staleness", T::kInt, "2", "ssp staleness bound s"});
  s.add({"ps.on_worker_failure", T::kString, "abort", "abort: a worker that dies or goes silent past ps.timeout ends the job; continue: the servers drop it and average over the survivors (docs/ps.md)", {"abort", "continue"}});
  s.add({"ps.backup_workers", T::kInt, "0", "bsp: b of the workers are backups: each clock aggregates the first N - b pushes to arrive and drops the rest (docs/ps.md)"});
  s.add({"ps.interface", T::kString, "auto", "where servers bind and what they advertise: auto (the address that reaches the other ranks' hosts), an interface name, an address, or * (bind all, advertise auto)"});
  s.add({"ps.align_shards", T::kBool, "false", "align shard boundaries to tensor boundaries"});
  s.add({"ps.chunk_bytes", T::kBytes, "1M", "pipelining unit: a push_pull streams each shard in messages of this size"});
  s.add({"ps.shard_chunks", T::kInt, "0", "chunks per shard: 0 = auto: one worker about sqrt(shard bytes / 64 KiB), more workers 1 (docs/theory.md); K >= 1: a shard smaller than K chunks of ps.chunk_bytes streams in K smaller ones (none below 64 KiB or above ps.chunk_bytes; 1 = whole ps.chunk_bytes chunks)"});
  s.add({"ps.sparse", T::kBool, "false", "push and pull only the embedding-table rows a batch touches (model.type dlrm; docs/sparse.md)"});
  s.add({"ps.timeout", T::kDuration, "60s", "deadline of every parameter-server wait"});
  s.add({"ps.security", T::kString, "none", "none: plain TCP; curve: ZeroMQ CURVE, encrypted and authenticated with key pairs made per job, a client without them is refused and counted (docs/ps.md)", {}, &ps::security_names});

  // net: the emulated cluster network (off unless bandwidth is set)
  s.add({"net.bandwidth", T::kBandwidth, "", "per-rank NIC bandwidth, e.g. 10Gbit (unset = no emulation)"});
  s.add({"net.latency", T::kDuration, "0us", "per-message latency, e.g. 5us"});
  s.add({"net.node_size", T::kInt, "0", "ranks per node: a two-level network (net.bandwidth/latency: the node's NIC shared by its ranks) and the nodes of the hierarchical allreduce; 0 = one level"});
  s.add({"net.intra_bandwidth", T::kBandwidth, "", "bandwidth of each rank's links inside a node (unset = not limited)"});
  s.add({"net.intra_latency", T::kDuration, "0us", "per-message latency inside a node"});

  // hetero: injected heterogeneity, seeded and recorded (trainer/hetero.h, docs/config.md)
  s.add({"hetero.seed", T::kInt, "1", "seed of the random per-step delays (each rank its own Philox stream)"});
  s.add({"hetero.slow_ranks", T::kIntList, "[]", "world ranks whose compute is slow_factor times as long (a sleep of (factor - 1) x the step's compute)"});
  s.add({"hetero.slow_factor", T::kFloat, "1", "compute slowdown of hetero.slow_ranks (>= 1)"});
  s.add({"hetero.delay.distribution", T::kString, "none", "random delay after each step's compute", {}, &delay_distribution_names});
  s.add({"hetero.delay.mean", T::kDuration, "0s", "mean of the random delay"});
  s.add({"hetero.delay.pareto_shape", T::kFloat, "2", "pareto: tail index alpha (> 1; heavier tail as it nears 1)"});
  s.add({"hetero.delay.ranks", T::kIntList, "[]", "world ranks that draw delays ([] = every rank)"});
  s.add({"hetero.kill_rank", T::kInt, "-1", "world rank that kills itself (SIGKILL) at the start of hetero.kill_step: an injected failure (-1 = none; docs/ps.md)"});
  s.add({"hetero.kill_step", T::kInt, "0", "0-based step at whose start hetero.kill_rank dies (0 <= step < the run's steps)"});
  s.add({"hetero.nic_ranks", T::kIntList, "[]", "world ranks (workers or PS servers) whose emulated NIC runs at hetero.nic_bandwidth instead of net.bandwidth"});
  s.add({"hetero.nic_bandwidth", T::kBandwidth, "", "bandwidth of hetero.nic_ranks' NICs (needs net.bandwidth, one-level network)"});

  // cluster and simulate: the modelled cluster of `psar simulate` and `psar plan` (docs/simulate.md)
  s.add({"cluster.nodes", T::kInt, "1", "simulate: nodes"});
  s.add({"cluster.gpus_per_node", T::kInt, "8", "simulate: GPUs per node"});
  s.add({"cluster.gpu.peak_flops", T::kFloat, "312e12", "simulate: a GPU's dense peak FLOP/s (A100 bf16: 312e12)"});
  s.add({"cluster.gpu.gemm_efficiency", T::kFloat, "0.5", "simulate: share of peak a layer's FLOPs run at"});
  s.add({"cluster.gpu.kernel_overhead", T::kDuration, "0us", "simulate: fixed cost per kernel launch"});
  s.add({"cluster.gpu.memory", T::kBytes, "80G", "simulate/plan: memory per GPU"});
  s.add({"cluster.gpu.memory_margin", T::kFloat, "0.1", "plan: share of a GPU's memory kept free for the allocator's fragmentation and the CUDA context"});
  s.add({"cluster.gpu.sms", T::kInt, "0", "simulate: streaming multiprocessors, for the GEMMs' wave quantization (A100: 108, H100 SXM: 132; 0 = off)"});
  s.add({"cluster.gpu.memory_bandwidth", T::kBandwidth, "", "simulate: GPU memory bandwidth for the layers' memory-bound kernels (A100 80GB: 2039GB/s; unset = those kernels cost only their launch)"});
  s.add({"cluster.gpu.gemm_table", T::kString, "", "simulate: the GPU model's measured GEMM rates by layout and shape (a table built into psar from sim/gemm/NAME.csv: h100_sxm); a GEMM then runs at the table's interpolated rate in place of peak_flops x gemm_efficiency x wave quantization; unset = that formula"});
  s.add({"cluster.gpu.gemm_tiles", T::kIntList, "[128, 256, 256, 128, 128, 128]", "simulate: a GEMM's output tiles as (rows, cols) pairs; each GEMM takes the one that fills its waves best (wave quantization)"});
  s.add({"cluster.intra.bandwidth", T::kBandwidth, "300GB/s", "simulate: per-GPU link to the node's switch, each way"});
  s.add({"cluster.intra.latency", T::kDuration, "5us", "simulate: per-message latency inside a node"});
  s.add({"cluster.inter.bandwidth", T::kBandwidth, "200Gbit", "simulate: per-NIC bandwidth between nodes, each way"});
  s.add({"cluster.intra.efficiency", T::kStringList, "[]", "simulate: the switch links' bus efficiency, SIZE:SHARE points ascending in a collective's size (docs/simulate.md); empty: ideal"});
  s.add({"cluster.inter.efficiency", T::kStringList, "[]", "simulate: the NICs' bus efficiency, SIZE:SHARE points ascending in a collective's size (docs/simulate.md); empty: ideal"});
  s.add({"cluster.inter.latency", T::kDuration, "5us", "simulate: per-message latency between nodes"});
  s.add({"cluster.inter.nics_per_node", T::kInt, "8", "simulate: NICs per node (GPU i uses NIC i·nics/gpus_per_node)"});
  s.add({"simulate.kv_heads", T::kInt, "0", "simulate/plan: key-value heads of grouped-query attention (0 = model.heads)"});
  s.add({"simulate.ffn", T::kInt, "0", "simulate/plan: the MLP's inner width (0 = 4 x model.d_model)"});
  s.add({"simulate.mlp", T::kString, "gelu", "simulate/plan: the MLP's activation (swiglu: gate and up projections, Llama's)", {"gelu", "swiglu"}});
  s.add({"simulate.blocking_p2p", T::kBool, "false", "simulate: a pipeline stage waits for its send to the next (or previous) stage before its next action, as Megatron's 1F1B and interleaved schedules wait on each batched send/receive; false: psar's non-blocking sends"});
  s.add({"simulate.tp_comm_overlap", T::kBool, "false", "simulate: with parallel.sequence_parallel, each block's TP all-gathers and reduce-scatters run beside the GEMMs that read or make them (Megatron-Core's --tp-comm-overlap); a pass exposes what each collective outlasts its GEMM"});
  s.add({"simulate.overlap_param_gather", T::kBool, "false", "simulate: ZeRO 1/2 all-gather the updated weights bucket by bucket behind the next forward (Megatron's --overlap-param-gather): a step exposes the first bucket's gather only"});
  s.add({"simulate.flash_attention", T::kBool, "false", "simulate: fused attention (FlashAttention): the scores' softmax and dropout move no GPU memory"});
  s.add({"simulate.dtype_bytes", T::kInt, "2", "simulate: bytes per activation element (bf16: 2)"});
  s.add({"simulate.grad_bytes", T::kInt, "4", "simulate: bytes per gradient element in memory and on a parameter server's wire (an allreduce's wire: sync.dtype)"});
  s.add({"simulate.symmetric", T::kBool, "true", "simulate: one pipeline replica stands for all d (false: replay every replica)"});
  return s;
}

}  // namespace

const Schema& config_schema() {
  static const Schema schema = build();
  return schema;
}

}  // namespace psar
