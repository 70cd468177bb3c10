#include "ps/launch.h"

#include <cstring>
#include <random>
#include <set>

#include "core/errors.h"
#include "core/log.h"

namespace psar::ps {

namespace {

uint64_t draw_token() {
  std::random_device device;
  uint64_t token = 0;
  while (token == 0)  // 0 marks "no token" in error replies
    token = (static_cast<uint64_t>(device()) << 32) ^ device();
  return token;
}

std::span<const std::byte> bytes_of(const std::string& s) {
  return std::as_bytes(std::span<const char>(s.data(), s.size()));
}

}  // namespace

std::vector<std::string> exchange_endpoints(Comm& world, const std::function<std::string()>& bind,
                                            const std::string& what) {
  std::string mine;
  try {
    mine = bind();
  } catch (const std::exception& e) {
    mine = "!" + std::string(e.what());  // "!why": this rank failed
  }
  const auto all = world.allgather_bytes(bytes_of(mine));
  std::vector<std::string> endpoints;
  for (int r = 0; r < world.size(); ++r) {
    std::string entry(reinterpret_cast<const char*>(all[r].data()), all[r].size());
    if (!entry.empty() && entry[0] == '!')
      throw CommError("ps: rank " + std::to_string(r) + " could not start its " + what + ": " +
                      entry.substr(1));
    endpoints.push_back(std::move(entry));
  }
  return endpoints;
}

PsRank launch_ps(Comm& world, const PsOptions& options, std::span<const float> initial,
                 std::span<const ParamInfo> infos) {
  const int W = world.size(), rank = world.rank();
  const int S = options.colocated ? W : options.servers;
  if (!options.colocated && (S < 1 || S >= W))
    throw ConfigError("ps.servers = " + std::to_string(S) + " dedicated server(s) among " +
                      std::to_string(W) + " ranks leaves " + (S < 1 ? "no server" : "no worker") +
                      " (run more ranks, or set ps.colocated: true)");
  // One setting for both sides (PsOptions::set_rows): a worker and a shard
  // that disagree on the sparse rows misread each other's frames.
  PSAR_CHECK(options.server.rows.floats == options.client.rows.floats &&
                 options.server.rows.row_floats == options.client.rows.row_floats,
             "ps: the servers' and the workers' sparse rows differ (PsOptions::set_rows)");
  PsRank me;
  me.workers = options.colocated ? W : W - S;
  check_backup_workers(options.server.backup_workers, me.workers, options.server.consistency);
  me.shard = options.colocated || rank < S ? rank : -1;
  me.worker = options.colocated ? rank : (rank >= S ? rank - S : -1);

  uint64_t token = rank == 0 ? draw_token() : 0;
  world.broadcast_bytes(std::as_writable_bytes(std::span<uint64_t>(&token, 1)), 0);
  me.token = token;

  // Every rank's host, then this rank's bind and advertised address. A bad
  // ps.interface is a ConfigError on the ranks it concerns, and through the
  // endpoint exchange below a CommError naming that rank on every other.
  const HostInfo here = this_host();
  const std::vector<HostInfo> hosts = exchange_hosts(world, here);
  std::string address_error;
  try {
    me.address = choose_bind_address(options.interface, here, hosts);
  } catch (const ConfigError& e) {
    address_error = e.what();
  }

  // ps.security curve: the workers' key pairs, and their public halves for
  // the shards' allow-lists.
  CurveKeys worker_keys;
  std::set<std::string> clients;
  const bool curve = options.server.security == Security::kCurve;
  if (curve) {
    if (me.worker >= 0) worker_keys = make_curve_keys();
    for (const auto& key : world.allgather_bytes(bytes_of(worker_keys.public_key)))
      if (!key.empty()) clients.emplace(reinterpret_cast<const char*>(key.data()), key.size());
  }

  const auto plan = plan_shards(static_cast<int64_t>(initial.size()), S,
                                options.align_shards ? infos : std::span<const ParamInfo>{});
  const int64_t chunk_floats =
      plan_chunk_floats(options.chunk_bytes, options.shard_chunks, plan, me.workers);
  const auto endpoints = exchange_endpoints(
      world,
      [&]() -> std::string {
        if (me.shard < 0) return "";
        if (!address_error.empty()) throw ConfigError(address_error);
        ServerOptions so = options.server;
        so.shard = me.shard;
        so.range = plan[me.shard];
        so.chunk_floats = chunk_floats;
        so.workers = me.workers;
        so.token = token;
        so.bind = me.address.bind;
        so.advertise = me.address.advertise;
        so.nic = world.network();
        so.clients = clients;
        if (options.resume_shard) so.resume = options.resume_shard(me.shard);
        me.server =
            std::make_unique<Server>(so, initial.subspan(static_cast<size_t>(so.range.begin),
                                                         static_cast<size_t>(so.range.size())));
        // Under curve: "endpoint key" (a Z85 key has no spaces).
        return me.server->endpoint() + (curve ? " " + me.server->public_key() : "");
      },
      "parameter server on '" + options.interface + "'");
  for (int r = 0; r < S; ++r) {
    const size_t space = endpoints[r].find(' ');
    me.shards.push_back({r, endpoints[r].substr(0, space), plan[r], hosts[r].hostname,
                         space == std::string::npos ? "" : endpoints[r].substr(space + 1)});
  }
  PSAR_LOG(kInfo, "ps",
           "rank " << rank << ": " << (me.shard >= 0 ? "shard " : "")
                   << (me.shard >= 0 ? std::to_string(me.shard) + " " : "")
                   << (me.worker >= 0 ? "worker " + std::to_string(me.worker) : "") << " of " << S
                   << " shard(s), " << me.workers << " worker(s)");

  if (!options.colocated) {
    auto split = world.split(me.worker >= 0 ? 1 : 0, rank);
    if (me.worker >= 0) me.worker_comm = std::move(split);
  } else {
    me.server_thread = std::make_unique<ServerThread>(std::move(me.server));
  }
  if (me.worker >= 0) {
    ClientOptions co = options.client;
    co.worker = me.worker;
    co.token = token;
    co.shards = me.shards;
    co.chunk_floats = chunk_floats;
    co.nic = world.network();
    co.host = here.hostname;
    co.curve = worker_keys;
    me.client = std::make_unique<Client>(co);
  }
  return me;
}

}  // namespace psar::ps
