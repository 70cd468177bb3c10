#pragma once
// The allreduce-backed GradientSync: sum the gradients with an Allreducer over
// the data-parallel communicator, divide by its size, step the local optimizer.

#include "allreduce/allreducer.h"
#include "sync/gradient_sync.h"

namespace psar {

// Sparse tables (SyncInit::sparse, docs/sparse.md): each step() compares
// the exact bytes of two ways to sum the tables' gradient and takes the
// cheaper — the algorithm's dense allreduce of the T table floats, counted
// as the ring's 8(N−1)·T bytes sent by all N ranks together, or a ring
// all-gather of every rank's (row ids, rows): first the N row counts
// (8(N−1)·N bytes), then each rank's block of n_r·(8 + 4·dim) bytes passed
// N − 1 times. It gathers when
//     N·8 + Σ_r n_r·(8 + 4·dim) < 8·T,
// then adds the blocks in rank order into a zeroed table gradient (equal
// to the dense sum within rounding) and allreduces the rest densely.
// sparse_tables "dense" never gathers; overlapped steps (sync_range) are dense.
class AllreduceSync final : public GradientSync {
 public:
  AllreduceSync(Comm& comm, std::unique_ptr<Allreducer> algorithm,
                const OptimizerOptions& optimizer, int64_t size, Device device = Device::kCpu,
                SparseRows sparse = {}, bool gather_tables = true);
  std::string name() const override { return algorithm_->name(); }
  void step(std::span<float> params, std::span<float> grads) override;
  CommCounters counters() const override { return comm_.counters(); }
  // Overlap: each range is summed over the group; finish() averages and steps.
  bool overlaps() const override { return true; }
  void sync_range(int64_t offset, std::span<float> params, std::span<float> grads) override;
  void finish(std::span<float> params, std::span<float> grads) override;
  Optimizer* optimizer() override { return optimizer_.get(); }
  void set_touched_rows(std::span<const int64_t> rows) override;
  // Whether the last step() all-gathered the tables.
  bool gathered() const { return gathered_; }

 private:
  // The ring all-gather of the touched rows into grads' tables, if cheaper.
  bool gather_tables(std::span<float> grads);

  Comm& comm_;
  std::unique_ptr<Allreducer> algorithm_;
  std::unique_ptr<Optimizer> optimizer_;
  SparseRows sparse_;
  bool may_gather_ = true;
  std::vector<int64_t> touched_;
  bool have_touched_ = false;
  bool gathered_ = false;
};

// The rule above: whether N ranks touching rows[r] rows each gather more
// cheaply than the dense allreduce of `sparse`'s tables.
bool sparse_gather_is_cheaper(const SparseRows& sparse, std::span<const int64_t> rows);

SyncSetup make_allreduce_sync(const std::string& algorithm, SyncInit& init);
// `auto`: AllreduceSync over the TunedAllreducer of sync.tuning (allreduce/tuned.h).
SyncSetup make_tuned_sync(SyncInit& init);

}  // namespace psar
