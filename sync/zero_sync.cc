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
  if (stage_ == 3)
    layers_ = std::make_unique<LayerGather>(group_, store, init.layers, init.tied, *optimizer_,
                                            LayerGatherOptions{algorithm, options, prefetch});
}

std::pair<int64_t, int64_t> ZeroSync::owned() const {
  const int r = group_.rank();
  return {shard_.offset(r), shard_.offset(r) + shard_.size(r)};
}

void ZeroSync::step(std::span<float> params, std::span<float> grads) {
  if (stage_ == 3) {  // the layers went through the gate
    const auto [begin, end] = owned();
    const int64_t stepped = layers_->finish_step();
    PSAR_CHECK(stepped == end - begin, "zero stage 3: ", stepped, " of the ", end - begin,
               " owned floats were stepped this step");
    optimizer_->end_step();
    return;
  }
  if (stage_ >= 2) sync_range(0, params, grads);
  else whole_->reduce_scatter(group_, grads);
  finish(params, grads);
}

void ZeroSync::sync_range(int64_t offset, std::span<float> params, std::span<float> grads) {
  // The owners' boundaries inside [offset, offset + n), relative to offset.
  const auto n = static_cast<int64_t>(grads.size());
  std::vector<int64_t> split(static_cast<size_t>(group_.size()) + 1);
  for (int r = 0; r <= group_.size(); ++r) {
    const int64_t b = r == group_.size() ? shard_.count : shard_.offset(r);
    split[static_cast<size_t>(r)] = std::clamp(b, offset, offset + n) - offset;
  }
  auto& pair = ranges_[{offset, n}];
  if (!pair) pair = make_sharded_collectives(algorithm_, options_);
  pair->reduce_scatter(group_, grads, split);
  // The range's parameters are not read again by this step's backward (its
  // gradients are final): step the owned part now and gather the range.
  const auto [own_begin, own_end] = owned();
  const int64_t lo = std::max(own_begin, offset), hi = std::min(own_end, offset + n);
  if (hi > lo) {
    const auto at = static_cast<size_t>(lo - offset), m = static_cast<size_t>(hi - lo);
    if (group_.size() > 1)
      ops::scale(grads.data() + at, 1.0f / static_cast<float>(group_.size()), hi - lo);
    optimizer_->step_slice(lo - own_begin, params.subspan(at, m), grads.subspan(at, m));
    stepped_ += hi - lo;
  }
  pair->all_gather(group_, params, split);
}

void ZeroSync::finish(std::span<float> params, std::span<float> grads) {
  const auto [begin, end] = owned();
  if (stage_ >= 2) {  // every range stepped and gathered in sync_range
    PSAR_CHECK(stepped_ == end - begin, "zero stage 2: ", stepped_, " of the ", end - begin,
               " owned floats went through sync_range this step");
    stepped_ = 0;
    optimizer_->end_step();
    return;
  }
  const auto at = static_cast<size_t>(begin), n = static_cast<size_t>(end - begin);
  if (group_.size() > 1)
    ops::scale(grads.data() + begin, 1.0f / static_cast<float>(group_.size()), end - begin);
  optimizer_->step(params.subspan(at, n), grads.subspan(at, n));
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
                                       : ": choose ring, halving_doubling or mpi"));
  if (!find_allreducer(backend).shards())
    throw ConfigError("sync.zero: " + std::to_string(stage) + " needs a reduce-scatter and an "
                      "all-gather; sync.backend " + backend + " has none (choose ring, "
                      "halving_doubling or mpi)");
  if (stage == 1 && options.overlap.on)
    throw ConfigError("sync.zero: 1 reduce-scatters the whole gradient after the backward; "
                      "sync.overlap (reduce-scatter each bucket as the backward makes it) is "
                      "stage 2: set sync.zero: 2 or sync.overlap: false");
  if (stage == 3 && options.priority != "fifo")
    throw ConfigError("sync.zero: 3 gathers and reduce-scatters layer by layer in the order the "
                      "model runs them; sync.priority " + options.priority +
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
  if (stage == 3 && init.layers.empty())
    throw ConfigError("sync.zero: 3 shards the parameters and gathers each layer's before its "
                      "forward and backward; model.type " + init.options.model_type +
                      " cannot gather per layer (its layers read the whole parameter arena "
                      "without asking for them: Model::layer_ranges), so choose sync.zero 1 or 2");
  SyncSetup setup;
  setup.workers = &init.world;
  setup.sync = std::make_unique<ZeroSync>(group, algorithm, init.options.allreduce,
                                          init.optimizer, stage, init.params, init,
                                          init.options.overlap.on);
  return setup;
}

}  // namespace psar
