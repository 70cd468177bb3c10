// TrainingRun's gradient sync (training_run.h): the backend over this rank's
// data-parallel group, and the overlap's buckets.
#include "trainer/training_run.h"

#include <algorithm>
#include <numeric>

#include "core/errors.h"
#include "sync/buckets.h"

namespace psar {

namespace {

// A sparse model's tables as the arena's head of equal rows (docs/sparse.md).
SparseRows sparse_rows(const Model& model) {
  SparseRows rows;
  for (const SparseTable& t : model.sparse_tables()) {
    PSAR_CHECK(t.offset == rows.floats && (rows.row_floats == 0 || rows.row_floats == t.dim),
               "embedding table ", t.name, " is not the next equal-width rows of the arena's head");
    rows.row_floats = t.dim;
    rows.floats += t.rows * t.dim;
  }
  return rows;
}

// The overlapped sync's buckets: this rank's tensors in the order the
// backward makes them final — chunk by chunk in the order of their last
// weight-gradient action, each chunk's tensors from its last down — the
// tied parameters left to the finalize step (their gradients are summed over
// their pair first).
std::vector<ArenaRange> overlap_buckets(const ParamStore& store, const pp::Schedule& schedule,
                                        int stage,
                                        const std::vector<std::pair<int, int>>& chunk_params,
                                        const std::vector<TiedParam>& tied, int64_t bucket_floats) {
  std::vector<int> last(chunk_params.size(), -1), order(chunk_params.size());
  const auto& actions = schedule.actions.at(static_cast<size_t>(stage));
  for (size_t k = 0; k < actions.size(); ++k)
    if (actions[k].op == pp::Op::kBackward || actions[k].op == pp::Op::kBackwardWeight)
      last[static_cast<size_t>(actions[k].chunk)] = static_cast<int>(k);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int a, int b) {
    return last[static_cast<size_t>(a)] < last[static_cast<size_t>(b)];
  });
  std::vector<BucketTensor> tensors;
  for (int c : order) {
    const auto [begin, end] = chunk_params[static_cast<size_t>(c)];
    for (int k = end; k-- > begin;) {
      const ParamInfo& info = store.infos()[static_cast<size_t>(k)];
      const bool skip =
          std::any_of(tied.begin(), tied.end(), [&](const TiedParam& t) { return t.param == k; });
      tensors.push_back({{info.offset, info.offset + info.numel}, skip});
    }
  }
  return plan_buckets(tensors, bucket_floats);
}

}  // namespace

// False on a dedicated server rank, after it served.
bool TrainingRun::start_sync() {
  OptimizerOptions optimizer = run_.optimizer;
  optimizer.total_steps = plan_.total_steps;
  init_ = std::make_unique<SyncInit>(SyncInit{
      world_, sync_options_, store_, optimizer, grid_ ? &grid_->dp() : nullptr,
      CheckpointPlan{options_.out_dir, o_.checkpoint_every, first_step_, options_.resume_from},
      sparse_rows(*model_), model_->layer_ranges()});
  for (const TiedParam& k : tied_) {
    const ParamInfo& info = store_.infos()[static_cast<size_t>(k.param)];
    init_->tied.emplace_back(info.offset, info.offset + info.numel);
  }
  setup_ = make_gradient_sync(sync_name_, *init_);
  if (setup_.serve) {
    setup_.serve();
    result_.server = true;
    return false;
  }
  workers_ = setup_.workers;  // every rank that trains
  workers_->tolerate_failures(survives_worker_failure());
  sync_ = setup_.sync.get();
  // A backend whose servers keep the optimizer state (the parameter server)
  // saves it at train.checkpoint_every steps only: an early stop must fall on one.
  if (o_.exit_at_step > 0 && !sync_->optimizer() &&
      (o_.checkpoint_every == 0 || o_.exit_at_step % o_.checkpoint_every != 0))
    throw ConfigError("train.exit_at_step " + std::to_string(o_.exit_at_step) +
                      " with sync.backend " + sync_name_ +
                      " must be a multiple of train.checkpoint_every (its servers " +
                      "save their state at those steps only)");
  PSAR_CHECK(workers_->size() == trainers_, "sync.backend ", sync_name_, " left ", workers_->size(),
             " workers, planned ", trainers_);
  if (!grid_) grid_ = std::make_unique<ProcessGrid>(*workers_, shape_);
  d_ = grid_->dp().size();
  local_batch_ = plan_.batch_size / d_;
  holds_loss_ = layout_.stage == layout_.stages - 1 && grid_->coord().tp == 0;
  result_.workers = d_;
  result_.first_step = first_step_;
  return true;
}

// Overlap: buckets synced on a communication thread while the backward runs.
void TrainingRun::start_overlap() {
  const OverlapConfig& o = sync_options_.overlap;
  // (A backend that gathers the model's layers itself overlaps through its gate.)
  if (!o.on || sync_->param_gate()) return;
  if (!sync_->overlaps())
    throw ConfigError("sync.overlap: the " + sync_->name() +
                      " backend syncs the whole model after the backward only; set "
                      "sync.overlap: false or choose an allreduce backend");
  overlap_ = std::make_unique<OverlapSync>(
      *sync_, store_,
      overlap_buckets(store_, schedule_, layout_.stage, chunk_params_, tied_, o.bucket_floats),
      grid_->dp(), OverlapOptions{o.front_first, o.priority_chunk_floats});
  // The layer-wise start hands the whole step to the communication thread:
  // no range may be left for the main thread (the PS has no pipeline, so no ties).
  PSAR_CHECK(!overlap_->layerwise() || tied_.empty(), "the layer-wise start of ", sync_->name(),
             " with tied parameters");
}

}  // namespace psar
