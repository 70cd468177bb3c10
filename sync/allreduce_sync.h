#pragma once
// The allreduce-backed GradientSync: sum the gradients with an Allreducer over
// the data-parallel communicator, divide by its size, step the local optimizer.

#include "allreduce/allreducer.h"
#include "sync/gradient_sync.h"

namespace psar {

class AllreduceSync final : public GradientSync {
 public:
  AllreduceSync(Comm& comm, std::unique_ptr<Allreducer> algorithm,
                const OptimizerOptions& optimizer, int64_t size, Device device = Device::kCpu);
  std::string name() const override { return algorithm_->name(); }
  void step(std::span<float> params, std::span<float> grads) override;
  CommCounters counters() const override { return comm_.counters(); }
  // Overlap: each range is summed over the group; finish() averages and steps.
  bool overlaps() const override { return true; }
  void sync_range(int64_t offset, std::span<float> params, std::span<float> grads) override;
  void finish(std::span<float> params, std::span<float> grads) override;
  Optimizer* optimizer() override { return optimizer_.get(); }

 private:
  Comm& comm_;
  std::unique_ptr<Allreducer> algorithm_;
  std::unique_ptr<Optimizer> optimizer_;
};

// The allreducers' options from the sync.* section (sync.segment_bytes).
AllreduceOptions allreduce_options(const Config& config);

SyncSetup make_allreduce_sync(const std::string& algorithm, SyncInit& init);
// `auto`: AllreduceSync over the TunedAllreducer of sync.tuning (allreduce/tuned.h).
SyncSetup make_tuned_sync(SyncInit& init);

}  // namespace psar
