#include "modelpar/pp/grid.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "core/errors.h"

namespace psar::pp {

namespace {

constexpr int kMaxSubdivisions = 12;  // quantum = shortest action / k, k ≤ this
const std::string kContinues = "-";   // cell of an action that began further left

// Shortest round-trip decimal form of `x` ("0.375", "1", "1e-06").
std::string number(double x) {
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, x);
  return std::string(buf, r.ptr);
}

bool on_grid(double t, double quantum, double tolerance) {
  return std::fabs(t / quantum - std::round(t / quantum)) <= tolerance;
}

// The largest step dividing every start and end; `exact` false if none of
// shortest/1 .. shortest/kMaxSubdivisions does (times are then rounded).
double find_quantum(const Prediction& pr, bool* exact) {
  double shortest = 0;
  for (const auto& spans : pr.spans)
    for (const auto& s : spans)
      if (s.end > s.start && (shortest == 0 || s.end - s.start < shortest))
        shortest = s.end - s.start;
  *exact = true;
  if (shortest == 0) return 1;
  for (int k = 1; k <= kMaxSubdivisions; ++k) {
    const double q = shortest / k;
    const bool fits = std::all_of(pr.spans.begin(), pr.spans.end(), [&](const auto& spans) {
      return std::all_of(spans.begin(), spans.end(), [&](const ActionSpan& s) {
        return on_grid(s.start, q, 1e-6) && on_grid(s.end, q, 1e-6);
      });
    });
    if (fits) return q;
  }
  *exact = false;
  return shortest / kMaxSubdivisions;
}

}  // namespace

std::string render_grid(const Schedule& schedule, const Prediction& pr) {
  bool exact = true;
  const double q = find_quantum(pr, &exact);
  const auto columns = static_cast<size_t>(std::llround(pr.makespan / q));
  std::vector<std::vector<std::string>> cells(pr.spans.size(),
                                              std::vector<std::string>(columns, "."));
  size_t width = 2;
  for (size_t stage = 0; stage < pr.spans.size(); ++stage)
    for (const ActionSpan& s : pr.spans[stage]) {
      const auto first = static_cast<size_t>(std::llround(s.start / q));
      const auto last = std::min(static_cast<size_t>(std::llround(s.end / q)), columns);
      if (last <= first) continue;  // zero-length action
      const std::string label = cell_label(s.action, schedule.chunks);
      width = std::max(width, label.size());
      cells[stage][first] = label;
      for (size_t c = first + 1; c < last; ++c) cells[stage][c] = kContinues;
    }
  width += 1;  // one space between cells

  std::string out =
      psar::detail::concat(describe(schedule), ": one column = ", number(q), " time unit",
                           q == 1 ? "" : "s", exact ? "" : " (times rounded to columns)", "\n");
  const std::string margin = "          ";  // "stage 12 |" is as wide
  const auto pad = [&](std::string s, size_t w) {
    s.resize(std::max(s.size(), w), ' ');
    return s;
  };
  // Time ruler: the time at every fifth column.
  std::string ruler = margin;
  for (size_t c = 0; c < columns; c += 5)
    ruler += pad(number(static_cast<double>(c) * q), 5 * width);
  while (!ruler.empty() && ruler.back() == ' ') ruler.pop_back();
  out += ruler + "\n";
  for (size_t stage = 0; stage < cells.size(); ++stage) {
    std::string row = pad(psar::detail::concat("stage ", stage), margin.size() - 2) + "| ";
    for (const auto& cell : cells[stage]) row += pad(cell, width);
    while (!row.empty() && row.back() == ' ') row.pop_back();
    out += row + "\n";
  }
  return out;
}

std::string grid_json(const Schedule& schedule, const Prediction& pr, const CostModel& costs) {
  using psar::detail::concat;
  std::string out = concat(
      "{\"kind\": \"", schedule.kind, "\", \"stages\": ", schedule.stages,
      ", \"microbatches\": ", schedule.microbatches, ", \"chunks\": ", schedule.chunks,
      ",\n \"costs\": {\"t_f\": ", number(costs.forward),
      ", \"t_b\": ", number(costs.backward_input), ", \"t_w\": ", number(costs.backward_weight),
      ", \"p2p_latency\": ", number(costs.p2p_latency), "},\n \"makespan\": ", number(pr.makespan),
      ", \"bubble_fraction\": ", number(pr.bubble_fraction),
      ", \"idle_share\": ", number(pr.idle_share), ",\n \"peak_activations\": [");
  for (size_t s = 0; s < pr.peak_activations.size(); ++s)
    out += (s ? ", " : "") + std::to_string(pr.peak_activations[s]);
  out += "],\n \"spans\": [";
  for (size_t stage = 0; stage < pr.spans.size(); ++stage) {
    out += stage ? ",\n  [" : "\n  [";
    for (size_t k = 0; k < pr.spans[stage].size(); ++k) {
      const ActionSpan& s = pr.spans[stage][k];
      out += concat(k ? ", " : "", "{\"op\": \"", op_name(s.action.op), "\", \"label\": \"",
                    cell_label(s.action, schedule.chunks),
                    "\", \"microbatch\": ", s.action.microbatch, ", \"chunk\": ", s.action.chunk,
                    ", \"start\": ", number(s.start), ", \"end\": ", number(s.end), "}");
    }
    out += "]";
  }
  out += "\n ]\n}\n";
  return out;
}

}  // namespace psar::pp
