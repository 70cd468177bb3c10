#include "sim/collective.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

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

std::vector<double> share_links(const std::vector<Flow>& flows, int links) {
  const size_t n = flows.size();
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return flows[a].start < flows[b].start; });
  std::vector<double> left(n), end(n, 0.0);  // alone-seconds of work left
  std::vector<int> on(static_cast<size_t>(links), 0);  // active flows per link
  std::vector<size_t> active;
  std::vector<double> slow;  // [active] the bottleneck's flow count
  std::vector<size_t> still;
  const double inf = std::numeric_limits<double>::infinity();
  double now = 0;
  size_t next = 0;
  while (next < n || !active.empty()) {
    slow.assign(active.size(), 1.0);
    double done_at = inf;
    for (size_t a = 0; a < active.size(); ++a) {
      for (int l : flows[active[a]].links)
        slow[a] = std::max(slow[a], static_cast<double>(on[static_cast<size_t>(l)]));
      done_at = std::min(done_at, now + left[active[a]] * slow[a]);
    }
    const double arrive_at = next < n ? flows[order[next]].start : inf;
    const double t = std::min(done_at, arrive_at);
    still.clear();
    for (size_t a = 0; a < active.size(); ++a) {
      const size_t k = active[a];
      if (now + left[k] * slow[a] <= t) {  // done at its own completion time
        end[k] = now + left[k] * slow[a];
        for (int l : flows[k].links) --on[static_cast<size_t>(l)];
      } else {
        left[k] -= (t - now) / slow[a];
        still.push_back(k);
      }
    }
    std::swap(active, still);
    now = std::max(now, t);
    for (; next < n && flows[order[next]].start <= now; ++next) {
      const size_t k = order[next];
      PSAR_CHECK(flows[k].alone >= 0, "share_links: flow ", k, " takes ", flows[k].alone, " s");
      left[k] = flows[k].alone;
      if (left[k] == 0) {
        end[k] = flows[k].start;
        continue;
      }
      for (int l : flows[k].links) {
        PSAR_CHECK(0 <= l && l < links, "share_links: flow ", k, " on link ", l, " of ", links);
        ++on[static_cast<size_t>(l)];
      }
      active.push_back(k);
    }
  }
  return end;
}

}  // namespace psar::sim
