#include "trainer/schema.h"

namespace psar {

namespace {

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
  s.add({"model.type", T::kString, "mlp", "workload", {"mlp", "gpt", "synthetic_stages"}});
  s.add({"model.hidden", T::kIntList, "[256, 128]", "mlp: hidden layer widths"});
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
  s.add({"data.dataset", T::kString, "fashion_mnist", "dataset", {"fashion_mnist", "synthetic", "text", "synthetic_tokens"}});
  s.add({"data.path", T::kString, "/usr/share/datasets/fashion-mnist", "fashion_mnist: folder of IDX files; text: a plain-text file"});
  s.add({"data.train_limit", T::kInt, "0", "use only the first N training samples (0 = all)"});
  s.add({"data.test_limit", T::kInt, "0", "use only the first N test samples (0 = all)"});
  s.add({"data.synthetic_samples", T::kInt, "4096", "synthetic: number of samples"});
  s.add({"data.synthetic_features", T::kInt, "32", "synthetic: input features"});
  s.add({"data.synthetic_classes", T::kInt, "4", "synthetic: classes"});

  // optimizer
  s.add({"optimizer.type", T::kString, "sgd", "optimizer", {"sgd", "adam"}});
  s.add({"optimizer.lr", T::kFloat, "0.1", "learning rate"});
  s.add({"optimizer.momentum", T::kFloat, "0.9", "sgd momentum"});
  s.add({"optimizer.weight_decay", T::kFloat, "0.0", "weight decay"});
  s.add({"optimizer.beta1", T::kFloat, "0.9", "adam beta1"});
  s.add({"optimizer.beta2", T::kFloat, "0.999", "adam beta2"});
  s.add({"optimizer.eps", T::kFloat, "1e-8", "adam epsilon"});
  s.add({"optimizer.schedule", T::kString, "constant", "learning-rate schedule over the run's steps", {"constant", "cosine"}});
  s.add({"optimizer.warmup_steps", T::kInt, "0", "linear learning-rate warm-up steps"});

  // train
  s.add({"train.steps", T::kInt, "", "optimizer steps (set steps or epochs)"});
  s.add({"train.epochs", T::kFloat, "", "passes over the training set (set steps or epochs)"});
  s.add({"train.batch_size", T::kInt, "64", "global batch, split evenly over data-parallel ranks"});
  s.add({"train.seed", T::kInt, "1", "seed of initialization, shuffling and dropout"});
  s.add({"train.log_every", T::kInt, "50", "steps between progress lines"});
  s.add({"train.eval_every", T::kInt, "0", "steps between test evaluations (0 = once per epoch)"});
  s.add({"train.trace", T::kBool, "false", "write a Chrome/Perfetto trace.json"});
  s.add({"train.checkpoint_every", T::kInt, "0",
         "steps between checkpoints in the run directory (0 = none; psar train --resume continues "
         "from the latest)"});

  // sync
  s.add({"sync.backend", T::kString, "mpi", "gradient synchronization backend (--sync)"});
  s.add({"sync.segment_bytes", T::kBytes, "512K", "pipelining segment of ring/tree"});
  s.add({"sync.timeout", T::kDuration, "60s", "deadline of every communication wait"});

  // parallel
  s.add({"parallel.tp", T::kInt, "1", "tensor-parallel degree t"});
  s.add({"parallel.pp", T::kInt, "1", "pipeline stages p"});
  s.add({"parallel.microbatches", T::kInt, "1", "pipeline micro-batches m per batch"});
  s.add({"parallel.schedule", T::kString, "1f1b", "pipeline schedule", {"gpipe", "1f1b", "interleaved", "zb_h1"}});
  s.add({"parallel.chunks", T::kInt, "1", "virtual chunks per stage v (interleaved)"});
  s.add({"parallel.stage_layers", T::kIntList, "", "explicit layer count per virtual stage (p·v entries; p when chunks = 1)"});
  s.add({"parallel.account_embedding", T::kBool, "false", "even layer split: count the first stage's embedding as one layer (Megatron's account-for-embedding)"});
  s.add({"parallel.account_head", T::kBool, "false", "even layer split: count the last stage's head and loss as one layer (Megatron's account-for-loss)"});
  s.add({"parallel.order", T::kString, "tp-dp-pp", "rank order of the (p, t, d) grid, fastest-varying axis first (Megatron's tp-dp-pp keeps TP groups adjacent)", {"tp-dp-pp", "tp-pp-dp", "dp-tp-pp"}});
  s.add({"parallel.scatter_gather", T::kBool, "false", "between pipeline stages each TP rank sends 1/t of the activation and the receiving stage all-gathers it (Megatron's scatter/gather)"});
  s.add({"parallel.tp_allreduce", T::kString, "ring", "allreduce algorithm of tensor-parallel all-reduces"});
  s.add({"parallel.tp_split", T::kString, "column_row", "parallel MLP split", {"column_row", "row_column"}});

  // ps
  s.add({"ps.servers", T::kInt, "1", "server shards S"});
  s.add({"ps.colocated", T::kBool, "false", "run a shard as a thread in every worker instead of dedicated server ranks"});
  s.add({"ps.consistency", T::kString, "bsp", "consistency model", {"bsp", "ssp", "asp"}});
  s.add({"ps.staleness", T::kInt, "2", "ssp staleness bound s"});
  s.add({"ps.interface", T::kString, "127.0.0.1", "address the servers bind to"});
  s.add({"ps.align_shards", T::kBool, "false", "align shard boundaries to tensor boundaries"});
  s.add({"ps.chunk_bytes", T::kBytes, "1M", "pipelining unit: a push_pull streams each shard in messages of this size"});
  s.add({"ps.timeout", T::kDuration, "60s", "deadline of every parameter-server wait"});

  // net: the emulated cluster network (off unless bandwidth is set)
  s.add({"net.bandwidth", T::kBandwidth, "", "per-rank NIC bandwidth, e.g. 10Gbit (unset = no emulation)"});
  s.add({"net.latency", T::kDuration, "0us", "per-message latency, e.g. 5us"});
  return s;
}

}  // namespace

const Schema& config_schema() {
  static const Schema schema = build();
  return schema;
}

}  // namespace psar
