#include "sync/ps_sync.h"

#include "core/csv.h"
#include "core/errors.h"
#include "core/log.h"
#include "core/checkpoint.h"
#include "sync/allreduce_sync.h"

namespace psar {

PsSync::PsSync(ps::PsRank rank) : rank_(std::move(rank)) {
  PSAR_CHECK(rank_.client, "PsSync on a rank that is not a worker");
}

PsSync::~PsSync() {
  try {
    if (rank_.client) rank_.client->close();
  } catch (const std::exception& e) {
    PSAR_LOG(kWarn, "ps", "goodbye to the servers failed: " << e.what());
  }
  try {
    // A co-located shard serves until every worker is done, not just this one.
    if (rank_.server_thread) rank_.server_thread->join();
  } catch (const std::exception& e) {
    PSAR_LOG(kWarn, "ps", "co-located shard " << rank_.shard << " ended with: " << e.what());
  }
}

void PsSync::step(std::span<float> params, std::span<float> grads) {
  if (rank_.server_thread) rank_.server_thread->check();
  rank_.client->push_pull(grads, params);
}

void PsSync::sync_range(int64_t offset, std::span<float> params, std::span<float> grads) {
  ps::Client& client = *rank_.client;
  const auto size = static_cast<size_t>(client.size());
  if (layerwise_) {  // the next step's backward may write the arena before ZeroMQ sent it
    std::copy(grads.begin(), grads.end(), pushed_.begin() + offset);
    grads = std::span<float>(pushed_).subspan(static_cast<size_t>(offset), grads.size());
  }
  if (!open_) {
    // The ranges are slices of the arenas (GradientSync::sync_range), so
    // the whole arenas start `offset` floats before them.
    client.begin_push_pull(std::span<const float>(grads.data() - offset, size),
                           std::span<float>(params.data() - offset, size));
    open_ = true;
  }
  client.push_pull_range({offset, offset + static_cast<int64_t>(grads.size())});
}

double PsSync::start_layerwise(std::function<void(int64_t, int64_t)> landed) {
  ps::Client& client = *rank_.client;
  layerwise_ = true;
  pushed_.assign(static_cast<size_t>(client.size()), 0.0f);
  client.set_on_params([landed = std::move(landed)](ps::KeyRange keys) {
    landed(keys.begin, keys.end);
  });
  return client.reply_deadline_s();
}

void PsSync::complete() {
  PSAR_CHECK(layerwise_ && open_, "PsSync::complete outside a layer-wise step");
  open_ = false;
  rank_.client->end_push_pull();
}

void PsSync::wait_sent() {
  if (open_) rank_.client->wait_sent();
}

void PsSync::finish(std::span<float> params, std::span<float> grads) {
  ps::Client& client = *rank_.client;
  if (rank_.server_thread) rank_.server_thread->check();  // on the main thread only
  if (layerwise_) return;  // the communication thread completes the step (complete())
  if (!open_) {  // no range of this step went through sync_range
    client.begin_push_pull(grads, params);
    client.push_pull_range({0, client.size()});
  }
  open_ = false;
  client.end_push_pull();
}

CommCounters PsSync::counters() const {
  const ps::PsCounters& c = rank_.client->counters();
  CommCounters out;
  out.bytes_sent = c.payload_bytes_out;
  out.bytes_recv = c.payload_bytes_in;
  out.messages_sent = c.messages_out;
  out.messages_recv = c.messages_in;
  out.pushes_dropped = c.pushes_dropped;
  return out;
}

int PsSync::averaged() const { return rank_.client->min_averaged(); }

ps::PsCounters PsSync::server_counters() const {
  return rank_.server_thread ? rank_.server_thread->server().counters() : ps::PsCounters{};
}

SyncSetup make_ps_sync(SyncInit& init) { return make_ps_sync(init, nullptr); }

namespace {

// Checkpoint blobs hold floats: an integer 0 <= v < 2^48 travels exactly as
// the two floats v >> 24 and v & (2^24 - 1).
void add_int_blob(CheckpointFile& f, const std::string& name, std::span<const int64_t> values) {
  std::vector<float> out;
  out.reserve(2 * values.size());
  for (const int64_t v : values) {
    PSAR_CHECK(v >= 0 && v < (int64_t{1} << 48), "checkpoint blob ", name, ": ", v,
               " is outside [0, 2^48)");
    out.push_back(static_cast<float>(v >> 24));
    out.push_back(static_cast<float>(v & 0xFFFFFF));
  }
  f.add_blob(name, out);
}

std::vector<int64_t> int_blob(const CheckpointFile& f, const std::string& name) {
  std::vector<int64_t> out;
  if (!f.has_blob(name)) return out;
  const auto v = f.blob(name);
  if (v.size() % 2 != 0)
    throw DataError("checkpoint file '" + f.origin() + "': blob " + name + " holds an odd " +
                    std::to_string(v.size()) + " floats");
  for (size_t i = 0; i < v.size(); i += 2)
    out.push_back(static_cast<int64_t>(v[i]) * (int64_t{1} << 24) + static_cast<int64_t>(v[i + 1]));
  return out;
}

// The shards' part of a checkpoint (core/checkpoint.h): each shard writes
// shard_<s>.ckpt when it has applied the checkpoint's step, and a resumed
// shard reads it back.
void plan_shard_checkpoints(ps::PsOptions& o, const CheckpointPlan& plan) {
  const bool saving = plan.every > 0 && !plan.run_dir.empty();
  if ((saving || plan.resume_step >= 0) && o.server.consistency != ps::Consistency::kBsp)
    throw ConfigError(std::string("train.checkpoint_every / --resume with --sync ps need "
                                  "ps.consistency: bsp (under ") +
                      ps::to_string(o.server.consistency) +
                      " the shards' state at a step is not defined)");
  if (saving) {
    o.server.checkpoint_every = plan.every;
    o.server.on_checkpoint = [run_dir = plan.run_dir](const ps::ShardSnapshot& s) {
      CheckpointFile f;
      f.set("kind", "shard");
      f.set_int("shard", s.shard);
      f.set_int("step", s.clock);
      f.set_int("optimizer_steps", s.optimizer_steps);
      f.add_blob("params", s.params);
      for (size_t b = 0; b < s.optimizer_state.size(); ++b)
        f.add_blob("optimizer." + std::to_string(b), s.optimizer_state[b]);
      if (!s.chunk_rows.empty()) {  // sparse rows: the touched ones and their versions
        add_int_blob(f, "rows", s.rows);
        add_int_blob(f, "row_versions", s.row_versions);
        add_int_blob(f, "chunk_rows", s.chunk_rows);
      }
      const std::string dir = checkpoint_dir(run_dir, s.clock);
      make_dirs(dir);
      f.write(shard_checkpoint_path(dir, s.shard));
    };
  }
  if (plan.resume_step >= 0) {
    o.client.first_clock = plan.resume_step;
    o.resume_shard = [plan](int shard) {
      const std::string path =
          shard_checkpoint_path(checkpoint_dir(plan.resume_dir, plan.resume_step), shard);
      const CheckpointFile f = CheckpointFile::read(path);
      auto s = std::make_shared<ps::ShardSnapshot>();
      s->shard = shard;
      s->clock = f.get_int("step");
      if (f.get_int("shard") != shard || s->clock != plan.resume_step)
        throw DataError("checkpoint file '" + path + "' holds shard " + f.get("shard") +
                        " at step " + f.get("step"));
      s->optimizer_steps = f.get_int("optimizer_steps");
      const auto params = f.blob("params");
      s->params.assign(params.begin(), params.end());
      for (size_t b = 0; f.has_blob("optimizer." + std::to_string(b)); ++b) {
        const auto v = f.blob("optimizer." + std::to_string(b));
        s->optimizer_state.emplace_back(v.begin(), v.end());
      }
      s->rows = int_blob(f, "rows");
      s->row_versions = int_blob(f, "row_versions");
      s->chunk_rows = int_blob(f, "chunk_rows");
      return std::shared_ptr<const ps::ShardSnapshot>(std::move(s));
    };
  }
}

}  // namespace

namespace {
// The parameter server over arena floats [0, size) (the tables under hybrid).
SyncSetup ps_setup(SyncInit& init, const ps::PsOptions& options, int64_t size,
                   std::shared_ptr<ps::PsCounters> served) {
  std::vector<ParamInfo> infos;
  for (const ParamInfo& p : init.params.infos())
    if (p.offset < size) infos.push_back(p);
  ps::PsRank rank = ps::launch_ps(
      init.world, options, init.params.params().subspan(0, static_cast<size_t>(size)), infos);
  SyncSetup setup;
  if (!rank.client) {
    std::shared_ptr<ps::Server> server(std::move(rank.server));
    setup.serve = [server, served] {
      server->run();
      const ps::PsCounters c = server->counters();
      if (served) *served = c;
      const ps::ShardState::StateBytes state = server->state_bytes();
      // One parseable line per shard (experiments/ps_vs_allreduce.py and
      // sparse_ps.py read it).
      PSAR_LOG(kInfo, "ps",
               "shard " << server->options().shard << " served: payload_bytes_in="
                        << c.payload_bytes_in << " payload_bytes_out=" << c.payload_bytes_out
                        << " messages_in=" << c.messages_in << " messages_out=" << c.messages_out
                        << " rejected=" << c.rejected << " refused=" << c.refused
                        << " state_bytes_held=" << state.held
                        << " state_bytes_allocated=" << state.allocated);
    };
    return setup;
  }
  setup.endpoints = "parameter server:";
  for (const ps::ShardAddress& a : rank.shards)
    setup.endpoints += " shard " + std::to_string(a.shard) + " at " + a.endpoint +
                       (a.host.empty() ? "" : " (" + a.host + ")") + ";";
  setup.endpoints.back() = '\n';
  if (rank.worker_comm) {
    setup.owned_workers = std::move(rank.worker_comm);
    setup.workers = setup.owned_workers.get();
  } else {
    setup.workers = &init.world;
  }
  setup.sync = std::make_unique<PsSync>(std::move(rank));
  return setup;
}

void check_sparse_plan(const SyncInit& init, const std::string& key) {
  if (init.sparse.floats <= 0)
    throw ConfigError(key + " needs a model with embedding tables (model.type dlrm); model.type " +
                      init.options.model_type + " has none");
}
}  // namespace

SyncSetup make_ps_sync(SyncInit& init, std::shared_ptr<ps::PsCounters> served) {
  ps::PsOptions options = init.options.ps;
  options.server.optimizer = init.optimizer;
  plan_shard_checkpoints(options, init.checkpoints);
  if (init.options.ps_sparse) {
    check_sparse_plan(init, "ps.sparse");
    options.set_rows({init.sparse.floats, init.sparse.row_floats});
  }
  return ps_setup(init, options, init.params.size(), std::move(served));
}

HybridSync::HybridSync(std::unique_ptr<PsSync> tables, std::unique_ptr<GradientSync> dense,
                       int64_t split)
    : tables_(std::move(tables)), dense_(std::move(dense)), split_(split) {}

Optimizer* HybridSync::optimizer() { return dense_->optimizer(); }

void HybridSync::step(std::span<float> params, std::span<float> grads) {
  const auto n = static_cast<size_t>(split_);
  tables_->step(params.subspan(0, n), grads.subspan(0, n));
  dense_->step(params.subspan(n), grads.subspan(n));
}

CommCounters HybridSync::counters() const {
  CommCounters a = tables_->counters();
  const CommCounters b = dense_->counters();
  a.bytes_sent += b.bytes_sent;
  a.bytes_recv += b.bytes_recv;
  a.messages_sent += b.messages_sent;
  a.messages_recv += b.messages_recv;
  return a;
}

SyncSetup make_hybrid_sync(SyncInit& init) {
  check_sparse_plan(init, "sync.backend hybrid");
  const std::string& algorithm = init.options.algorithm;
  const auto algos = allreducer_names(/*include_device=*/false);
  if (std::find(algos.begin(), algos.end(), algorithm) == algos.end()) {
    std::string known;
    for (const auto& a : algos) known += (known.empty() ? "" : ", ") + a;
    throw ConfigError("sync.algorithm: '" + algorithm + "' is not a host allreduce (known: " +
                      known + ")");
  }
  ps::PsOptions options = init.options.ps;
  options.server.optimizer = init.optimizer;
  plan_shard_checkpoints(options, init.checkpoints);
  options.set_rows({init.sparse.floats, init.sparse.row_floats});
  SyncSetup setup = ps_setup(init, options, init.sparse.floats, nullptr);
  if (!setup.sync) return setup;  // a dedicated server rank
  auto tables = std::unique_ptr<PsSync>(static_cast<PsSync*>(setup.sync.release()));
  const int64_t dense = init.params.size() - init.sparse.floats;
  auto allreduce = std::make_unique<AllreduceSync>(
      *setup.workers, make_allreducer(algorithm, init.options.allreduce), init.optimizer,
      dense);
  setup.sync = std::make_unique<HybridSync>(std::move(tables), std::move(allreduce),
                                            init.sparse.floats);
  return setup;
}

}  // namespace psar
