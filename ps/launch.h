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

// A job's options, read once from the ps.* keys (ps_options,
// sync/sync_options.h); the backend that launches it adds the run's
// optimizer, sparse rows and checkpoints. Each shard and each worker takes
// its part as it is: launch_ps fills in only what the launch learns.
struct PsOptions {
  // The layout, and how the vector is cut and served.
  int servers = 1;  // S, dedicated layout only
  bool colocated = false;
  std::string interface = "auto";  // see ps/address.h
  bool align_shards = false;
  int64_t chunk_bytes = 1 << 20;  // pipelining unit of a push_pull (ps.chunk_bytes)
  int64_t shard_chunks = 0;       // chunks per shard, 0 = auto (ps.shard_chunks, ps/sharding.h)
  // Every shard's: ps.consistency, staleness, backup_workers,
  // on_worker_failure, timeout, security; the optimizer, the sparse rows and
  // the checkpoints. launch_ps adds the shard, its range and chunks, the
  // workers, the token, its addresses and NIC, the workers' keys and the
  // snapshot it resumes from.
  ServerOptions server;
  // Every worker's: ps.timeout, the sparse rows and (resumed) the first
  // clock. launch_ps adds the worker, the token, the shards and their
  // chunks, the NIC, the host and its key pair.
  ClientOptions client;
  // A resumed job: the snapshot each shard starts from (null: none).
  std::function<std::shared_ptr<const ShardSnapshot>(int shard)> resume_shard;

  // What servers and workers must agree on, set on both.
  void set_timeout(double seconds) { server.timeout_s = client.timeout_s = seconds; }
  void set_rows(const RowSpace& rows) { server.rows = client.rows = rows; }
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
