#include "sync/allreduce_sync.h"

#include <algorithm>
#include <cstring>

#include "allreduce/staged.h"
#include "allreduce/tuned.h"
#include "core/errors.h"
#include "core/ops.h"

namespace psar {

AllreduceSync::AllreduceSync(Comm& comm, std::unique_ptr<Allreducer> algorithm,
                             const OptimizerOptions& optimizer, int64_t size, Device device,
                             SparseRows sparse, bool gather_tables)
    : comm_(comm),
      algorithm_(std::move(algorithm)),
      optimizer_(make_optimizer(optimizer, size, device)),
      sparse_(sparse),
      may_gather_(gather_tables && sparse.floats > 0 && sparse.floats < size &&
                  device == Device::kCpu) {}

void AllreduceSync::set_touched_rows(std::span<const int64_t> rows) {
  touched_.assign(rows.begin(), rows.end());
  have_touched_ = true;
}

bool sparse_gather_is_cheaper(const SparseRows& sparse, std::span<const int64_t> rows) {
  const int64_t n = static_cast<int64_t>(rows.size());
  int64_t gather = n * 8;
  for (int64_t r : rows) gather += r * (8 + 4 * sparse.row_floats);
  return gather < 8 * sparse.floats;
}

namespace {
constexpr int kGatherTag = 23;

// Ring all-gather of blocks[r] (sizes known to all): N − 1 rounds, rank r
// passing block (r − k) mod N to r + 1 in round k.
void ring_all_gather(Comm& comm, std::vector<std::vector<std::byte>>& blocks) {
  const int n = comm.size(), r = comm.rank();
  for (int k = 0; k + 1 < n; ++k) {
    const int send = ((r - k) % n + n) % n, recv = ((r - k - 1) % n + n) % n;
    comm.sendrecv((r + 1) % n, std::span<const std::byte>(blocks[static_cast<size_t>(send)]),
                  (r - 1 + n) % n, std::span<std::byte>(blocks[static_cast<size_t>(recv)]),
                  kGatherTag);
  }
}
}  // namespace

bool AllreduceSync::gather_tables(std::span<float> grads) {
  if (!may_gather_ || !have_touched_ || comm_.size() == 1) return false;
  have_touched_ = false;
  const int n = comm_.size();
  const auto me = static_cast<size_t>(comm_.rank());
  std::vector<std::vector<std::byte>> counts(static_cast<size_t>(n),
                                             std::vector<std::byte>(sizeof(int64_t)));
  const auto mine = static_cast<int64_t>(touched_.size());
  std::memcpy(counts[me].data(), &mine, sizeof mine);
  ring_all_gather(comm_, counts);
  std::vector<int64_t> rows(static_cast<size_t>(n));
  for (size_t r = 0; r < rows.size(); ++r) std::memcpy(&rows[r], counts[r].data(), sizeof(int64_t));
  if (!sparse_gather_is_cheaper(sparse_, rows)) return false;
  const int64_t dim = sparse_.row_floats;
  const auto row_bytes = static_cast<size_t>(dim) * sizeof(float);
  std::vector<std::vector<std::byte>> blocks(static_cast<size_t>(n));
  for (size_t r = 0; r < blocks.size(); ++r)
    blocks[r].resize(static_cast<size_t>(rows[r]) * (sizeof(int64_t) + row_bytes));
  std::byte* out = blocks[me].data();
  if (mine > 0) std::memcpy(out, touched_.data(), touched_.size() * sizeof(int64_t));
  out += touched_.size() * sizeof(int64_t);
  for (int64_t id : touched_) {
    PSAR_CHECK(id >= 0 && (id + 1) * dim <= sparse_.floats, "sparse all-gather: row ", id,
               " outside the tables");
    std::memcpy(out, grads.data() + id * dim, row_bytes);
    out += row_bytes;
  }
  ring_all_gather(comm_, blocks);
  // The tables' sum: every rank's rows added in rank order (others are zero).
  std::fill(grads.begin(), grads.begin() + sparse_.floats, 0.0f);
  for (size_t r = 0; r < blocks.size(); ++r) {
    const std::byte* ids = blocks[r].data();
    const auto* values = reinterpret_cast<const float*>(
        ids + static_cast<size_t>(rows[r]) * sizeof(int64_t));
    for (int64_t i = 0; i < rows[r]; ++i) {
      int64_t id;
      std::memcpy(&id, ids + static_cast<size_t>(i) * sizeof(int64_t), sizeof id);
      PSAR_CHECK(id >= 0 && (id + 1) * dim <= sparse_.floats, "sparse all-gather: rank ", r,
                 " sent row ", id, " outside the tables");
      ops::add_inplace(grads.data() + id * dim, values + i * dim, dim);
    }
  }
  return true;
}

void AllreduceSync::step(std::span<float> params, std::span<float> grads) {
  gathered_ = gather_tables(grads);
  if (gathered_)
    algorithm_->allreduce(comm_, grads.subspan(static_cast<size_t>(sparse_.floats)));
  else
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
  setup.sync = std::make_unique<AllreduceSync>(
      group, std::move(algorithm), init.optimizer, init.params.size(), device, init.sparse,
      init.options.gather_sparse_tables);
  return setup;
}
}  // namespace

SyncSetup make_allreduce_sync(const std::string& algorithm, SyncInit& init) {
  return allreduce_setup(make_allreducer(algorithm, init.options.allreduce), init,
                         find_allreducer(algorithm).device);
}

SyncSetup make_tuned_sync(SyncInit& init) {
  if (init.options.tuning.empty())
    throw ConfigError("sync.backend auto needs a tuning table: set sync.tuning to the file "
                      "psar tune wrote");
  return allreduce_setup(std::make_unique<TunedAllreducer>(
                             TuningTable::load(init.options.tuning),
                                                           init.options.allreduce),
                         init);
}

}  // namespace psar
