#pragma once
// ShardState: what one parameter-server shard knows, without any sockets —
// its slice of the parameters, the optimizer over that slice, the gradients
// pushed but not yet applied, and each worker's clock. The Server feeds it
// validated requests; tests and the benchmark drive it directly.
//
// Consistency models (clocks are 0-based step numbers; a worker's clock is
// how many gradients it has pushed):
//  - bsp: clock c is applied once all N workers pushed c, as ONE optimizer
//    step on the average (sum in worker order, times 1/N) — the same math the
//    allreduce backends do, so parameters match --sync mpi. A pull for step c
//    waits until clocks 0..c-1 are applied.
//  - ssp(s): clocks are aggregated and applied exactly as in bsp, but a pull
//    for step c is answered once clocks 0..c-1-s are applied: a worker may
//    run s clocks ahead of the slowest. ssp with s = 0 is bsp.
//  - asp: every push is applied at once as its own optimizer step on
//    gradient/N; pulls never wait.
//  - bsp with b backup workers (Chen et al. 2016, "Revisiting distributed
//    synchronous SGD"): of the `workers` = N + b workers, clock c is applied
//    as soon as the first N pushes of c have arrived, on their average (sum in
//    worker order, times 1/N); a push of a clock already applied is dropped
//    (counted in dropped(worker)) and the worker goes on: its pull of the next
//    step is answered with the newest parameters. A worker that falls two
//    clocks behind stays behind — every push of it is late — until the
//    others slow down. Each chunk picks its own first N (chunks and shards
//    need not agree on who was late).
//  - on_worker_failure continue: a worker that fails (fail(): the server saw
//    it silent past its deadline) or leaves before the others (a goodbye)
//    no longer holds anything up. A failed worker's pushes of clocks not yet
//    applied are discarded; from then on a clock is applied once every worker
//    that can still push it has (up to workers − b of them), on the average
//    over those: the average is rescaled to the survivors.
//    workers_changed_at() is the first clock with fewer workers.
// Aggregation runs while the pushes arrive: once workers 0..k have pushed
// clock c, their gradients are summed (in worker order) into worker 0's
// receive buffer and the others' buffers are let go, so the push completing
// c leaves only the workers that came out of order, the 1/N and the
// optimizer step to do — the same additions in the same order as summing
// all at the end, so the result is bit for bit the same.
// Memory: bsp/ssp hold up to N·(s+1) pushed gradients (the receive buffers
// themselves, no copies) while they arrive out of worker order; the average
// is written into the first arrived worker's buffer (in worker order).
// Under continue every push stays apart until its clock is applied (fail()
// may discard it).
//
// Sparse shards (options.rows.sparse(range), docs/sparse.md): every push
// names the rows it touched and carries only their floats (plus the range's
// dense tail). A clock's average covers the union of the rows its pushes
// touched — each row summed in worker order (at the end: sparse pushes are
// not folded as they arrive) over the pushes that name it,
// times 1/N, bit for bit what the dense average gives there — and the
// optimizer steps those rows and the tail only (lazy, as LazyAdam and
// SparseAdam: an untouched row keeps its parameters and its momentum/Adam
// state; Adam's bias correction uses the shard's update count, the same for
// every row). Compute and state traffic are proportional to the touched
// rows, and so is the state's memory: a row's optimizer state and version
// are allocated when an update first touches it (an index of the touched
// rows, ascending, each with the offset of its state and its version; the
// optimizer's buffers grow by doubling, the tail's state first). Each row
// carries the version (updates applied) of the last update that touched it
// (0: never); rows_since(v) lists the rows touched after version v.

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/optim.h"
#include "ps/sharding.h"
#include "ps/sparse_rows.h"

namespace psar::ps {

enum class Consistency { kBsp, kSsp, kAsp };
// Throws ConfigError naming the choices.
Consistency parse_consistency(const std::string& name);
const char* to_string(Consistency c);
std::vector<std::string> consistency_names();  // what ps.consistency accepts
// ps.backup_workers = `backup` of `workers` under `consistency`: a
// ConfigError unless 0, or bsp with 0 < b < N = workers − b.
void check_backup_workers(int backup, int workers, Consistency consistency);

// The shard's parameters, shared with zero-copy replies still in flight:
// writes go in place when no reply references the buffer, otherwise to a
// fresh copy (copy-on-write); the old buffer dies with its last reply.
class SharedParams {
 public:
  explicit SharedParams(std::span<const float> initial);
  ~SharedParams();
  SharedParams(const SharedParams&) = delete;
  SharedParams& operator=(const SharedParams&) = delete;

  std::span<const float> view() const;
  std::span<float> writable();
  // A reference to the current buffer for a zero-copy send; pass it as the
  // hint of `release` (a zmq_free_fn), which may run on any thread.
  void* acquire();
  static void release(void* data, void* hint);
  int64_t copies() const { return copies_; }

 private:
  struct Block;
  Block* block_;
  int64_t copies_ = 0;
};

// A pushed gradient: `data` stays valid and writable while `owner` lives.
struct Gradient {
  std::span<float> data;
  std::shared_ptr<void> owner;
};

struct ShardStateOptions {
  KeyRange range;
  int workers = 1;
  Consistency consistency = Consistency::kBsp;
  int staleness = 0;  // ssp only
  OptimizerOptions optimizer;
  int backup_workers = 0;  // b (bsp only): a clock aggregates the first workers − b pushes
  bool continue_on_failure = false;  // ps.on_worker_failure: continue
};

class ShardState {
 public:
  // The shard is sparse when rows.sparse(options.range).
  ShardState(const ShardStateOptions& options, std::span<const float> initial,
             const RowSpace& rows = {});

  // Worker `worker`'s gradient of step `clock` over the whole shard. Returns
  // true if parameters changed. Throws RequestError (bad worker or clock).
  // With backup workers a push of a clock already applied is dropped
  // (last_push_dropped() says so until the next push).
  bool push(int worker, int64_t clock, Gradient grad);
  // Sparse shards: as push(), of the touched `rows` (ascending, each with a
  // float in the range; valid while grad.owner lives), `grad.data` holding
  // their floats inside the range row after row, then the range's dense
  // tail (RowSpace::tail). A push() into a sparse shard touches every row.
  bool push_rows(int worker, int64_t clock, std::span<const int64_t> rows, Gradient grad);
  // Throws RequestError if `worker` may not ask for the parameters of step `clock`.
  void check_pull(int worker, int64_t clock) const;
  bool pull_ready(int64_t clock) const;
  // Non-empty (the reason) if step `clock`'s parameters can never come,
  // because a worker whose pushes they need has left.
  std::string pull_blocked(int64_t clock) const;
  // The worker is done after `clock` steps. Throws RequestError (check_leave
  // only checks, so that a goodbye to several chunks is all or nothing).
  void check_leave(int worker, int64_t clock) const;
  // Returns true if parameters changed (continue: clocks it held up).
  bool leave(int worker, int64_t clock);
  // continue only: drops a worker that failed; returns true if parameters changed.
  bool fail(int worker);
  bool has_failed(int worker) const { return failed_[worker]; }
  // The first clock applied without every worker (-1: none yet).
  int64_t workers_changed_at() const { return workers_changed_at_; }
  // Receive buffers an open clock still holds (bsp/ssp; 0 for any other).
  int held(int64_t clock) const;
  // How many gradients the newest applied clock averaged (0 before any; asp: 0).
  int last_averaged() const { return last_averaged_; }

  bool all_left() const { return left_count_ == options_.workers; }
  bool has_left(int worker) const { return left_[worker]; }
  int64_t pushed(int worker) const { return pushed_[worker]; }
  // Pushes of `worker` dropped because their clock was already applied.
  int64_t dropped(int worker) const { return dropped_[worker]; }
  bool last_push_dropped() const { return last_push_dropped_; }
  // The pushes the oldest open clock aggregates: workers − backup_workers,
  // or under continue as many of them as can still come.
  int needed() const;
  // Updates applied: clocks under bsp/ssp, pushes under asp.
  int64_t applied() const { return applied_; }
  // Active workers the oldest open clock still waits for (all active ones under asp).
  std::vector<int> waiting_for() const;
  // Checkpoints: what saved() returns, and the start of a resumed job from
  // it — parameters, optimizer, row versions and every worker's clock as
  // they were once `clock` updates were applied (bsp).
  struct Saved {
    int64_t optimizer_steps = 0;
    // Dense: each buffer over the range. Sparse: each buffer's floats of
    // the tail, then of `rows` in order.
    std::vector<std::vector<float>> optimizer_state;
    std::vector<int64_t> rows;      // sparse: every row an update touched, ascending
    std::vector<int64_t> versions;  // sparse: theirs
  };
  Saved saved() const;
  // The floats of each optimizer buffer a Saved holds with these rows.
  int64_t saved_floats(std::span<const int64_t> rows) const;
  void restore(int64_t clock, std::span<const float> params, int64_t optimizer_steps,
               const std::vector<std::span<const float>>& optimizer_state,
               std::span<const int64_t> rows = {}, std::span<const int64_t> versions = {});
  int64_t optimizer_steps() const { return optimizer_->steps(); }
  SharedParams& params() { return params_; }
  bool sparse() const { return sparse_; }
  // Sparse shards: the rows an update after version `version` touched,
  // ascending (after a restore, at least those after the restored clock:
  // a resumed worker holds its parameters).
  std::vector<int64_t> rows_since(int64_t version) const;
  // Sparse shards: the version of `row` (0: no update touched it).
  int64_t version(int64_t row) const;
  // The bytes of the optimizer state and, sparse, the touched rows' index
  // (row, state offset, version): `held` in use, `allocated` by their
  // buffers (capacities). Dense shards: the optimizer's buffers over the range.
  struct StateBytes {
    int64_t held = 0;
    int64_t allocated = 0;
  };
  StateBytes state_bytes() const;
  const SharedParams& params() const { return params_; }
  const ShardStateOptions& options() const { return options_; }

 private:
  struct Pushed {  // a sparse shard's pushes name their rows
    std::span<float> data;
    std::shared_ptr<void> owner;
    std::span<const int64_t> rows;
  };
  struct Slot {
    std::vector<Pushed> grads;  // by worker
    std::vector<char> arrived;    // by worker
    int count = 0;
    int folded = 0;  // workers 0..folded-1 arrived and are summed into grads[0]
  };
  int64_t lag() const;  // how many clocks a pull may run ahead: s, or 0 for bsp
  void check_worker(int worker) const;
  void apply_complete_clocks();
  bool take(int worker, int64_t clock, Pushed grad);  // push() and push_rows()
  // One update of the parameters by an averaged gradient (dense: the range;
  // sparse: `rows` and the tail, laid out as a sparse Gradient's data).
  void update(std::span<const int64_t> rows, std::span<const float> grad);
  // Row `row`'s floats inside the range, as offsets from its begin.
  KeyRange extent(int64_t row) const;
  // Sums the arrived workers that follow the folded ones in worker order.
  void fold(Slot& slot);

  ShardStateOptions options_;
  RowSpace rows_;
  SharedParams params_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<Slot> slots_;  // clock c lives in slots_[c % slots_.size()]
  std::vector<int64_t> pushed_;
  std::vector<int64_t> dropped_;
  bool last_push_dropped_ = false;
  std::vector<char> left_;
  // [w] for a worker that left: the workers still active that had pushed
  // fewer steps than it then — what it was waiting for when it gave up.
  std::vector<std::string> behind_at_leave_;
  std::vector<char> failed_;
  int left_count_ = 0;
  int64_t workers_changed_at_ = -1;
  int last_averaged_ = 0;
  int64_t applied_ = 0;
  // Sparse shards.
  bool sparse_ = false;
  int64_t first_row_ = 0, last_row_ = 0;  // rows_in(range)
  struct Entry {  // a touched row
    int64_t row;
    int64_t at;       // its state's offset in the optimizer's buffers
    int64_t version;  // of the last update that touched it
  };
  std::vector<Entry> index_;  // ascending by row
  int64_t state_used_ = 0;      // floats of each optimizer buffer given out (the tail's first)
  int64_t state_capacity_ = 0;  // and allocated
  // The index entries of `rows` (ascending), new ones added with fresh (zero) state.
  std::vector<size_t> touch(std::span<const int64_t> rows);  // positions in index_
  void reserve_state(int64_t floats);
  struct Touched {
    int64_t version;
    std::vector<int64_t> rows;
  };
  std::vector<Touched> recent_;  // the newest updates' rows, oldest first
  size_t recent_cap_ = 0;
  int64_t restored_at_ = 0;  // the clock restore() started from
};

// The sparse average of pushes (rows_k ascending, data_k their floats then
// the tail, as ShardState::push_rows takes them), in worker order: the union
// of their rows into `rows`, and into `out` each row's floats summed in
// worker order over the pushes that name it, then the tails summed, all
// times 1/grads.size() (not scaled for one push) — elementwise the bits
// average_gradients gives the dense gradients, zero outside each one's rows.
void average_rows(const RowSpace& space, KeyRange range,
                  std::span<const std::span<const int64_t>> rows_k,
                  std::span<const std::span<const float>> data_k, std::vector<int64_t>& rows,
                  std::vector<float>& out);

// out[i] = (g_0[i] + g_1[i] + ... + g_{n-1}[i]) · (1/n), summed in worker
// order block by block (each input read once); `out` may alias g_0.
void average_gradients(std::span<float> out, std::span<const float* const> grads);

}  // namespace psar::ps
