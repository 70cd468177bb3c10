#pragma once
// Bootstrap of a parameter-server job over an existing communicator (MPI in
// real runs, in-process threads in tests): who serves, who works, where the
// servers listen, and the job token. Nothing is hard-coded: every rank
// learns every rank's host (name and interfaces), each server binds a free
// port on the address options.interface picks for its host (ps/address.h:
// `auto` = the one that reaches the other hosts) and advertises its own
// host's address, and the real endpoints and the token (random, drawn by
// rank 0) travel through Comm::allgather_bytes / broadcast_bytes, the
// control plane. Under ps.security curve (ps/curve.h) so do the public keys:
// every worker makes its key pair and all ranks learn the workers' public
// keys (each shard's allow-list) before the servers start; each shard makes
// its pair on start and advertises its public key beside its endpoint.
//
// Layouts, for a world of W ranks:
//  - dedicated (default): ranks 0..S-1 are server shards, ranks S..W-1 are
//    workers 0..N-1 (N = W - S). Servers run Server::run() on their main
//    thread; the workers get a communicator of their own (split off).
//  - co-located: every rank r is worker r and hosts shard r on a thread
//    (S = N = W), so the parameter traffic spreads over all ranks.

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "core/optim.h"
#include "core/param_store.h"
#include "ps/address.h"
#include "ps/client.h"
#include "ps/server.h"

namespace psar::ps {

struct PsOptions {
  int servers = 1;  // S, dedicated layout only
  bool colocated = false;
  Consistency consistency = Consistency::kBsp;
  int staleness = 2;
  int backup_workers = 0;
  bool continue_on_failure = false;  // ps.on_worker_failure: continue  // b (bsp): each clock aggregates the first N − b pushes (ps.backup_workers)
  std::string interface = "auto";  // see ps/address.h
  bool align_shards = false;
  int64_t chunk_bytes = 1 << 20;  // pipelining unit of a push_pull (ps.chunk_bytes)
  int64_t shard_chunks = 0;       // chunks per shard, 0 = auto (ps.shard_chunks, ps/sharding.h)
  double timeout_s = 60.0;
  Security security = Security::kNone;  // ps.security
  OptimizerOptions optimizer;
  RowSpace rows;  // sparse rows (ps/sparse_rows.h); none by default
  // Checkpoints and resume (bsp; ServerOptions, ClientOptions): the hook a
  // shard calls with its snapshot, the snapshot a shard starts from (null:
  // none), the workers' first clock.
  int64_t checkpoint_every = 0;
  std::function<void(const ShardSnapshot&)> on_checkpoint;
  std::function<std::shared_ptr<const ShardSnapshot>(int shard)> resume_shard;
  int64_t first_clock = 0;
};

// One rank's part in the job.
struct PsRank {
  int worker = -1;  // this rank's worker id; -1 on a dedicated server
  int workers = 0;  // N
  int shard = -1;   // the shard this rank serves; -1 if none
  uint64_t token = 0;
  BindAddress address;               // where this rank's servers bind and what they advertise
  std::vector<ShardAddress> shards;  // with the hostname of each shard's rank
  std::unique_ptr<Server> server;               // dedicated server: call run()
  std::unique_ptr<ServerThread> server_thread;  // co-located: already serving
  std::unique_ptr<Client> client;               // every worker
  std::unique_ptr<Comm> worker_comm;            // dedicated layout, on workers
};

// Collective over `world`: runs `bind` on this rank (a rank that serves
// nothing returns "") and returns every rank's endpoint in rank order. If
// `bind` throws on some rank, every rank throws CommError naming it, so no
// rank waits for an endpoint that will never come.
std::vector<std::string> exchange_endpoints(Comm& world, const std::function<std::string()>& bind,
                                            const std::string& what);

// Collective over `world`. Servers and clients share the emulated NIC of
// their rank (world.network(), comm/netem.h), if any. `initial` holds the full initial parameters
// (identical on every rank); `infos` are the tensors, for ps.align_shards.
// Throws ConfigError for a layout that leaves no worker, CommError (on every
// rank) if some rank could not bind.
PsRank launch_ps(Comm& world, const PsOptions& options, std::span<const float> initial,
                 std::span<const ParamInfo> infos = {});

}  // namespace psar::ps
