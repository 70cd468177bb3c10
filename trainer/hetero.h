#pragma once
// Injected heterogeneity (config section hetero.*, docs/config.md): slow
// ranks and random per-step delays, drawn from a seed so that a run is
// reproducible, and recorded so that step time = compute + injected +
// communication can be checked row by row (steps.csv `injected_s`, the
// trace's "injected" spans on the rank's main track).
//
// After its compute of step k (0-based), world rank r waits
//   injected(r, k) = (slow_factor − 1) · compute(r, k)     if r ∈ hetero.slow_ranks
//                  + delay(r, k)                            if r ∈ hetero.delay.ranks
// before it synchronizes (a rank in neither waits 0). delay(r, k) is a pure
// function of (hetero.seed, r, k): Philox block (seed, stream
// kDelayStream + r, index k) gives u = (word0 + ½)·2⁻³² ∈ (0, 1), and with
// mean m = hetero.delay.mean
//   fixed        m
//   exponential  −m · ln u
//   pareto       x_m · u^(−1/α), x_m = m (α − 1)/α, α = hetero.delay.pareto_shape > 1
//                (heavy-tailed: a finite mean, an infinite variance for α ≤ 2)
// so a rank's draws do not depend on any other rank, on the world size or
// on what else the run drew. The slow factor multiplies the compute the step
// measured (a wall-clock sleep: psar's trainer has no emulated clock).
// Under sync.overlap the wait delays the finalize step only; the buckets
// already on the wire keep going.
//
// An injected failure: world rank hetero.kill_rank raises SIGKILL on itself
// at the start of 0-based step hetero.kill_step — no handler, no goodbye, no
// MPI_Finalize, as if the host had died (kill_now).
//
// Per-rank NIC bandwidth (hetero.nic_ranks, hetero.nic_bandwidth) is the
// network emulator's business: comm/netem.h.

#include <cstdint>
#include <string>
#include <vector>

#include "core/rng.h"

namespace psar {

class Config;
class Tracer;

enum class DelayDistribution { kNone, kFixed, kExponential, kPareto };
// What hetero.delay.distribution accepts.
std::vector<std::string> delay_distribution_names();

struct HeteroPlan {
  uint64_t seed = 1;
  std::vector<int> slow_ranks;
  double slow_factor = 1;
  DelayDistribution distribution = DelayDistribution::kNone;
  double delay_mean = 0;  // seconds
  double pareto_shape = 2;
  std::vector<int> delay_ranks;  // empty: every rank
  int kill_rank = -1;             // hetero.kill_rank: dies (SIGKILL) at the start of kill_step
  int64_t kill_step = 0;

  // Philox stream of rank r's delays: kDelayStream + r.
  static constexpr uint64_t kDelayStream = fnv1a("hetero.delay");

  // From hetero.*; a ConfigError names the key of a rank outside
  // [0, world_size), a slow_factor below 1, a negative mean, a Pareto shape
  // ≤ 1 or a mean without a distribution.
  static HeteroPlan from_config(const Config& config, int world_size);
  bool active() const;
  // delay(rank, step) above: 0 for a rank without delays.
  double delay(int rank, int64_t step) const;
  // Whether world rank `rank` is to die at the start of 0-based `step`.
  bool kills(int rank, int64_t step) const { return rank == kill_rank && step == kill_step; }
  // injected(rank, step) above for a step whose compute took `compute_s`.
  double injected(int rank, int64_t step, double compute_s) const;
};

// Flushes stdout and stderr, then SIGKILLs this process (hetero.kill_rank).
[[noreturn]] void kill_now(int rank, int64_t step);

// Waits injected(rank, step, compute_s) on the shared monotonic clock and
// records it as an "injected" span on track 0 (args: the 1-based step of
// steps.csv and injected_s exactly); returns the seconds injected.
double inject_delay(const HeteroPlan& plan, int rank, int64_t step, double compute_s,
                    Tracer& tracer);

}  // namespace psar
