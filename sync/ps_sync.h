#pragma once
// The parameter-server GradientSync (`--sync ps`): each worker pushes its
// gradient to the server shards and pulls the updated parameters; the
// optimizer runs on the servers (ps/). Configured by the `ps` section
// (SyncOptions::ps, read by ps_options in sync/sync_options.h).

#include <functional>
#include <memory>
#include <vector>

#include "ps/launch.h"
#include "sync/gradient_sync.h"

namespace psar {

class PsSync final : public GradientSync {
 public:
  explicit PsSync(ps::PsRank rank);
  ~PsSync() override;  // goodbye to the servers; waits for a co-located shard; never throws

  std::string name() const override { return "ps"; }
  void step(std::span<float> params, std::span<float> grads) override;
  // Overlap (docs/overlap.md): each range's chunks are pushed as soon as all
  // their gradients are final, and their parameters pulled into the arena as
  // the servers answer; finish() waits for the rest of the step's replies.
  bool overlaps() const override { return true; }
  void sync_range(int64_t offset, std::span<float> params, std::span<float> grads) override;
  void finish(std::span<float> params, std::span<float> grads) override;
  // Layer-wise start (docs/overlap.md): complete() waits for the step's
  // remaining replies on the communication thread; the pushes leave from a
  // copy of the gradients, so that the next step may clear the arena while
  // ZeroMQ still sends them.
  double start_layerwise(std::function<void(int64_t, int64_t)> landed) override;
  void complete() override;
  void wait_sent() override;
  // Payload floats this worker pushed (sent) and pulled (received), in bytes.
  CommCounters counters() const override;
  int averaged() const override;
  const ps::PsCounters& client_counters() const { return rank_.client->counters(); }
  // ps.sparse / hybrid: the touched rows of the next push_pull.
  void set_touched_rows(std::span<const int64_t> rows) override {
    rank_.client->set_touched_rows(rows);
  }
  // The co-located shard's traffic (zero with dedicated servers).
  ps::PsCounters server_counters() const;

 private:
  ps::PsRank rank_;
  bool open_ = false;  // a staged push_pull of this step is under way
  bool layerwise_ = false;
  std::vector<float> pushed_;  // layer-wise: the step's gradients as pushed
};

// Registry entry. On a dedicated server rank, SyncSetup::serve runs the shard
// until every worker said goodbye; when `served` is given, the shard's final
// counters are stored there.
SyncSetup make_ps_sync(SyncInit& init);
SyncSetup make_ps_sync(SyncInit& init, std::shared_ptr<ps::PsCounters> served);

// `--sync hybrid` (Parallax; docs/sparse.md): the parameter server, sparse,
// for the embedding tables (the arena's head, SyncInit::sparse) and the
// allreduce sync.algorithm for the dense rest, in one step. A ConfigError
// naming sync.backend for a model without embedding tables.
class HybridSync final : public GradientSync {
 public:
  HybridSync(std::unique_ptr<PsSync> tables, std::unique_ptr<GradientSync> dense, int64_t split);
  std::string name() const override { return "hybrid"; }
  void step(std::span<float> params, std::span<float> grads) override;
  CommCounters counters() const override;
  void set_touched_rows(std::span<const int64_t> rows) override { tables_->set_touched_rows(rows); }
  Optimizer* optimizer() override { return nullptr; }

 private:
  std::unique_ptr<PsSync> tables_;
  std::unique_ptr<GradientSync> dense_;
  int64_t split_;  // floats of the tables
};
SyncSetup make_hybrid_sync(SyncInit& init);

}  // namespace psar
