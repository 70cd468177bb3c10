// psar bench ps — the parameter server's push+pull beside a raw ZeroMQ round
// trip of the same bytes, the transport's own ceiling, in the same run.
//
//   mpirun -np 5 psar bench ps --servers 1,2,4 -b 4K -e 64M -f 2 -n 20 -w 5 [-r ROUNDS]
//       [--csv FILE] [--set ps.interface=auto] [--set optimizer.momentum=0.9]
//
// For every S of --servers that leaves a worker among the W ranks, ranks
// 0..S-1 serve and the N = W - S others work. For every size b, b·f, … ≤ e
// bytes (M = size/4 floats): a fresh bsp job of S dedicated shards (launch_ps;
// M split evenly, each shard streamed in chunks of at most ps.chunk_bytes,
// as many as ps.shard_chunks chooses (0, the default: for N = 1 about
// sqrt(shard bytes / 64 KiB), for N > 1 one when smaller; ps/sharding.h); plain SGD
// unless --set optimizer.*), and beside it S echo servers (ps/raw_echo.h) on
// the same ranks, sent the same messages.
// Each worker makes w warm-up calls of each, then n timed calls of each in
// rounds; the two modes take turns round by round (who goes first alternates),
// so background load hits both alike. A round's time per call is the maximum
// over workers; the reported time is the median over rounds.
//   ps:      Client::push_pull — push M floats, the shards aggregate the N
//            gradients and step the optimizer, pull M floats into the params.
//   zmq_raw: EchoClient::round_trip — the same messages out and back, nothing
//            else (--set ps.chunk_bytes=64M: one message per shard, unchunked).
// bandwidth = 2·size / time in GB/s (1e9 B/s): the bytes one worker pushes and
// pulls per second; raw/ps (CSV raw_ratio) = raw time / this mode's time, at
// every size (1 = as fast as the transport's ceiling). CSV columns:
// mode,servers,workers,size,time_us,bandwidth,raw_ratio. With --set
// ps.security=curve the PS mode is ps_curve (encrypted and authenticated,
// docs/ps.md) while the echo stays plain: raw/ps is then the plain ceiling
// over the encrypted PS.
// --volume-csv adds one more push_pull per point, counted on its own: payload
// bytes and messages sent by all workers and shards together and by the
// busiest rank (docs/theory.md: N·M pushed, N·M pulled), in the columns of
// `psar bench allreduce --volume-csv` (algo ps, or ps_s<S> for S > 1).
// Only rank 0 prints and writes the CSVs.

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "allreduce/partition.h"
#include "comm/comm.h"
#include "core/csv.h"
#include "core/errors.h"
#include "comm/netem.h"
#include "core/timer.h"
#include "core/units.h"
#include "ps/launch.h"
#include "ps/raw_echo.h"
#include "ps/sharding.h"
#include "tools/cli.h"
#include "sync/ps_sync.h"
#include "trainer/schema.h"

namespace psar {

namespace {

struct BenchOptions {
  std::vector<int64_t> servers = {1, 2, 4};
  int64_t min_bytes = 4096, max_bytes = 64 << 20, factor = 2;
  int iters = 20, warmup = 5, rounds = 0;  // rounds 0: min(iters, 5)
  std::string csv, volume_csv;
};

constexpr const char* kUsage =
    "usage: psar bench ps [--servers 1,2,4] [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] [-n ITERS] "
    "[-w WARMUP] [-r ROUNDS] [--csv FILE] [--volume-csv FILE] [--set ps.KEY=VALUE] "
    "[--set optimizer.KEY=VALUE]";

int64_t parse_int(const std::string& flag, const std::string& text, int64_t min) {
  return parse_int_arg("psar bench ps", flag, text, min);
}

BenchOptions parse(const std::vector<std::string>& args) {
  BenchOptions o;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    if (flag == "-h" || flag == "--help") throw ConfigError(kUsage);
    if (i + 1 >= args.size())
      throw ConfigError("psar bench ps: " + flag + " needs a value\n" + kUsage);
    const std::string& value = args[++i];
    if (flag == "--servers") {
      o.servers.clear();
      size_t start = 0;
      while (start <= value.size()) {
        const size_t comma = std::min(value.find(',', start), value.size());
        o.servers.push_back(parse_int(flag, value.substr(start, comma - start), 1));
        start = comma + 1;
      }
    } else if (flag == "-b")
      o.min_bytes = parse_bytes(value);
    else if (flag == "-e")
      o.max_bytes = parse_bytes(value);
    else if (flag == "-f")
      o.factor = parse_int(flag, value, 2);
    else if (flag == "-n")
      o.iters = static_cast<int>(parse_int(flag, value, 1));
    else if (flag == "-w")
      o.warmup = static_cast<int>(parse_int(flag, value, 0));
    else if (flag == "-r")
      o.rounds = static_cast<int>(parse_int(flag, value, 1));
    else if (flag == "--csv")
      o.csv = value;
    else if (flag == "--volume-csv")
      o.volume_csv = value;
    else
      throw ConfigError("psar bench ps: unknown option '" + flag + "'\n" + kUsage);
  }
  if (o.min_bytes < 4 || o.min_bytes % 4 != 0)
    throw ConfigError("psar bench ps: -b must be a positive multiple of 4 bytes (floats), got " +
                      std::to_string(o.min_bytes));
  if (o.max_bytes < o.min_bytes) throw ConfigError("psar bench ps: -e is smaller than -b");
  if (o.rounds == 0) o.rounds = std::min(o.iters, 5);
  if (o.rounds > o.iters) throw ConfigError("psar bench ps: -r exceeds -n");
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

struct Timing {
  double ps_s = 0, raw_s = 0;
};

// Payload bytes and messages of one push_pull (docs/theory.md): every
// worker pushes M and pulls M, the shards take in N·M and send N·M.
struct Volume {
  double sent_total = 0, sent_max_rank = 0, messages_total = 0;
};

// One (S, size) point: every rank of `world` takes part; worker 0 ends up
// with the medians and passes them to everyone.
Timing measure(Comm& world, const BenchOptions& o, const ps::PsOptions& po, int64_t count,
               Volume* volume) {
  const std::vector<float> initial(static_cast<size_t>(count), 0.0f);
  ps::PsRank me = ps::launch_ps(world, po, initial);
  const int S = po.servers;
  std::unique_ptr<ps::EchoServer> echo;
  const auto echo_endpoints = ps::exchange_endpoints(
      world,
      [&]() -> std::string {
        if (!me.server) return "";
        echo = std::make_unique<ps::EchoServer>(me.address.bind, me.workers, po.server.timeout_s,
                                                me.address.advertise);
        return echo->endpoint();
      },
      "echo server");
  Timing t;
  // Every worker makes the same number of push_pulls: warm-up, timed, and
  // with --volume-csv one more, counted on its own.
  const int64_t calls = o.warmup + o.iters + (volume ? 1 : 0);
  double sent = 0, messages = 0;  // this rank's share of one push_pull
  if (me.server) {
    ps::ServerThread shard(std::move(me.server));
    echo->run();
    shard.join();
    // Besides the push_pulls, the shard acknowledged every worker's goodbye.
    const ps::PsCounters c = shard.server().counters();
    const int64_t replies = c.messages_out - me.workers;
    PSAR_CHECK(c.payload_bytes_out % calls == 0 && replies % calls == 0,
               "bench ps: a shard's counters (", c.payload_bytes_out, " B, ", replies,
               " replies) do not divide into ", calls, " equal push_pulls");
    sent = static_cast<double>(c.payload_bytes_out / calls);
    messages = static_cast<double>(replies / calls);
  } else {
    Comm& workers = *me.worker_comm;
    std::vector<std::string> endpoints(echo_endpoints.begin(), echo_endpoints.begin() + S);
    std::vector<ps::ShardLayout> layouts;
    std::vector<ps::KeyRange> plan;
    for (const auto& a : me.shards) plan.push_back(a.range);
    const int64_t chunk_floats =
        ps::plan_chunk_floats(po.chunk_bytes, po.shard_chunks, plan, me.workers);
    for (const auto& a : me.shards) layouts.push_back({a.shard, a.range, chunk_floats});
    ps::EchoClient raw(endpoints, layouts, po.client.timeout_s);
    const std::vector<float> grads(static_cast<size_t>(count), 1e-3f);
    std::vector<float> params(static_cast<size_t>(count));
    auto call = [&](int mode) {
      if (mode == 0)
        me.client->push_pull(grads, params);
      else
        raw.round_trip(grads);
    };
    for (int w = 0; w < o.warmup; ++w) call(0), call(1);
    std::vector<double> times[2];
    const Partition per_round{o.iters, o.rounds};
    for (int r = 0; r < o.rounds; ++r)
      for (int k = 0; k < 2; ++k) {
        const int mode = (k + r) % 2;
        const int64_t iters = per_round.size(r);
        workers.barrier();
        const double start = now_seconds();
        for (int64_t i = 0; i < iters; ++i) call(mode);
        times[mode].push_back(workers.allreduce_max((now_seconds() - start) / iters));
      }
    if (volume) {
      const ps::PsCounters before = me.client->counters();
      call(0);
      const ps::PsCounters after = me.client->counters();
      sent = static_cast<double>(after.payload_bytes_out - before.payload_bytes_out);
      messages = static_cast<double>(after.messages_out - before.messages_out);
    }
    me.client->close();
    t = {median(times[0]), median(times[1])};
  }
  if (volume)
    *volume = {world.allreduce_sum(sent), world.allreduce_max(sent),
               world.allreduce_sum(messages)};
  world.broadcast_bytes(std::as_writable_bytes(std::span<Timing>(&t, 1)), S);
  return t;
}

}  // namespace

int cmd_bench_ps(CliContext& ctx) {
  const BenchOptions o = parse(ctx.args);
  // The benchmark's optimizer is plain SGD unless --set says otherwise.
  const Config config = Config::load_string("optimizer: {momentum: 0.0, lr: 0.001}",
                                            config_schema(), ctx.overrides, "--set");
  const OptimizerOptions opt = optimizer_options(config);
  ps::PsOptions po = ps_options(config, opt);
  po.colocated = false;
  po.server.consistency = ps::Consistency::kBsp;

  Comm& world = ctx.world();
  apply_network_model(world, config);  // net.* (off unless net.bandwidth is set)
  world.set_timeout(po.server.timeout_s);
  const int W = world.size();
  const bool root = world.rank() == 0;
  if (root) {
    std::printf(
        "# psar bench ps: %d ranks; bsp push_pull (optimizer %s, lr %g, momentum %g, "
        "ps.security %s) "
        "vs raw ZeroMQ echo of the same messages (chunks of at most %s, none below %s, "
        "%s per shard)\n",
        W, opt.type.c_str(), opt.lr, opt.momentum, ps::to_string(po.server.security),
        format_bytes(po.chunk_bytes).c_str(),
        format_bytes(ps::kMinChunkBytes).c_str(),
        po.shard_chunks == ps::kAutoShardChunks
            ? "automatic: one worker about sqrt(shard bytes / 64 KiB), more 1 when smaller"
            : (std::to_string(po.shard_chunks) + " when smaller").c_str());
    std::printf(
        "# iters %d in %d rounds, warmup %d; time = median over rounds of the max over "
        "workers; bw = 2*size/time\n#\n",
        o.iters, o.rounds, o.warmup);
    std::printf("# %7s %7s %12s %12s %6s %12s %10s %12s %10s %8s\n", "servers", "workers",
                "size", "count", "chunks", "ps(us)", "ps(GB/s)", "raw(us)", "raw(GB/s)",
                "raw/ps");
  }
  CsvWriter csv({"mode", "servers", "workers", "size", "time_us", "bandwidth", "raw_ratio"});
  // The columns of `psar bench allreduce --volume-csv`, so that one report
  // reads both; `ranks` counts the workers N (the S shards come on top).
  CsvWriter volume_csv({"algo", "ranks", "size", "count", "bytes_sent_total",
                        "bytes_sent_max_rank", "messages_sent_total"});
  const char* ps_mode = po.server.security == ps::Security::kCurve ? "ps_curve" : "ps";
  int measured = 0;
  for (const int64_t S : o.servers) {
    if (S >= W) {
      if (root)
        std::printf("# skipping %lld server(s): needs at least %lld ranks\n",
                    static_cast<long long>(S), static_cast<long long>(S + 1));
      continue;
    }
    po.servers = static_cast<int>(S);
    const int N = W - static_cast<int>(S);
    for (int64_t size = o.min_bytes; size <= o.max_bytes; size *= o.factor) {
      Volume v;
      const Timing t = measure(world, o, po, size / 4, o.volume_csv.empty() ? nullptr : &v);
      if (root && !o.volume_csv.empty())
        volume_csv.row({S == 1 ? "ps" : "ps_s" + std::to_string(S), CsvWriter::num(N),
                        CsvWriter::num(size), CsvWriter::num(size / 4),
                        CsvWriter::num(static_cast<int64_t>(v.sent_total)),
                        CsvWriter::num(static_cast<int64_t>(v.sent_max_rank)),
                        CsvWriter::num(static_cast<int64_t>(v.messages_total))});
      const double ps_bw = 2.0 * size / t.ps_s / 1e9, raw_bw = 2.0 * size / t.raw_s / 1e9;
      if (root) {
        // Chunks of the largest shard, as launch_ps plans them.
        const auto plan = ps::plan_shards(size / 4, static_cast<int>(S));
        const ps::ShardLayout largest{0,
                                      *std::max_element(plan.begin(), plan.end(),
                                                        [](const auto& a, const auto& b) {
                                                          return a.size() < b.size();
                                                        }),
                                      ps::plan_chunk_floats(po.chunk_bytes, po.shard_chunks,
                                                            plan, N)};
        std::printf("  %7lld %7d %12lld %12lld %6d %12.1f %10.3f %12.1f %10.3f %8.3f\n",
                    static_cast<long long>(S), N, static_cast<long long>(size),
                    static_cast<long long>(size / 4), largest.chunks(), t.ps_s * 1e6, ps_bw,
                    t.raw_s * 1e6, raw_bw, t.raw_s / t.ps_s);
        std::fflush(stdout);
        for (const auto& [mode, time, bw] :
             {std::tuple{ps_mode, t.ps_s, ps_bw}, std::tuple{"zmq_raw", t.raw_s, raw_bw}})
          csv.row({mode, CsvWriter::num(S), CsvWriter::num(N), CsvWriter::num(size),
                   CsvWriter::num(time * 1e6), CsvWriter::num(bw),
                   CsvWriter::num(t.raw_s / time)});
      }
      ++measured;
      if (size > o.max_bytes / o.factor) break;  // the next size would pass -e
    }
  }
  if (measured == 0)
    throw ConfigError("psar bench ps: no --servers value leaves a worker among " +
                      std::to_string(W) + " ranks (run more ranks)");
  if (root && !o.csv.empty()) csv.write(o.csv);
  if (root && !o.volume_csv.empty()) volume_csv.write(o.volume_csv);
  return 0;
}

}  // namespace psar
