// psar bench allreduce — the allreduce sweep, reported like nccl-tests.
//
//   mpirun -np 4 psar bench allreduce [--algos ring,tree,...]
//       -b 4K -e 64M -f 2 -n 20 -w 5 -c 1 --csv FILE [--volume-csv FILE] [-r ROUNDS]
//       [--set sync.segment_bytes=512K] [--set sync.dtype=bf16] [--set sync.timeout=60s]
//
// Without --algos: every host algorithm of the registry, in its order
// (bench_allreduce_default_algos, allreduce/allreducer.h).
//
// For every size b, b·f, b·f², … ≤ e (bytes of the caller's float32 vector,
// in place; on the wire in sync.dtype: --set sync.dtype=bf16 halves the
// bytes every algorithm with a program moves) and
// every algorithm: an optional checked call (-c 1: a known pattern summed, the
// result compared elementwise against a double-precision reference; #wrong
// counts elements off by more than 1e-6 of Σ|x|, summed over ranks), w warm-up
// calls, then n timed calls. The timed calls are split into rounds and the
// algorithms take turns round by round (in a rotating order), so that a burst
// of background load hits every algorithm alike and the ratios stay honest.
// A round's time per call is the maximum over ranks; the reported time is the
// median over rounds. algbw = size / time; busbw = algbw · 2(n-1)/n, the
// nccl-tests convention that makes ring-optimal bandwidth independent of n.
// Only rank 0 prints and writes files. Timed calls run on zeros, so repeated
// in-place sums never overflow (float addition costs the same for any normal
// value).
//
// --tuning FILE adds `auto` (allreduce/tuned.h) beside the named algorithms:
// per size the algorithm FILE predicts fastest. `psar tune ... --out FILE`
// is this sweep over every host algorithm, writing the measured times as a
// tuning table (rows of other world sizes already in FILE are kept).
//
// --volume-csv adds one more call per (size, algorithm) with the Comm byte
// counters reset: bytes and messages sent, summed over ranks and the busiest
// rank, to set beside each algorithm's exact count (`psar cost`,
// docs/algorithms.md). The `mpi` backend's traffic goes through MPI's own
// collective, which the counters cannot see: its rows read 0.
//
// --zero 1,2,3 replaces each algorithm by the collectives one step of that
// ZeRO stage runs (docs/zero.md) with the algorithm's reduce-scatter and
// all-gather pair (allreduce/sharded.h), rows named "<algo> zero<k>", over
// Partition{count, N} pieces; the vector is cut into layers of
// sync.bucket_bytes, each split at the owners' boundaries as the trainer's
// buckets are. Stage 1: one reduce-scatter and one all-gather of the whole
// vector. Stage 2: the reduce-scatters layer by layer (last first, as the
// backward makes them), then the whole all-gather. Stage 3: every layer
// all-gathered for the forward and again for the backward, and
// reduce-scattered after it; the parameters stay sharded, so its check
// compares the rank's own piece only.

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "allreduce/allreducer.h"
#include "allreduce/tuned.h"
#include "allreduce/partition.h"
#include "allreduce/sharded.h"
#include "comm/comm.h"
#include "core/csv.h"
#include "core/errors.h"
#include "comm/netem.h"
#include "core/timer.h"
#include "core/units.h"
#include "sync/allreduce_sync.h"
#include "tools/cli.h"
#include "trainer/schema.h"

namespace psar {

namespace {

using psar::detail::concat;

struct BenchOptions {
  std::vector<std::string> algos = bench_allreduce_default_algos();
  int64_t min_bytes = 4096, max_bytes = 64 << 20;
  int64_t factor = 2;
  int iters = 20, warmup = 5, rounds = 0;  // rounds 0: min(iters, 5)
  bool check = true;
  std::string csv, volume_csv;
  std::string tuning;      // --tuning: add `auto` from this table
  std::string tuning_out;  // psar tune --out: write the measured times as a table
  std::vector<int> zero;   // --zero: the ZeRO stages to run each algorithm as
  bool help = false;
};

constexpr const char* kUsage =
    "usage: psar bench allreduce [--algos a,b,...] [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] "
    "[-n ITERS] [-w WARMUP] [-r ROUNDS] [-c 0|1] [--csv FILE] [--volume-csv FILE] "
    "[--tuning TABLE] [--zero 1,2,3] [--set sync.segment_bytes=512K] [--set sync.bucket_bytes=1M]";
constexpr const char* kTuneUsage =
    "usage: psar tune --out TABLE [--algos a,b,...] [-b MINBYTES] [-e MAXBYTES] [-f FACTOR] "
    "[-n ITERS] [-w WARMUP] [-r ROUNDS] [--set net.bandwidth=...]";

int64_t parse_int(const std::string& flag, const std::string& text, int64_t min) {
  return parse_int_arg("psar bench allreduce", flag, text, min);
}

int64_t parse_size(const std::string& flag, const std::string& text) {
  try {
    return parse_bytes(text);
  } catch (const ConfigError& e) {
    throw ConfigError("psar bench allreduce: " + flag + ": " + e.what());
  }
}

BenchOptions parse(const std::vector<std::string>& args) {
  BenchOptions o;
  for (const auto& [flag, value] : split_flags("psar bench allreduce", args, kUsage)) {
    if (flag == "--help") {
      o.help = true;
      return o;
    }
    if (flag == "--algos") o.algos = split_list_arg(value);
    else if (flag == "-b" || flag == "--minbytes") o.min_bytes = parse_size(flag, value);
    else if (flag == "-e" || flag == "--maxbytes") o.max_bytes = parse_size(flag, value);
    else if (flag == "-f" || flag == "--stepfactor") o.factor = parse_int(flag, value, 2);
    else if (flag == "-n" || flag == "--iters") o.iters = static_cast<int>(parse_int(flag, value, 1));
    else if (flag == "-w" || flag == "--warmup_iters") o.warmup = static_cast<int>(parse_int(flag, value, 0));
    else if (flag == "-r" || flag == "--rounds") o.rounds = static_cast<int>(parse_int(flag, value, 1));
    else if (flag == "-c" || flag == "--check") o.check = parse_int(flag, value, 0) != 0;
    else if (flag == "--csv") o.csv = value;
    else if (flag == "--volume-csv") o.volume_csv = value;
    else if (flag == "--tuning") o.tuning = value;
    else if (flag == "--zero")
      for (const auto& stage : split_list_arg(value))
        o.zero.push_back(static_cast<int>(parse_int(flag, stage, 1)));
    else if (flag == "--out") o.tuning_out = value;  // psar tune only (checked there)
    else throw ConfigError("psar bench allreduce: unknown option '" + flag + "'\n" + kUsage);
  }
  if (o.min_bytes < 4)
    throw ConfigError("psar bench allreduce: -b must be at least 4 bytes (one float), got " +
                      std::to_string(o.min_bytes));
  if (o.max_bytes < o.min_bytes)
    throw ConfigError("psar bench allreduce: -e (" + std::to_string(o.max_bytes) +
                      " bytes) is smaller than -b (" + std::to_string(o.min_bytes) + " bytes)");
  if (o.algos.empty()) throw ConfigError("psar bench allreduce: --algos names no algorithm");
  for (size_t a = 0; a < o.algos.size(); ++a)
    for (size_t b = 0; b < a; ++b)
      if (o.algos[a] == o.algos[b])
        throw ConfigError("psar bench allreduce: algorithm '" + o.algos[a] + "' listed twice");
  for (int stage : o.zero)
    if (stage > 3)
      throw ConfigError("psar bench allreduce: --zero takes stages 1, 2 and 3, got " +
                        std::to_string(stage));
  if (o.rounds == 0) o.rounds = std::min(o.iters, 5);
  if (o.rounds > o.iters)
    throw ConfigError("psar bench allreduce: -r (" + std::to_string(o.rounds) +
                      ") exceeds -n (" + std::to_string(o.iters) + ")");
  return o;
}

// The checked pattern: small multiples of 1/8, so every partial sum is exact
// in float and the reference is exact whatever the order of addition.
float pattern(int rank, int64_t i) {
  return static_cast<float>(((i * 7 + rank * 13) % 31) - 15) * 0.125f;
}

// result: elements [first, first + result.size()) of the summed vector.
int64_t count_wrong(std::span<const float> result, int64_t first, int ranks) {
  int64_t wrong = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(result.size()); ++i) {
    double sum = 0, magnitude = 0;
    for (int r = 0; r < ranks; ++r) {
      sum += pattern(r, first + i);
      magnitude += std::fabs(pattern(r, first + i));
    }
    wrong += std::fabs(result[i] - sum) > 1e-6 * magnitude;
  }
  return wrong;
}

// Median of the per-round times (each already the maximum over ranks).
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// One step's collectives of ZeRO stage `stage` with `algo`'s pair (the
// usage above). Stages 1 and 2 leave the sum everywhere; stage 3 leaves it
// in the rank's own piece (owned()).
class ZeroStep final : public Allreducer {
 public:
  ZeroStep(const std::string& algo, int stage, const AllreduceOptions& options, int64_t layer_floats)
      : algo_(algo), stage_(stage), layer_(std::max<int64_t>(layer_floats, 1)),
        pair_(make_sharded_collectives(algo, options)) {}
  std::string name() const override { return algo_ + " zero" + std::to_string(stage_); }

  void allreduce(Comm& comm, std::span<float> data) override {
    const int64_t count = static_cast<int64_t>(data.size());
    if (stage_ == 1) {
      pair_->reduce_scatter(comm, data);
      pair_->all_gather(comm, data);
      return;
    }
    const Partition owners{count, comm.size()};
    const int64_t layers = (count + layer_ - 1) / layer_;
    auto layer = [&](std::span<float> v, int64_t l) {
      const int64_t lo = l * layer_, hi = std::min(count, lo + layer_);
      return std::pair{v.subspan(static_cast<size_t>(lo), static_cast<size_t>(hi - lo)),
                       owners.split_within(lo, hi)};
    };
    if (stage_ == 2) {
      for (int64_t l = layers - 1; l >= 0; --l) {
        auto [grads, split] = layer(data, l);
        pair_->reduce_scatter(comm, grads, split);
      }
      pair_->all_gather(comm, data);
      return;
    }
    gathered_.resize(data.size());  // the gathered parameters: their values do not matter here
    for (int64_t l = 0; l < layers; ++l) {
      auto [params, split] = layer(gathered_, l);
      pair_->all_gather(comm, params, split);
    }
    for (int64_t l = layers - 1; l >= 0; --l) {
      auto [params, psplit] = layer(gathered_, l);
      pair_->all_gather(comm, params, psplit);
      auto [grads, gsplit] = layer(data, l);
      pair_->reduce_scatter(comm, grads, gsplit);
    }
  }

  // The elements of `count` whose sum this step leaves on rank `rank`.
  std::pair<int64_t, int64_t> owned(int64_t count, int rank, int ranks) const {
    if (stage_ < 3) return {0, count};
    const Partition owners{count, ranks};
    return {owners.offset(rank), owners.size(rank)};
  }

 private:
  std::string algo_;
  int stage_;
  int64_t layer_;
  std::unique_ptr<ShardedCollectives> pair_;
  std::vector<float> gathered_;
};

struct Row {
  std::string algo;
  int64_t bytes, count;
  double time_us, algbw, busbw;
  int64_t wrong;  // -1: not checked
};

void print_header(const BenchOptions& o, const Comm& comm, const AllreduceOptions& ao) {
  std::printf("# psar bench allreduce: %d ranks (%s transport), float32 sum, in place, %s on "
              "the wire (sync.dtype), %s accumulation\n",
              comm.size(), comm.transport().c_str(), element_type_name(ao.dtype),
              ao.accumulate_in_dtype ? element_type_name(ao.dtype) : "fp32");
  const int64_t segment_bytes = ao.segment_bytes;
  std::printf("# iters %d in %d rounds, warmup %d, segment %s; time = median over rounds of "
              "the max over ranks\n#\n",
              o.iters, o.rounds, o.warmup, format_bytes(segment_bytes).c_str());
  std::printf("# %12s %12s %6s %-17s %11s %11s %11s %8s\n", "size", "count", "type", "algorithm",
              "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong");
}

void print_row(const Row& r, ElementType wire) {
  const std::string wrong = r.wrong < 0 ? "N/A" : std::to_string(r.wrong);
  std::printf("  %12lld %12lld %6s %-17s %11.2f %11.3f %11.3f %8s\n",
              static_cast<long long>(r.bytes), static_cast<long long>(r.count), element_type_name(wire),
              r.algo.c_str(), r.time_us, r.algbw, r.busbw, wrong.c_str());
  std::fflush(stdout);
}


// Rows of `path` (a tuning table) for world sizes other than `ranks`.
std::string kept_tuning_rows(const std::string& path, int ranks) {
  std::ifstream in(path);
  std::string line, kept;
  if (!in) return kept;
  std::getline(in, line);
  while (std::getline(in, line))
    if (!line.empty() && line.rfind(std::to_string(ranks) + ",", 0) != 0) kept += line + "\n";
  return kept;
}

int run_bench(CliContext& ctx, BenchOptions o) {
  const Config config = Config::load_string("{}", config_schema(), ctx.overrides, "--set");
  const AllreduceOptions ao = allreduce_options(config);
  std::vector<std::unique_ptr<Allreducer>> algos;
  std::vector<std::string> names;
  Comm& comm = ctx.world();
  if (o.zero.empty()) {
    for (const auto& name : o.algos) algos.push_back(make_allreducer(name, ao));
  } else {
    if (!o.tuning.empty() || !o.tuning_out.empty())
      throw ConfigError("psar bench allreduce: --zero runs the stages' collectives; it takes no tuning table");
    const int64_t layer = config.get_bytes("sync.bucket_bytes") / 4;
    for (const auto& name : o.algos) {
      check_shards(name, comm.size());
      for (int stage : o.zero) {
        algos.push_back(std::make_unique<ZeroStep>(name, stage, ao, layer));
        names.push_back(algos.back()->name());
      }
    }
    o.algos = names;
  }
  if (!o.tuning.empty()) {
    algos.push_back(std::make_unique<TunedAllreducer>(TuningTable::load(o.tuning), ao));
    o.algos.push_back("auto");
  }
  std::string tuning_rows;

  apply_network_model(comm, config);  // net.* (off unless net.bandwidth is set)
  comm.set_timeout(config.get_duration("sync.timeout"));
  const int n = comm.size();
  const bool root = comm.rank() == 0;
  const double bus_factor = n > 1 ? 2.0 * (n - 1) / n : 0.0;
  if (root) print_header(o, comm, ao);

  CsvWriter csv({"algo", "size", "count", "time_us", "algbw", "busbw", "wrong"});
  CsvWriter volume({"algo", "ranks", "size", "count", "bytes_sent_total", "bytes_sent_max_rank",
                    "messages_sent_total"});
  std::vector<float> data(static_cast<size_t>(o.max_bytes / 4));
  const Partition per_round{o.iters, o.rounds};
  int64_t wrong_total = 0;

  for (int64_t size = o.min_bytes; size <= o.max_bytes; size *= o.factor) {
    const int64_t count = size / 4;
    const std::span<float> buf(data.data(), static_cast<size_t>(count));
    std::vector<int64_t> wrong(algos.size(), -1);
    for (size_t a = 0; a < algos.size(); ++a) {
      if (o.check) {
        for (int64_t i = 0; i < count; ++i) buf[i] = pattern(comm.rank(), i);
        algos[a]->allreduce(comm, buf);
        const auto* zero = dynamic_cast<const ZeroStep*>(algos[a].get());
        const auto [lo, len] = zero ? zero->owned(count, comm.rank(), n)
                                    : std::pair<int64_t, int64_t>{0, count};
        wrong[a] = static_cast<int64_t>(comm.allreduce_sum(
            static_cast<double>(count_wrong(buf.subspan(lo, len), lo, n))));
        wrong_total += wrong[a];
      }
      std::fill(buf.begin(), buf.end(), 0.0f);
      for (int w = 0; w < o.warmup; ++w) algos[a]->allreduce(comm, buf);
    }
    std::vector<std::vector<double>> round_times(algos.size());
    for (int r = 0; r < o.rounds; ++r) {
      const int iters = static_cast<int>(per_round.size(r));
      for (size_t k = 0; k < algos.size(); ++k) {
        const size_t a = (k + static_cast<size_t>(r)) % algos.size();
        comm.barrier();
        const double start = now_seconds();
        for (int it = 0; it < iters; ++it) algos[a]->allreduce(comm, buf);
        round_times[a].push_back(comm.allreduce_max((now_seconds() - start) / iters));
      }
    }
    for (size_t a = 0; a < algos.size(); ++a) {
      const double t = median(round_times[a]);
      const double algbw = static_cast<double>(count * 4) / t / 1e9;
      const Row row{o.algos[a], count * 4, count, t * 1e6, algbw, algbw * bus_factor, wrong[a]};
      if (root && !o.tuning_out.empty())
        tuning_rows += concat(n, ",", row.algo, ",", row.bytes, ",", CsvWriter::num(row.time_us),
                              "\n");
      if (root) {
        print_row(row, ao.dtype);
        csv.row({row.algo, CsvWriter::num(row.bytes), CsvWriter::num(row.count),
                 CsvWriter::num(row.time_us), CsvWriter::num(row.algbw),
                 CsvWriter::num(row.busbw), row.wrong < 0 ? "" : CsvWriter::num(row.wrong)});
      }
      if (!o.volume_csv.empty()) {
        comm.reset_counters();
        algos[a]->allreduce(comm, buf);
        const CommCounters c = comm.counters();
        const double total = comm.allreduce_sum(static_cast<double>(c.bytes_sent));
        const double busiest = comm.allreduce_max(static_cast<double>(c.bytes_sent));
        const double messages = comm.allreduce_sum(static_cast<double>(c.messages_sent));
        if (root)
          volume.row({o.algos[a], CsvWriter::num(n), CsvWriter::num(count * 4),
                      CsvWriter::num(count), CsvWriter::num(static_cast<int64_t>(total)),
                      CsvWriter::num(static_cast<int64_t>(busiest)),
                      CsvWriter::num(static_cast<int64_t>(messages))});
      }
    }
    if (size > o.max_bytes / o.factor) break;  // the next size would overflow or pass -e
  }
  if (root) {
    if (!o.tuning_out.empty())
      write_file_atomic(o.tuning_out, "ranks,algo,bytes,time_us\n" +
                                          kept_tuning_rows(o.tuning_out, n) + tuning_rows);
    if (!o.csv.empty()) csv.write(o.csv);
    if (!o.volume_csv.empty()) volume.write(o.volume_csv);
    if (o.check)
      std::printf("# Out of bounds values : %lld %s\n", static_cast<long long>(wrong_total),
                  wrong_total == 0 ? "OK" : "FAILED");
  }
  return wrong_total == 0 ? 0 : 1;
}

}  // namespace

int cmd_bench_allreduce(CliContext& ctx) {
  const BenchOptions o = parse(ctx.args);
  if (o.help) {
    std::printf("%s\n", kUsage);
    return 0;
  }
  if (!o.tuning_out.empty())
    throw ConfigError("psar bench allreduce: unknown option '--out' (psar tune writes tables)\n" +
                      std::string(kUsage));
  return run_bench(ctx, o);
}

int cmd_tune(CliContext& ctx) {
  BenchOptions o = parse(ctx.args);
  if (o.help) {
    std::printf("%s\n", kTuneUsage);
    return 0;
  }
  if (o.tuning_out.empty()) throw ConfigError("psar tune: --out TABLE is required\n" +
                                              std::string(kTuneUsage));
  if (!o.tuning.empty()) throw ConfigError("psar tune: --tuning reads a table; tune writes one");
  for (const auto& name : o.algos)
    if (find_allreducer(name).device)
      throw ConfigError("psar tune: '" + name + "' runs on a GPU; tune host algorithms");
  return run_bench(ctx, o);
}

}  // namespace psar
