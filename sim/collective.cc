#include "sim/collective.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/errors.h"

namespace psar::sim {

std::vector<double> run_groups(const Network& net, const std::vector<GroupRun>& groups,
                               const CollectiveOptions& options) {
  size_t rounds = 0;
  std::vector<std::vector<double>> ready(groups.size());  // [group][rank] clock
  // Each program's messages and additions, round by round.
  std::vector<std::vector<std::vector<Transfer>>> messages(groups.size());
  std::vector<std::vector<std::vector<int64_t>>> reduced(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    const GroupRun& run = groups[g];
    PSAR_CHECK(run.program && static_cast<int>(run.endpoint.size()) == run.program->ranks,
               "group ", g, " maps ", run.endpoint.size(), " ranks for a program of ",
               run.program ? run.program->ranks : 0);
    messages[g] = run.program->transfers();
    reduced[g] = run.program->reduced_per_round();
    rounds = std::max(rounds, messages[g].size());
    ready[g].assign(run.endpoint.size(), run.start);
  }
  std::vector<int> flows(static_cast<size_t>(net.links()), 0);
  std::vector<int> touched;
  std::vector<std::vector<double>> next(groups.size());
  for (size_t k = 0; k < rounds; ++k) {
    // Flows per link in this round, over all groups.
    touched.clear();
    auto load = [&](int link) {
      if (link < 0) return;
      if (flows[static_cast<size_t>(link)]++ == 0) touched.push_back(link);
    };
    for (size_t g = 0; g < groups.size(); ++g) {
      const GroupRun& run = groups[g];
      if (k >= messages[g].size()) continue;
      for (const Transfer& m : messages[g][k]) {
        const auto p = net.path(run.endpoint[static_cast<size_t>(m.src)],
                                run.endpoint[static_cast<size_t>(m.dst)]);
        load(p.egress);
        load(p.ingress);
      }
    }
    for (size_t g = 0; g < groups.size(); ++g) {
      const GroupRun& run = groups[g];
      next[g] = ready[g];
      if (k >= messages[g].size()) continue;
      const double size = static_cast<double>(run.program->count) * run.element_bytes;
      for (const Transfer& m : messages[g][k]) {
        const auto p = net.path(run.endpoint[static_cast<size_t>(m.src)],
                                run.endpoint[static_cast<size_t>(m.dst)]);
        double rate = std::numeric_limits<double>::infinity();
        for (int link : {p.egress, p.ingress})
          if (link >= 0) rate = std::min(rate, net.bandwidth(link, size) / flows[static_cast<size_t>(link)]);
        const double bytes = static_cast<double>(m.count) * run.element_bytes;
        const double end = ready[g][static_cast<size_t>(m.src)] + p.latency +
                           (std::isinf(rate) ? 0.0 : bytes / rate);
        double& s = next[g][static_cast<size_t>(m.src)];
        double& d = next[g][static_cast<size_t>(m.dst)];
        s = std::max(s, end);
        d = std::max(d, end);
      }
      if (options.reduce_bandwidth > 0)
        for (size_t r = 0; r < next[g].size(); ++r)
          next[g][r] += static_cast<double>(reduced[g][k][r]) * run.element_bytes /
                        options.reduce_bandwidth;
      std::swap(ready[g], next[g]);
    }
    for (int link : touched) flows[static_cast<size_t>(link)] = 0;
  }
  std::vector<double> done;
  for (const auto& clocks : ready)
    done.push_back(clocks.empty() ? 0 : *std::max_element(clocks.begin(), clocks.end()));
  return done;
}

}  // namespace psar::sim
