#include "sync/zero_sync.h"

#include <algorithm>

#include "core/errors.h"
#include "core/ops.h"
#include "sync/allreduce_sync.h"

namespace psar {

ZeroSync::ZeroSync(Comm& group, const std::string& algorithm, const AllreduceOptions& options,
                   const OptimizerOptions& optimizer, int stage, ParamStore& store,
                   const SyncInit& init, bool prefetch)
    : group_(group),
      algorithm_(algorithm),
      options_(options),
      stage_(stage),
      shard_{store.size(), group.size()},
      whole_(make_sharded_collectives(algorithm, options)),
      optimizer_(make_optimizer(optimizer, shard_.size(group.rank()))) {
  if (stage_ >= 2)
    layers_ = std::make_unique<LayerGather>(
        group_, store, init.layers, init.tied, *optimizer_,
        LayerGatherOptions{algorithm, options, prefetch, /*params_sharded=*/stage_ == 3,
                           init.options.overlap.bucket_floats});
}

std::pair<int64_t, int64_t> ZeroSync::owned() const {
  const int r = group_.rank();
  return {shard_.offset(r), shard_.offset(r) + shard_.size(r)};
}

void ZeroSync::step(std::span<float> params, std::span<float> grads) {
  const auto [begin, end] = owned();
  const auto at = static_cast<size_t>(begin), n = static_cast<size_t>(end - begin);
  std::span<float> owned_grads = grads.subspan(at, n);
  if (layers_) {  // the layers' gradients went through the gate
    const int64_t summed = layers_->finish_step();
    PSAR_CHECK(summed == end - begin, "zero stage ", stage_, ": ", summed, " of the ", end - begin,
               " owned floats were reduced this step");
    if (stage_ == 3) {  // each stepped as its sum arrived
      optimizer_->end_step();
      return;
    }
    owned_grads = layers_->grad_shard();
  } else {
    whole_->reduce_scatter(group_, grads);
  }
  if (group_.size() > 1)
    ops::scale(owned_grads.data(), 1.0f / static_cast<float>(group_.size()), end - begin);
  optimizer_->step(params.subspan(at, n), owned_grads);
  whole_->all_gather(group_, params);
}

int zero_stage(const SyncOptions& options, const std::string& backend) {
  const int stage = options.zero;
  if (stage == 0) return 0;
  if (stage < 0 || stage > 3)
    throw ConfigError("sync.zero must be 0, 1, 2 or 3, got " + std::to_string(stage));
  const auto algos = allreducer_names(/*include_device=*/true);
  if (std::find(algos.begin(), algos.end(), backend) == algos.end())
    throw ConfigError("sync.zero: " + std::to_string(stage) + " shards the optimizer state over "
                      "the data-parallel group with a reduce-scatter and an all-gather; "
                      "sync.backend " + backend + " is not an allreduce algorithm" +
                      (backend == "ps" ? " (the parameter server shards its optimizer state on "
                                         "its servers already): set sync.zero: 0"
                                       : ": choose ring, halving_doubling, hierarchical, mpi or nccl"));
  if (!find_allreducer(backend).shards())
    throw ConfigError("sync.zero: " + std::to_string(stage) + " needs a reduce-scatter and an "
                      "all-gather; sync.backend " + backend + " has none (choose ring, "
                      "halving_doubling, hierarchical, mpi or nccl)");
  if (stage == 1 && options.overlap.on)
    throw ConfigError("sync.zero: 1 reduce-scatters the whole gradient after the backward; "
                      "sync.overlap (reduce-scatter each layer as the backward makes it) is "
                      "stage 2: set sync.zero: 2 or sync.overlap: false");
  if (stage >= 2 && options.priority != "fifo")
    throw ConfigError("sync.zero: " + std::to_string(stage) + " reduce-scatters layer by layer "
                      "in the order the model runs them; sync.priority " + options.priority +
                      " reorders buckets it has none of: set sync.priority: fifo");
  if (options.device != "cpu")
    throw ConfigError("sync.zero runs on the host arenas only so far: set train.device: cpu or "
                      "sync.zero: 0");
  return stage;
}

SyncSetup make_zero_sync(const std::string& algorithm, SyncInit& init) {
  Comm& group = init.data_parallel ? *init.data_parallel : init.world;
  const int stage = zero_stage(init.options, algorithm);
  try {
    check_shards(algorithm, group.size());
  } catch (const ConfigError& e) {
    throw ConfigError("sync.zero: " + std::to_string(stage) + " over a data-parallel group of " +
                      std::to_string(group.size()) + " ranks: " + e.what());
  }
  if (stage >= 2 && init.layers.empty())
    throw ConfigError(
        "sync.zero: " + std::to_string(stage) +
        (stage == 3 ? " shards the parameters and gathers each layer's before its forward and "
                      "backward; model.type "
                    : " shards the gradients, each layer's reduce-scattered as its backward "
                      "ends; model.type ") +
        init.options.model_type +
        " cannot work per layer (its layers use the whole arenas without asking for them: "
        "Model::layer_ranges), so choose sync.zero 1");
  SyncSetup setup;
  setup.workers = &init.world;
  setup.sync = std::make_unique<ZeroSync>(group, algorithm, init.options.allreduce,
                                          init.optimizer, stage, init.params, init,
                                          init.options.overlap.on);
  return setup;
}

}  // namespace psar
