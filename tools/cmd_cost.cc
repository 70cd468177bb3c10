// psar cost — the registered cost forms of the allreduce algorithms, and the
// parameter server's, evaluated.
//
//   psar cost --p 2,4,8 --n 4K,16M [--alpha 5us] [--beta 1e-10] [--gamma 2e-11]
//             [--algos ring,tree] [--format csv|json] [--set sync.segment_bytes=512K]
//             [--servers 1,4 [--workers-per-nic K] [--set ps.chunk_bytes=256K]]
//
// For every algorithm (default: every one in the registry, device ones
// included), every p (ranks) and every n (bytes of float32, so a multiple of
// 4): the coefficients of α, β and γ in the algorithm's α-β-γ form
// (docs/algorithms.md), the predicted time alpha_coef·α + beta_coef·β +
// gamma_coef·γ, and the exact payload bytes sent in all and by the busiest
// rank, read off the algorithm's program with n/element-size elements of
// sync.dtype (`--set sync.dtype=bf16`), as the Comm counters count them
// (`psar bench allreduce --volume-csv` measures the same columns). Algorithms whose bytes bypass the Comm counters
// (mpi, nccl) leave the byte columns empty (null in JSON). α is a duration
// (a number of seconds, or 5us, 2ms, ...); β and γ are seconds per byte.
// With --servers, rows of algo `ps` follow, one per S: p workers pushing
// and pulling n bytes through S dedicated shards (ps/cost.h, chunks from
// ps.chunk_bytes and ps.shard_chunks as a job would cut them; K workers per
// NIC with --workers-per-nic), in the column `servers` (empty for an
// allreduce); --algos names allreduce algorithms only, and `--algos none`
// leaves them out.
// Nothing runs: no MPI, no communication. This is where the experiment
// harness (experiments/psar_exp/costs.py) takes its formulas from.

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "allreduce/allreducer.h"
#include "core/config.h"
#include "core/csv.h"
#include "core/errors.h"
#include "core/units.h"
#include "ps/cost.h"
#include "sync/allreduce_sync.h"
#include "tools/cli.h"
#include "trainer/schema.h"

namespace psar {

namespace {

constexpr const char* kCommand = "psar cost";
constexpr const char* kUsage =
    "usage: psar cost --p P[,P...] --n BYTES[,BYTES...] [--alpha SECONDS] [--beta S_PER_BYTE] "
    "[--gamma S_PER_BYTE] [--algos a,b,...|none] [--format csv|json] [--set sync.segment_bytes=512K] "
    "[--servers S[,S...] [--workers-per-nic K] [--set ps.chunk_bytes=256K]]";

struct CostOptions {
  std::vector<std::string> algos;  // empty: every registered algorithm
  std::vector<int> ranks;
  std::vector<int64_t> sizes;
  std::vector<int> servers;  // PS rows, one per S
  int workers_per_nic = 1;
  bool no_algos = false;  // --algos none
  double alpha = 0, beta = 0, gamma = 0;
  bool json = false;
  bool help = false;
};

ConfigError flag_error(const std::string& flag, const std::string& what) {
  return ConfigError(std::string(kCommand) + ": " + flag + ": " + what + "\n" + kUsage);
}

// A finite number ≥ 0, the whole text.
double parse_rate(const std::string& flag, const std::string& text) {
  size_t used = 0;
  double v = NAN;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !std::isfinite(v))
    throw flag_error(flag, "needs a number (seconds per byte, e.g. 1e-10), got '" + text + "'");
  if (v < 0) throw flag_error(flag, "must be at least 0, got " + text);
  return v;
}

double parse_alpha(const std::string& flag, const std::string& text) {
  try {
    const double v = parse_duration(text, /*bare_seconds=*/true);
    if (!std::isfinite(v)) throw ConfigError("'" + text + "' is not finite");
    return v;
  } catch (const ConfigError& e) {
    throw flag_error(flag, e.what());
  }
}

std::vector<int> parse_ranks(const std::string& flag, const std::string& text) {
  std::vector<int> out;
  for (const auto& item : split_list_arg(text))
    out.push_back(static_cast<int>(parse_int_arg(kCommand, flag, item, 1)));
  if (out.empty()) throw flag_error(flag, "names no world size");
  return out;
}

std::vector<int64_t> parse_sizes(const std::string& flag, const std::string& text) {
  std::vector<int64_t> out;
  for (const auto& item : split_list_arg(text)) {
    int64_t bytes = 0;
    try {
      bytes = parse_bytes(item);
    } catch (const ConfigError& e) {
      throw flag_error(flag, e.what());
    }
    if (bytes % 4 != 0)
      throw flag_error(flag, "'" + item + "' is not a whole number of float32 elements (" +
                                 std::to_string(bytes) + " bytes)");
    out.push_back(bytes);
  }
  if (out.empty()) throw flag_error(flag, "names no size");
  return out;
}

CostOptions parse(const std::vector<std::string>& args) {
  CostOptions o;
  for (const auto& [flag, value] : split_flags(kCommand, args, kUsage)) {
    if (flag == "--help") {
      o.help = true;
      return o;
    }
    if (flag == "--algos") o.algos = split_list_arg(value);
    else if (flag == "--p") o.ranks = parse_ranks(flag, value);
    else if (flag == "--servers") o.servers = parse_ranks(flag, value);
    else if (flag == "--workers-per-nic")
      o.workers_per_nic = static_cast<int>(parse_int_arg(kCommand, flag, value, 1));
    else if (flag == "--n") o.sizes = parse_sizes(flag, value);
    else if (flag == "--alpha") o.alpha = parse_alpha(flag, value);
    else if (flag == "--beta") o.beta = parse_rate(flag, value);
    else if (flag == "--gamma") o.gamma = parse_rate(flag, value);
    else if (flag == "--format") {
      if (value != "csv" && value != "json") throw flag_error(flag, "csv or json, got '" + value + "'");
      o.json = value == "json";
    } else {
      throw ConfigError(std::string(kCommand) + ": unknown option '" + flag + "'\n" + kUsage);
    }
  }
  if (o.ranks.empty())
    throw ConfigError(std::string(kCommand) + ": missing --p (world sizes, e.g. --p 2,4,8)\n" + kUsage);
  if (o.sizes.empty())
    throw ConfigError(std::string(kCommand) + ": missing --n (bytes, e.g. --n 4K,16M)\n" + kUsage);
  if (o.algos.size() == 1 && o.algos[0] == "none") {
    o.algos.clear();
    o.no_algos = true;
  }
  if (o.workers_per_nic != 1 && o.servers.empty())
    throw flag_error("--workers-per-nic", "applies to the parameter server's rows: add --servers");
  for (int p : o.ranks)
    if (!o.servers.empty() && o.workers_per_nic > p)
      throw flag_error("--workers-per-nic", std::to_string(o.workers_per_nic) +
                                                " workers per NIC but --p names " +
                                                std::to_string(p) + " workers");
  for (const auto& name : o.algos) {
    try {
      find_allreducer(name);
    } catch (const ConfigError& e) {
      throw flag_error("--algos", e.what());
    }
  }
  return o;
}

struct Row {
  std::string algo;
  int ranks;
  int servers;  // ps rows; 0 for an allreduce
  int64_t bytes;
  CostTerms terms;
  double time_s;
  bool counted;  // the bytes pass through Comm
  int64_t sent_total, sent_busiest;
};

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

void print_csv(const std::vector<Row>& rows) {
  CsvWriter csv({"algo", "ranks", "size", "count", "alpha_coef", "beta_coef", "gamma_coef",
                 "time_s", "bytes_sent_total", "bytes_sent_max_rank", "servers"});
  for (const auto& r : rows)
    csv.row({r.algo, CsvWriter::num(r.ranks), CsvWriter::num(r.bytes), CsvWriter::num(r.bytes / 4),
             CsvWriter::num(r.terms.alpha), CsvWriter::num(r.terms.beta),
             CsvWriter::num(r.terms.gamma), CsvWriter::num(r.time_s),
             r.counted ? CsvWriter::num(r.sent_total) : "",
             r.counted ? CsvWriter::num(r.sent_busiest) : "",
             r.servers > 0 ? CsvWriter::num(r.servers) : ""});
  std::fputs(csv.text().c_str(), stdout);
}

void print_json(const CostOptions& o, const std::vector<Row>& rows) {
  std::printf("{\"alpha\": %s, \"beta\": %s, \"gamma\": %s, \"rows\": [", CsvWriter::num(o.alpha).c_str(),
              CsvWriter::num(o.beta).c_str(), CsvWriter::num(o.gamma).c_str());
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const std::string total = r.counted ? CsvWriter::num(r.sent_total) : "null";
    const std::string busiest = r.counted ? CsvWriter::num(r.sent_busiest) : "null";
    std::printf("%s\n  {\"algo\": %s, \"ranks\": %d, \"size\": %lld, \"count\": %lld, "
                "\"alpha_coef\": %s, \"beta_coef\": %s, \"gamma_coef\": %s, \"time_s\": %s, "
                "\"bytes_sent_total\": %s, \"bytes_sent_max_rank\": %s, \"servers\": %s}",
                i ? "," : "", json_string(r.algo).c_str(), r.ranks,
                static_cast<long long>(r.bytes), static_cast<long long>(r.bytes / 4),
                CsvWriter::num(r.terms.alpha).c_str(), CsvWriter::num(r.terms.beta).c_str(),
                CsvWriter::num(r.terms.gamma).c_str(), CsvWriter::num(r.time_s).c_str(),
                total.c_str(), busiest.c_str(),
                r.servers > 0 ? std::to_string(r.servers).c_str() : "null");
  }
  std::printf("\n]}\n");
}

}  // namespace

int cmd_cost(CliContext& ctx) {
  const CostOptions o = parse(ctx.args);
  if (o.help) {
    std::printf("%s\n", kUsage);
    return 0;
  }
  const Config config = Config::load_string("{}", config_schema(), ctx.overrides, "--set");
  const AllreduceOptions options = allreduce_options(config);

  std::vector<const AllreducerEntry*> entries;
  if (o.no_algos) {
  } else if (o.algos.empty())
    for (const auto& e : allreducer_registry()) entries.push_back(&e);
  else
    for (const auto& name : o.algos) entries.push_back(&find_allreducer(name));

  std::vector<Row> rows;
  for (const AllreducerEntry* e : entries) {
    PSAR_CHECK(e->cost != nullptr, "allreduce algorithm '", e->name, "' has no cost form");
    for (int p : o.ranks)
      for (int64_t n : o.sizes) {
        const CostTerms t = e->cost(p, n, options);
        // Bytes read off the algorithm's program (none for a library's).
        const bool counted = e->program != nullptr;
        const int64_t count = n / element_size(options.dtype);
        rows.push_back({e->name, p, 0, n, t, t.time(o.alpha, o.beta, o.gamma), counted,
                        counted ? e->sent_bytes_total(p, count, options) : 0,
                        counted ? e->sent_bytes_busiest(p, count, options) : 0});
      }
  }
  for (int s : o.servers)
    for (int p : o.ranks)
      for (int64_t n : o.sizes) {
        const ps::PsCost c = ps::ps_cost(p, s, n, config.get_bytes("ps.chunk_bytes"),
                                         config.get_int("ps.shard_chunks"), o.workers_per_nic);
        const CostTerms t{c.alpha, c.beta, 0.0};
        rows.push_back({"ps", p, s, n, t, t.time(o.alpha, o.beta, o.gamma), true, c.sent_total,
                        c.sent_busiest});
      }
  if (o.json) print_json(o, rows);
  else print_csv(rows);
  return 0;
}

}  // namespace psar
