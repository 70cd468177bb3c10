#include "trainer/hetero.h"

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <cmath>
#include <cstdio>

#include "comm/netem.h"
#include "core/config.h"
#include "core/errors.h"
#include "core/timer.h"
#include "core/trace.h"

namespace psar {

namespace {

constexpr struct {
  const char* name;
  DelayDistribution distribution;
} kDistributions[] = {{"none", DelayDistribution::kNone},
                      {"fixed", DelayDistribution::kFixed},
                      {"exponential", DelayDistribution::kExponential},
                      {"pareto", DelayDistribution::kPareto}};

DelayDistribution parse_distribution(const std::string& name) {
  for (const auto& d : kDistributions)
    if (name == d.name) return d.distribution;
  throw ConfigError("hetero.delay.distribution: unknown '" + name +
                    "' (expected none, fixed, exponential or pareto)");
}

std::vector<int> ranks_in_world(const Config& config, const std::string& key, int world_size) {
  std::vector<int> ranks;
  for (const int64_t r : config.get_int_list(key)) {
    if (r < 0 || r >= world_size)
      throw ConfigError(key + ": rank " + std::to_string(r) + " is outside the world [0, " +
                        std::to_string(world_size) + ")");
    ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

bool contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

}  // namespace

std::vector<std::string> delay_distribution_names() {
  std::vector<std::string> names;
  for (const auto& d : kDistributions) names.emplace_back(d.name);
  return names;
}

HeteroPlan HeteroPlan::from_config(const Config& config, int world_size) {
  HeteroPlan p;
  p.seed = static_cast<uint64_t>(config.get_int("hetero.seed"));
  p.slow_ranks = ranks_in_world(config, "hetero.slow_ranks", world_size);
  p.slow_factor = config.get_float("hetero.slow_factor");
  if (!(p.slow_factor >= 1))
    throw ConfigError(
        "hetero.slow_factor: must be >= 1 (a slow rank computes slow_factor times "
        "as long), got " +
        std::to_string(p.slow_factor));
  p.distribution = parse_distribution(config.get_string("hetero.delay.distribution"));
  p.delay_mean = config.get_duration("hetero.delay.mean");
  if (p.delay_mean < 0)
    throw ConfigError("hetero.delay.mean: must be >= 0, got " + std::to_string(p.delay_mean));
  if (p.distribution == DelayDistribution::kNone && p.delay_mean > 0)
    throw ConfigError(
        "hetero.delay.mean is set but hetero.delay.distribution is none (choose "
        "fixed, exponential or pareto)");
  p.pareto_shape = config.get_float("hetero.delay.pareto_shape");
  if (p.distribution == DelayDistribution::kPareto && !(p.pareto_shape > 1))
    throw ConfigError(
        "hetero.delay.pareto_shape: must be > 1 (the mean is infinite otherwise), "
        "got " +
        std::to_string(p.pareto_shape));
  p.delay_ranks = ranks_in_world(config, "hetero.delay.ranks", world_size);
  p.kill_rank = static_cast<int>(config.get_int("hetero.kill_rank"));
  if (p.kill_rank < -1 || p.kill_rank >= world_size)
    throw ConfigError("hetero.kill_rank: rank " + std::to_string(p.kill_rank) +
                      " is outside the world [0, " + std::to_string(world_size) + ") (-1 = none)");
  p.kill_step = config.get_int("hetero.kill_step");
  if (p.kill_step < 0)
    throw ConfigError("hetero.kill_step: must be >= 0, got " + std::to_string(p.kill_step));
  return p;
}

bool HeteroPlan::active() const {
  return (slow_factor > 1 && !slow_ranks.empty()) ||
         (distribution != DelayDistribution::kNone && delay_mean > 0);
}

double HeteroPlan::delay(int rank, int64_t step) const {
  if (distribution == DelayDistribution::kNone) return 0;
  if (!delay_ranks.empty() && !contains(delay_ranks, rank)) return 0;
  const auto block =
      Philox::block(seed, kDelayStream + static_cast<uint64_t>(rank), static_cast<uint64_t>(step));
  const double u = (static_cast<double>(block[0]) + 0.5) * 0x1.0p-32;  // (0, 1)
  switch (distribution) {
    case DelayDistribution::kNone:
      return 0;
    case DelayDistribution::kFixed:
      return delay_mean;
    case DelayDistribution::kExponential:
      return -delay_mean * std::log(u);
    case DelayDistribution::kPareto:
      return delay_mean * (pareto_shape - 1) / pareto_shape * std::pow(u, -1 / pareto_shape);
  }
  return 0;
}

double HeteroPlan::injected(int rank, int64_t step, double compute_s) const {
  const double slow = contains(slow_ranks, rank) ? (slow_factor - 1) * compute_s : 0;
  return slow + delay(rank, step);
}

void kill_now(int rank, int64_t step) {
  std::fprintf(stderr, "psar: rank %d: killing itself at the start of step %lld (hetero.kill_rank)\n",
               rank, static_cast<long long>(step));
  std::fflush(stdout);
  std::fflush(stderr);
  std::raise(SIGKILL);
  std::abort();  // not reached
}

double inject_delay(const HeteroPlan& plan, int rank, int64_t step, double compute_s,
                    Tracer& tracer) {
  const double seconds = plan.injected(rank, step, compute_s);
  if (seconds <= 0) return 0;
  const double start = now_seconds();
  wait_until(start + seconds);
  if (tracer.enabled()) {
    char args[96];
    std::snprintf(args, sizeof args, "{\"step\":%lld,\"injected_s\":%.17g}",
                  static_cast<long long>(step + 1), seconds);
    tracer.span("injected", "hetero", start, start + seconds, /*tid=*/0, args);
  }
  return seconds;
}

}  // namespace psar
