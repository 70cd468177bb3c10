#include "sync/allreduce_sync.h"

#include "allreduce/staged.h"
#include "allreduce/tuned.h"
#include "core/errors.h"
#include "core/ops.h"

namespace psar {

AllreduceSync::AllreduceSync(Comm& comm, std::unique_ptr<Allreducer> algorithm,
                             const OptimizerOptions& optimizer, int64_t size, Device device)
    : comm_(comm),
      algorithm_(std::move(algorithm)),
      optimizer_(make_optimizer(optimizer, size, device)) {}

void AllreduceSync::step(std::span<float> params, std::span<float> grads) {
  algorithm_->allreduce(comm_, grads);
  finish(params, grads);
}

void AllreduceSync::sync_range(int64_t, std::span<float>, std::span<float> grads) {
  algorithm_->allreduce(comm_, grads);
}

void AllreduceSync::finish(std::span<float> params, std::span<float> grads) {
  if (comm_.size() > 1)
    ops::scale(grads.data(), 1.0f / static_cast<float>(comm_.size()),
               static_cast<int64_t>(grads.size()));
  optimizer_->step(params, grads);
}

AllreduceOptions allreduce_options(const Config& config) {
  AllreduceOptions options;
  options.segment_bytes = config.get_bytes("sync.segment_bytes");
  options.dtype = parse_element_type(config.get_string("sync.dtype"));
  options.accumulate_in_dtype = config.get_string("sync.accumulate") == "dtype";
  options.nccl_algo = config.get_string("sync.nccl_algo");
  options.nccl_proto = config.get_string("sync.nccl_proto");
  return options;
}

namespace {
// With the arenas on a CUDA device (train.device: cuda) the optimizer state
// lives there too, and a host algorithm is staged through host memory
// (allreduce/staged.h); a device algorithm (nccl) reduces them in place.
SyncSetup allreduce_setup(std::unique_ptr<Allreducer> algorithm, SyncInit& init,
                          bool device_algorithm = false) {
  Comm& group = init.data_parallel ? *init.data_parallel : init.world;
  const Device device = init.params.device();
  if (device != Device::kCpu && !device_algorithm)
    algorithm = stage_through_host(std::move(algorithm));
  SyncSetup setup;
  setup.workers = &init.world;
  setup.sync = std::make_unique<AllreduceSync>(group, std::move(algorithm), init.optimizer,
                                               init.params.size(), device);
  return setup;
}
}  // namespace

SyncSetup make_allreduce_sync(const std::string& algorithm, SyncInit& init) {
  return allreduce_setup(make_allreducer(algorithm, allreduce_options(init.config)), init,
                         find_allreducer(algorithm).device);
}

SyncSetup make_tuned_sync(SyncInit& init) {
  if (!init.config.has("sync.tuning"))
    throw ConfigError("sync.backend auto needs a tuning table: set sync.tuning to the file "
                      "psar tune wrote");
  return allreduce_setup(std::make_unique<TunedAllreducer>(
                             TuningTable::load(init.config.get_string("sync.tuning")),
                                                           allreduce_options(init.config)),
                         init);
}

}  // namespace psar
