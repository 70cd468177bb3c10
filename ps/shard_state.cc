#include "ps/shard_state.h"

#include <algorithm>
#include <cstring>
#include <tuple>

#include "core/errors.h"
#include "core/ops.h"
#include "ps/wire.h"

namespace psar::ps {

namespace {
constexpr Consistency kConsistencies[] = {Consistency::kBsp, Consistency::kSsp,
                                          Consistency::kAsp};
}  // namespace

std::vector<std::string> consistency_names() {
  std::vector<std::string> names;
  for (Consistency c : kConsistencies) names.emplace_back(to_string(c));
  return names;
}

Consistency parse_consistency(const std::string& name) {
  for (Consistency c : kConsistencies)
    if (name == to_string(c)) return c;
  throw ConfigError("ps.consistency: unknown model '" + name + "' (expected bsp, ssp or asp)");
}

const char* to_string(Consistency c) {
  switch (c) {
    case Consistency::kBsp:
      return "bsp";
    case Consistency::kSsp:
      return "ssp";
    case Consistency::kAsp:
      return "asp";
  }
  return "?";
}

// ---- SharedParams -----------------------------------------------------------------

struct SharedParams::Block {
  std::vector<float> values;
  std::atomic<int> refs{1};  // the owner's reference plus one per reply in flight
};

SharedParams::SharedParams(std::span<const float> initial) : block_(new Block) {
  block_->values.assign(initial.begin(), initial.end());
}

SharedParams::~SharedParams() { release(nullptr, block_); }

std::span<const float> SharedParams::view() const { return block_->values; }

std::span<float> SharedParams::writable() {
  // acquire: every read a finished send made of this buffer happens before our writes.
  if (block_->refs.load(std::memory_order_acquire) != 1) {
    auto* fresh = new Block;
    fresh->values = block_->values;
    release(nullptr, block_);
    block_ = fresh;
    ++copies_;
  }
  return block_->values;
}

void* SharedParams::acquire() {
  block_->refs.fetch_add(1, std::memory_order_relaxed);
  return block_;
}

void SharedParams::release(void*, void* hint) {
  auto* block = static_cast<Block*>(hint);
  if (block->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete block;
}

// ---- averaging ----------------------------------------------------------------------

namespace {

// out[i] = (first[i] + more_0[i] + ...) · (1/n) block by block (each input
// read once); `first` may be out itself (the partial sum is there already).
void sum_and_scale(std::span<float> out, const float* first, std::span<const float* const> more,
                   int n) {
  const int64_t len_all = static_cast<int64_t>(out.size());
  const float inv = 1.0f / static_cast<float>(n);
  // Blocks small enough that `out` stays in L1 while every input streams past once.
  constexpr int64_t kBlock = 2048;
  for (int64_t begin = 0; begin < len_all; begin += kBlock) {
    const int64_t len = std::min(kBlock, len_all - begin);
    float* dst = out.data() + begin;
    if (first != out.data()) std::memcpy(dst, first + begin, len * sizeof(float));
    for (const float* g : more) ops::add_inplace(dst, g + begin, len);
    if (n > 1) ops::scale(dst, inv, len);
  }
}

}  // namespace

void average_gradients(std::span<float> out, std::span<const float* const> grads) {
  PSAR_CHECK(!grads.empty(), "average_gradients: no gradients");
  sum_and_scale(out, grads[0], grads.subspan(1), static_cast<int>(grads.size()));
}

void average_rows(const RowSpace& space, KeyRange range,
                  std::span<const std::span<const int64_t>> rows_k,
                  std::span<const std::span<const float>> data_k, std::vector<int64_t>& rows,
                  std::vector<float>& out) {
  PSAR_CHECK(!rows_k.empty() && rows_k.size() == data_k.size(), "average_rows: ", rows_k.size(),
             " row lists, ", data_k.size(), " gradients");
  rows.clear();
  for (const auto& mine : rows_k) {  // the union, ascending
    const size_t mid = rows.size();
    rows.insert(rows.end(), mine.begin(), mine.end());
    std::inplace_merge(rows.begin(), rows.begin() + static_cast<ptrdiff_t>(mid), rows.end());
    rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  }
  const KeyRange tail = space.tail(range);
  int64_t floats = tail.size();
  for (int64_t r : rows) floats += space.extent(r, range).size();
  out.assign(static_cast<size_t>(floats), 0.0f);
  // Per gradient: the next of its rows and where its floats are.
  const size_t count = rows_k.size();
  std::vector<size_t> next(count, 0);
  std::vector<const float*> at(count);
  for (size_t k = 0; k < count; ++k) at[k] = data_k[k].data();
  float* dst = out.data();
  const auto sum = [&](float* d, const float* src, int64_t n, bool first) {
    if (first)
      std::memcpy(d, src, static_cast<size_t>(n) * sizeof(float));
    else
      ops::add_inplace(d, src, n);
  };
  for (int64_t r : rows) {
    const int64_t n = space.extent(r, range).size();
    bool first = true;
    for (size_t k = 0; k < count; ++k) {
      const auto& mine = rows_k[k];
      if (next[k] >= mine.size() || mine[next[k]] != r) continue;
      sum(dst, at[k], n, first);
      first = false;
      at[k] += n;
      ++next[k];
    }
    dst += n;
  }
  for (size_t k = 0; k < count; ++k) {
    PSAR_CHECK(next[k] == rows_k[k].size() &&
                   at[k] + tail.size() == data_k[k].data() + data_k[k].size(),
               "average_rows: gradient ", k, " does not match its rows");
    if (tail.size() > 0) sum(dst, at[k], tail.size(), k == 0);
  }
  if (count > 1) ops::scale(out.data(), 1.0f / static_cast<float>(count), floats);
}

// ---- ShardState ---------------------------------------------------------------------

ShardState::ShardState(const ShardStateOptions& options, std::span<const float> initial,
                       const RowSpace& rows)
    : options_(options),
      rows_(rows),
      params_(initial),
      // A sparse shard's optimizer holds the tail's state, then the touched
      // rows' (at least one float, so that every buffer exists).
      optimizer_(make_optimizer(options.optimizer,
                                rows.sparse(options.range)
                                    ? std::max<int64_t>(rows.tail(options.range).size(), 1)
                                    : options.range.size())),
      pushed_(static_cast<size_t>(options.workers), 0),
      dropped_(static_cast<size_t>(options.workers), 0),
      left_(static_cast<size_t>(options.workers), 0),
      behind_at_leave_(static_cast<size_t>(options.workers)),
      failed_(static_cast<size_t>(options.workers), 0) {
  PSAR_CHECK(options.workers >= 1, "ps shard: need at least one worker");
  PSAR_CHECK(static_cast<int64_t>(initial.size()) == options.range.size(),
             "ps shard: initial parameters hold ", initial.size(), " floats, range ",
             to_string(options.range), " needs ", options.range.size());
  if (options.staleness < 0)
    throw ConfigError("ps.staleness: must be >= 0, got " + std::to_string(options.staleness));
  check_backup_workers(options.backup_workers, options.workers, options.consistency);
  sparse_ = rows.sparse(options.range);
  if (sparse_) {
    std::tie(first_row_, last_row_) = rows.rows_in(options.range);
    state_used_ = rows.tail(options.range).size();
    state_capacity_ = std::max<int64_t>(state_used_, 1);
    // Enough updates for a pull within the staleness bound, or one per worker under asp.
    recent_cap_ = static_cast<size_t>(options.workers + options.staleness + 2);
  }
  if (options.consistency != Consistency::kAsp) {
    slots_.resize(static_cast<size_t>(lag()) + 1);
    for (auto& s : slots_) {
      s.grads.resize(static_cast<size_t>(options.workers));
      s.arrived.resize(static_cast<size_t>(options.workers), 0);
    }
  }
}

int64_t ShardState::lag() const {
  return options_.consistency == Consistency::kSsp ? options_.staleness : 0;
}

void ShardState::check_worker(int worker) const {
  if (worker < 0 || worker >= options_.workers)
    throw RequestError(wire::STATUS_BAD_WORKER, "worker " + std::to_string(worker) +
                                                    " outside [0, " +
                                                    std::to_string(options_.workers) + ")");
  if (left_[worker])
    throw RequestError(wire::STATUS_BAD_WORKER,
                       "worker " + std::to_string(worker) + " has already left");
}

void check_backup_workers(int backup, int workers, Consistency consistency) {
  if (backup == 0) return;
  if (backup < 0)
    throw ConfigError("ps.backup_workers: must be >= 0, got " + std::to_string(backup));
  if (consistency != Consistency::kBsp)
    throw ConfigError(std::string("ps.backup_workers needs ps.consistency: bsp (got ") +
                      to_string(consistency) + "; ssp and asp never wait for all workers)");
  if (backup >= workers - backup)
    throw ConfigError("ps.backup_workers: b = " + std::to_string(backup) + " of " +
                      std::to_string(workers) + " workers leaves N = " +
                      std::to_string(workers - backup) +
                      " aggregated per clock; b must be < N (at most " +
                      std::to_string((workers - 1) / 2) + " here)");
}

bool ShardState::push(int worker, int64_t clock, Gradient grad) {
  PSAR_CHECK(static_cast<int64_t>(grad.data.size()) == options_.range.size(), "ps shard: push of ",
             grad.data.size(), " floats into ", to_string(options_.range));
  if (!sparse_) return take(worker, clock, Pushed{grad.data, std::move(grad.owner), {}});
  struct Owned {  // a dense push touches every row
    std::shared_ptr<void> data;
    std::vector<int64_t> rows;
  };
  auto owned = std::make_shared<Owned>();
  owned->data = std::move(grad.owner);
  owned->rows.resize(static_cast<size_t>(last_row_ - first_row_));
  for (size_t i = 0; i < owned->rows.size(); ++i) owned->rows[i] = first_row_ + static_cast<int64_t>(i);
  const std::span<const int64_t> rows = owned->rows;
  return take(worker, clock, Pushed{grad.data, std::move(owned), rows});
}

bool ShardState::push_rows(int worker, int64_t clock, std::span<const int64_t> rows,
                           Gradient grad) {
  PSAR_CHECK(sparse_, "ps shard: sparse push into the dense ", to_string(options_.range));
  int64_t floats = rows_.tail(options_.range).size();
  for (int64_t r : rows) floats += extent(r).size();
  PSAR_CHECK(static_cast<int64_t>(grad.data.size()) == floats, "ps shard: sparse push of ",
             grad.data.size(), " floats for ", rows.size(), " rows, expected ", floats);
  return take(worker, clock, Pushed{grad.data, std::move(grad.owner), rows});
}

bool ShardState::take(int worker, int64_t clock, Pushed grad) {
  check_worker(worker);
  last_push_dropped_ = false;
  if (clock != pushed_[worker])
    throw RequestError(wire::STATUS_BAD_CLOCK, "worker " + std::to_string(worker) +
                                                   " pushed clock " + std::to_string(clock) +
                                                   ", expected " + std::to_string(pushed_[worker]));
  if (options_.consistency == Consistency::kAsp) {
    if (options_.workers > 1)
      ops::scale(grad.data.data(), 1.0f / static_cast<float>(options_.workers),
                 static_cast<int64_t>(grad.data.size()));
    update(grad.rows, grad.data);
    ++pushed_[worker];
    return true;
  }
  if (clock > applied_ + lag())
    throw RequestError(wire::STATUS_BAD_CLOCK,
                       "worker " + std::to_string(worker) + " pushed clock " +
                           std::to_string(clock) + " but only " + std::to_string(applied_) +
                           " clocks are applied (staleness bound " + std::to_string(lag()) + ")");
  if (clock < applied_) {  // backup workers: the clock went ahead without this push
    ++pushed_[worker];
    ++dropped_[worker];
    last_push_dropped_ = true;
    return false;
  }
  Slot& slot = slots_[static_cast<size_t>(clock) % slots_.size()];
  slot.grads[worker] = std::move(grad);
  slot.arrived[worker] = 1;
  ++slot.count;
  ++pushed_[worker];
  const int64_t before = applied_;
  apply_complete_clocks();
  // Still open: sum what can be summed now, so that the push completing the
  // clock leaves as little as possible to do before the replies.
  if (clock >= applied_) fold(slot);
  return applied_ != before;
}

void ShardState::fold(Slot& slot) {
  // Under continue a pending push can still be discarded (fail()), so every
  // gradient stays apart until its clock is applied; sparse pushes are
  // summed row by row when their clock is applied (average_rows).
  if (options_.continue_on_failure || sparse_) return;
  const auto workers = static_cast<size_t>(options_.workers);
  while (static_cast<size_t>(slot.folded) < workers && slot.arrived[static_cast<size_t>(slot.folded)]) {
    auto& next = slot.grads[static_cast<size_t>(slot.folded)];
    if (slot.folded > 0) {  // into worker 0's buffer; this one's receive buffer goes back
      ops::add_inplace(slot.grads[0].data.data(), next.data.data(),
                       static_cast<int64_t>(next.data.size()));
      next = {};
    }
    ++slot.folded;
  }
}

int ShardState::held(int64_t clock) const {
  if (options_.consistency == Consistency::kAsp || clock < applied_ || clock > applied_ + lag())
    return 0;
  const Slot& slot = slots_[static_cast<size_t>(clock) % slots_.size()];
  int n = 0;
  for (const auto& g : slot.grads) n += g.owner != nullptr;
  return n;
}

int ShardState::needed() const {
  const int n = options_.workers - options_.backup_workers;
  if (!options_.continue_on_failure) return n;
  int can = 0;  // workers that pushed the oldest open clock or still may
  for (int w = 0; w < options_.workers; ++w)
    if (!failed_[w] && (!left_[w] || pushed_[w] > applied_)) ++can;
  return std::min(n, can);
}

void ShardState::apply_complete_clocks() {
  if (options_.consistency == Consistency::kAsp) return;
  for (;;) {
    Slot& slot = slots_[static_cast<size_t>(applied_) % slots_.size()];
    const int need = needed();
    if (need == 0 || slot.count < need) return;
    if (need < options_.workers - options_.backup_workers && workers_changed_at_ < 0)
      workers_changed_at_ = applied_;
    if (sparse_) {
      std::vector<std::span<const int64_t>> rows_k;
      std::vector<std::span<const float>> data_k;
      for (size_t w = 0; w < slot.grads.size(); ++w)
        if (slot.arrived[w]) {
          rows_k.push_back(slot.grads[w].rows);
          data_k.push_back(slot.grads[w].data);
        }
      std::vector<int64_t> rows;
      std::vector<float> avg;
      average_rows(rows_, options_.range, rows_k, data_k, rows, avg);
      last_averaged_ = static_cast<int>(rows_k.size());
      update(rows, avg);
    } else {
      // Workers 0..folded-1 are summed into worker 0's buffer already (fold);
      // the others that arrived follow in worker order.
      std::span<float> avg = slot.folded > 0 ? slot.grads[0].data : std::span<float>();
      std::vector<const float*> more;
      int n = slot.folded;
      for (size_t w = static_cast<size_t>(slot.folded); w < slot.grads.size(); ++w) {
        if (!slot.arrived[w]) continue;
        if (n++ == 0)
          avg = slot.grads[w].data;
        else
          more.push_back(slot.grads[w].data.data());
      }
      sum_and_scale(avg, avg.data(), more, n);
      last_averaged_ = n;
      update({}, avg);
    }
    for (auto& g : slot.grads) g = {};
    std::fill(slot.arrived.begin(), slot.arrived.end(), 0);
    slot.count = 0;
    slot.folded = 0;
  }
}

KeyRange ShardState::extent(int64_t row) const {
  const KeyRange e = rows_.extent(row, options_.range);
  return {e.begin - options_.range.begin, e.end - options_.range.begin};
}

void ShardState::update(std::span<const int64_t> rows, std::span<const float> grad) {
  const std::span<float> params = params_.writable();
  if (!sparse_) {
    optimizer_->step(params, grad);
    ++applied_;
    return;
  }
  const std::vector<size_t> where = touch(rows);
  // Step runs of rows adjacent in the range, in `grad` and in the state as one slice.
  int64_t at = 0;  // into grad
  for (size_t i = 0; i < rows.size();) {
    KeyRange run = extent(rows[i]);
    const int64_t state = index_[where[i]].at;
    size_t j = i + 1;
    for (; j < rows.size() && rows[j] == rows[j - 1] + 1 &&
           index_[where[j]].at == state + run.size();
         ++j)
      run.end = extent(rows[j]).end;
    const auto n = static_cast<size_t>(run.size());
    optimizer_->step_slice(state, params.subspan(static_cast<size_t>(run.begin), n),
                           grad.subspan(static_cast<size_t>(at), n));
    at += run.size();
    i = j;
  }
  const KeyRange tail = rows_.tail(options_.range);
  if (tail.size() > 0) {  // its state comes first
    const auto off = static_cast<size_t>(tail.begin - options_.range.begin);
    optimizer_->step_slice(0, params.subspan(off, static_cast<size_t>(tail.size())),
                           grad.subspan(static_cast<size_t>(at)));
    at += tail.size();
  }
  PSAR_CHECK(at == static_cast<int64_t>(grad.size()), "ps shard: update of ", grad.size(),
             " floats used ", at);
  optimizer_->end_step();
  ++applied_;
  for (size_t w : where) index_[w].version = applied_;
  if (recent_.size() == recent_cap_) recent_.erase(recent_.begin());
  recent_.push_back({applied_, std::vector<int64_t>(rows.begin(), rows.end())});
}

namespace {
constexpr auto kByRow = [](const auto& e, int64_t row) { return e.row < row; };
}  // namespace

std::vector<size_t> ShardState::touch(std::span<const int64_t> rows) {
  // The rows not in the index yet, each with fresh state after the last.
  std::vector<Entry> fresh;
  auto it = index_.begin();
  for (int64_t r : rows) {
    it = std::lower_bound(it, index_.end(), r, kByRow);
    if (it != index_.end() && it->row == r) continue;
    fresh.push_back({r, state_used_, 0});
    state_used_ += extent(r).size();
  }
  if (!fresh.empty()) {
    reserve_state(state_used_);
    // Merged in from the back (both ascending).
    size_t a = index_.size(), b = fresh.size(), out = a + b;
    index_.resize(out);
    while (b > 0)
      index_[--out] = a > 0 && index_[a - 1].row > fresh[b - 1].row ? index_[--a] : fresh[--b];
  }
  std::vector<size_t> where;
  where.reserve(rows.size());
  auto at = index_.begin();
  for (int64_t r : rows) {
    at = std::lower_bound(at, index_.end(), r, kByRow);
    where.push_back(static_cast<size_t>(at - index_.begin()));
  }
  return where;
}

void ShardState::reserve_state(int64_t floats) {
  if (floats <= state_capacity_) return;
  // A bigger optimizer with the old state at its head (amortized doubling).
  const int64_t capacity = std::max(floats, 2 * state_capacity_);
  auto bigger = make_optimizer(options_.optimizer, capacity);
  const auto from = optimizer_->state(), to = bigger->state();
  for (size_t b = 0; b < from.size(); ++b)
    std::copy(from[b].begin(), from[b].end(), to[b].begin());
  bigger->set_steps(optimizer_->steps());
  optimizer_ = std::move(bigger);
  state_capacity_ = capacity;
}

int64_t ShardState::version(int64_t row) const {
  const auto it = std::lower_bound(index_.begin(), index_.end(), row, kByRow);
  return it != index_.end() && it->row == row ? it->version : 0;
}

ShardState::StateBytes ShardState::state_bytes() const {
  const auto buffers = static_cast<int64_t>(optimizer_->state().size());
  constexpr auto kFloat = static_cast<int64_t>(sizeof(float));
  if (!sparse_) return {buffers * options_.range.size() * kFloat, buffers * options_.range.size() * kFloat};
  constexpr auto kEntry = static_cast<int64_t>(sizeof(Entry));
  return {buffers * state_used_ * kFloat + static_cast<int64_t>(index_.size()) * kEntry,
          buffers * state_capacity_ * kFloat + static_cast<int64_t>(index_.capacity()) * kEntry};
}

std::vector<int64_t> ShardState::rows_since(int64_t version) const {
  // After a restore every worker resumed holding the parameters of the
  // restored clock (its own checkpoint): nothing older to bring.
  version = std::max(version, restored_at_);
  std::vector<int64_t> out;
  if (version >= applied_) return out;
  if (!recent_.empty() && recent_.front().version <= version + 1) {
    // Every update after `version` is in the log: merge their rows.
    for (const Touched& t : recent_) {
      if (t.version <= version) continue;
      const size_t mid = out.size();
      out.insert(out.end(), t.rows.begin(), t.rows.end());
      std::inplace_merge(out.begin(), out.begin() + static_cast<ptrdiff_t>(mid), out.end());
      out.erase(std::unique(out.begin(), out.end()), out.end());
    }
    return out;
  }
  for (const Entry& e : index_)
    if (e.version > version) out.push_back(e.row);
  return out;
}

void ShardState::check_pull(int worker, int64_t clock) const {
  check_worker(worker);
  if (clock < 0 || clock > pushed_[worker])
    throw RequestError(wire::STATUS_BAD_CLOCK, "worker " + std::to_string(worker) +
                                                   " pulled for step " + std::to_string(clock) +
                                                   " after pushing " +
                                                   std::to_string(pushed_[worker]) + " steps");
}

bool ShardState::pull_ready(int64_t clock) const {
  return options_.consistency == Consistency::kAsp || applied_ >= clock - lag();
}

std::string ShardState::pull_blocked(int64_t clock) const {
  if (options_.consistency == Consistency::kAsp) return {};
  if (options_.continue_on_failure)
    return needed() > 0 ? std::string()
                        : "every worker that could push clock " + std::to_string(applied_) +
                              " has left or failed";
  const int64_t needed = clock - lag();  // clocks that must be applied
  // Each clock can spare the pushes of b workers (backup workers).
  int short_of = 0;
  for (int w = 0; w < options_.workers; ++w) {
    if (!left_[w] || pushed_[w] >= needed) continue;
    if (++short_of > options_.backup_workers)
      return "worker " + std::to_string(w) + " left after " + std::to_string(pushed_[w]) +
             " steps" +
             (behind_at_leave_[w].empty()
                  ? ""
                  : " while it waited for " + behind_at_leave_[w] +
                        " (a worker stopped or slowed there made it give up)") +
             "; clock " + std::to_string(pushed_[w]) + " can never complete";
  }
  return {};
}

void ShardState::check_leave(int worker, int64_t clock) const {
  check_worker(worker);
  if (clock != pushed_[worker])
    throw RequestError(wire::STATUS_BAD_CLOCK, "worker " + std::to_string(worker) +
                                                   " said bye after " + std::to_string(clock) +
                                                   " steps but pushed " +
                                                   std::to_string(pushed_[worker]));
}

bool ShardState::leave(int worker, int64_t clock) {
  check_leave(worker, clock);
  std::string behind;
  for (int w = 0; w < options_.workers; ++w)
    if (!left_[w] && w != worker && pushed_[w] < pushed_[worker])
      behind += (behind.empty() ? "worker " : ", worker ") + std::to_string(w) + " (pushed " +
                std::to_string(pushed_[w]) + ")";
  behind_at_leave_[static_cast<size_t>(worker)] = behind;
  left_[worker] = 1;
  ++left_count_;
  const int64_t before = applied_;
  if (options_.continue_on_failure) apply_complete_clocks();
  return applied_ != before;
}

bool ShardState::fail(int worker) {
  PSAR_CHECK(options_.continue_on_failure, "ps shard: fail() needs on_worker_failure continue");
  check_worker(worker);
  left_[worker] = 1;
  failed_[worker] = 1;
  ++left_count_;
  for (Slot& slot : slots_)  // its pushes of clocks not yet applied
    if (slot.arrived[static_cast<size_t>(worker)]) {
      slot.arrived[static_cast<size_t>(worker)] = 0;
      slot.grads[static_cast<size_t>(worker)] = {};
      --slot.count;
    }
  const int64_t before = applied_;
  apply_complete_clocks();
  return applied_ != before;
}

std::vector<int> ShardState::waiting_for() const {
  std::vector<int> out;
  for (int w = 0; w < options_.workers; ++w)
    if (!left_[w] && (options_.consistency == Consistency::kAsp || pushed_[w] <= applied_))
      out.push_back(w);
  return out;
}

int64_t ShardState::saved_floats(std::span<const int64_t> rows) const {
  if (!sparse_) return options_.range.size();
  int64_t floats = rows_.tail(options_.range).size();
  for (int64_t r : rows) floats += extent(r).size();
  return floats;
}

ShardState::Saved ShardState::saved() const {
  Saved out;
  out.optimizer_steps = optimizer_->steps();
  const auto state = optimizer_->state();
  if (!sparse_) {
    for (const auto& b : state) out.optimizer_state.emplace_back(b.begin(), b.end());
    return out;
  }
  for (const Entry& e : index_) {
    out.rows.push_back(e.row);
    out.versions.push_back(e.version);
  }
  const int64_t tail = rows_.tail(options_.range).size();
  for (const auto& b : state) {
    std::vector<float>& v = out.optimizer_state.emplace_back(b.begin(), b.begin() + tail);
    v.reserve(static_cast<size_t>(saved_floats(out.rows)));
    for (const Entry& e : index_)
      v.insert(v.end(), b.begin() + e.at, b.begin() + e.at + extent(e.row).size());
  }
  return out;
}

void ShardState::restore(int64_t clock, std::span<const float> params, int64_t optimizer_steps,
                         const std::vector<std::span<const float>>& optimizer_state,
                         std::span<const int64_t> rows, std::span<const int64_t> versions) {
  PSAR_CHECK(options_.consistency == Consistency::kBsp, "ps shard: restore needs bsp");
  PSAR_CHECK(applied_ == 0, "ps shard: restore after updates");
  PSAR_CHECK(params.size() == static_cast<size_t>(options_.range.size()), "ps shard: restoring ",
             params.size(), " floats into ", to_string(options_.range));
  PSAR_CHECK(rows.size() == versions.size() && (sparse_ || rows.empty()), "ps shard: restoring ",
             rows.size(), " rows with ", versions.size(), " versions into a ",
             sparse_ ? "sparse" : "dense", " shard");
  const std::span<float> mine = params_.writable();
  std::copy(params.begin(), params.end(), mine.begin());
  if (sparse_) {  // the index as saved: the tail's state, then the rows' in order
    index_.clear();
    state_used_ = rows_.tail(options_.range).size();
    for (size_t i = 0; i < rows.size(); ++i) {
      PSAR_CHECK(rows[i] >= first_row_ && rows[i] < last_row_ &&
                     (i == 0 || rows[i] > rows[i - 1]) && versions[i] >= 0 && versions[i] <= clock,
                 "ps shard: restoring row ", rows[i], " at version ", versions[i], " into ",
                 to_string(options_.range), " at clock ", clock);
      index_.push_back({rows[i], state_used_, versions[i]});
      state_used_ += extent(rows[i]).size();
    }
    state_capacity_ = std::max<int64_t>(state_used_, 1);
    optimizer_ = make_optimizer(options_.optimizer, state_capacity_);
    recent_.clear();  // rows_since() scans the versions until the log covers it again
  }
  const auto state = optimizer_->state();
  PSAR_CHECK(state.size() == optimizer_state.size(), "ps shard: optimizer state has ",
             optimizer_state.size(), " buffers, expected ", state.size());
  for (size_t b = 0; b < state.size(); ++b) {
    PSAR_CHECK(static_cast<int64_t>(optimizer_state[b].size()) == saved_floats(rows),
               "ps shard: optimizer buffer ", b, " holds ", optimizer_state[b].size(),
               " floats, expected ", saved_floats(rows));
    std::copy(optimizer_state[b].begin(), optimizer_state[b].end(), state[b].begin());
  }
  optimizer_->set_steps(optimizer_steps);
  std::fill(pushed_.begin(), pushed_.end(), clock);
  applied_ = clock;
  restored_at_ = clock;
}

}  // namespace psar::ps
