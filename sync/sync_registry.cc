#include <algorithm>

#include "allreduce/allreducer.h"
#include "core/errors.h"
#include "sync/allreduce_sync.h"
#include "sync/gradient_sync.h"
#include "sync/ps_sync.h"
#include "sync/zero_sync.h"

namespace psar {

namespace {
// Dedicated server ranks: ps.servers unless they run as threads in the workers.
int ps_server_ranks(const SyncOptions& o) { return o.ps.colocated ? 0 : o.ps.servers; }

int no_server_ranks(const SyncOptions&) { return 0; }

// Backends beyond the allreduce algorithms; one line each.
constexpr SyncEntry kBackends[] = {
    {"ps", &make_ps_sync, "ZeroMQ sharded parameter server (ps.servers, ps.consistency, ...)",
     &ps_server_ranks, /*model_parallel=*/false, /*drops_workers=*/true},
    {"hybrid", &make_hybrid_sync,
     "Parallax: the parameter server, sparse, for the embedding tables; sync.algorithm for the "
     "dense layers",
     &ps_server_ranks, /*model_parallel=*/false},
    {"auto", &make_tuned_sync,
     "per message size, the allreduce the tuning table (sync.tuning, psar tune) predicts fastest",
     &no_server_ranks, /*model_parallel=*/true},
};

std::span<const SyncEntry> entries() { return kBackends; }
}  // namespace

void GradientSync::sync_range(int64_t, std::span<float>, std::span<float>) {
  throw ConfigError("sync.overlap: the " + name() + " backend does not overlap its sync");
}

void GradientSync::finish(std::span<float>, std::span<float>) {
  throw ConfigError("sync.overlap: the " + name() + " backend does not overlap its sync");
}

double GradientSync::start_layerwise(std::function<void(int64_t, int64_t)>) { return 0; }

std::span<const SyncEntry> sync_registry() { return entries(); }

std::vector<std::string> sync_names() {
  std::vector<std::string> names = allreducer_names(/*include_device=*/true);
  for (const auto& e : entries()) names.push_back(e.name);
  return names;
}

SyncCapabilities sync_capabilities(const SyncOptions& options) {
  const std::string& name = options.backend;
  bool drops_workers = false;
  SyncCapabilities caps;
  for (const auto& e : entries())
    if (name == e.name) {
      caps = {e.server_ranks(options), e.model_parallel};
      drops_workers = e.drops_workers;
    }
  zero_stage(options, name);  // sync.zero's refusals, before anything is built
  if (options.ps.server.continue_on_failure && !drops_workers)
    throw ConfigError("ps.on_worker_failure: continue needs sync.backend ps; " + name +
                      " is an allreduce, a collective in which every rank's result waits for "
                      "every rank, so it cannot go on without a dead one (use "
                      "train.checkpoint_every and psar train --resume)");
  if (options.ps.server.backup_workers != 0 && !drops_workers)
    throw ConfigError("ps.backup_workers: sync.backend " + name +
                      " cannot spare backup workers: an allreduce is a collective in which "
                      "every rank's contribution is part of every result, so there are no "
                      "\"first N gradients to arrive\" to keep (use sync.backend: ps with "
                      "ps.consistency: bsp)");
  return caps;
}

SyncSetup make_gradient_sync(const std::string& name, SyncInit& init) {
  for (const auto& e : entries())
    if (name == e.name) return e.make(init);
  const auto algos = allreducer_names(/*include_device=*/true);
  if (std::find(algos.begin(), algos.end(), name) != algos.end())
    return zero_stage(init.options, name) > 0 ? make_zero_sync(name, init)
                                              : make_allreduce_sync(name, init);
  std::string known;
  for (const auto& n : sync_names()) known += (known.empty() ? "" : ", ") + n;
  throw ConfigError("sync.backend: unknown backend '" + name + "' (known: " + known + ")");
}

}  // namespace psar
