#include "sim/gemm_table.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>

#include "core/errors.h"

namespace psar::sim {

using psar::detail::concat;

const char* layout_name(GemmLayout layout) {
  switch (layout) {
    case GemmLayout::kNN:
      return "NN";
    case GemmLayout::kNT:
      return "NT";
    case GemmLayout::kTN:
      return "TN";
  }
  return "?";
}

namespace {

constexpr GemmLayout kLayouts[] = {GemmLayout::kNN, GemmLayout::kNT, GemmLayout::kTN};
// How far a row's `tflops` may stray from its FLOPs over its `ms` (rounding).
constexpr double kTflopsTolerance = 0.01;

// One CSV line's fields: comma-separated, a field in double quotes may hold commas.
std::vector<std::string> fields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (char ch : line) {
    if (ch == '"')
      quoted = !quoted;
    else if (ch == ',' && !quoted)
      out.emplace_back();
    else if (ch != '\r')
      out.back() += ch;
  }
  return out;
}

double coord(const GemmTable::Point& p, int axis) {
  return axis == 0 ? p.batch : axis == 1 ? p.m : axis == 2 ? p.n : p.k;
}

// Whether the points in [first, last) span q on every axis after `axis`:
// a run that does not would hold its edge value for q (a model's few
// measured shapes beside a full grid), so a run that does is preferred.
bool covers(const std::vector<GemmTable::Point>& pts, size_t first, size_t last, int axis,
            const double (&q)[4]) {
  for (int a = axis + 1; a < 4; ++a) {
    bool below = false, above = false;
    for (size_t i = first; i < last; ++i) {
      below = below || coord(pts[i], a) <= q[a];
      above = above || coord(pts[i], a) >= q[a];
    }
    if (!below || !above) return false;
  }
  return true;
}

// Linear interpolation of the points' log rates along `axis` (0 batch, 1 m,
// 2 n, 3 k) at q[axis], each neighbour's value from the axes after it; the
// points in [first, last) share every earlier axis and are sorted. The
// neighbours: the nearest run of equal coordinate at or below q and the
// nearest above it, of the runs that cover q (covers) if any on that
// side, else the nearest; one alone (q outside the runs, or on one) holds.
double interpolate(const std::vector<GemmTable::Point>& pts, size_t first, size_t last, int axis,
                   const double (&q)[4]) {
  if (axis == 4) return pts[first].log_rate;
  // the runs of equal coordinate, ascending
  std::vector<size_t> starts;
  for (size_t i = first; i < last; ++i)
    if (i == first || coord(pts[i], axis) != coord(pts[i - 1], axis)) starts.push_back(i);
  starts.push_back(last);
  const int runs = static_cast<int>(starts.size()) - 1;
  const double x = q[axis];
  auto at = [&](int r) { return coord(pts[starts[static_cast<size_t>(r)]], axis); };
  auto covering = [&](int r) {
    return covers(pts, starts[static_cast<size_t>(r)], starts[static_cast<size_t>(r) + 1], axis, q);
  };
  // nearest run at or below x (and above it), covering ones first
  int lo = -1, hi = -1, lo_any = -1, hi_any = -1;
  for (int r = 0; r < runs; ++r) {
    if (at(r) <= x) {
      lo_any = r;
      if (covering(r)) lo = r;
    }
  }
  for (int r = runs - 1; r >= 0; --r) {
    if (at(r) > x) {
      hi_any = r;
      if (covering(r)) hi = r;
    }
  }
  if (lo < 0 && hi < 0) lo = lo_any, hi = hi_any;  // no run covers q: the nearest ones
  auto value = [&](int r) {
    return interpolate(pts, starts[static_cast<size_t>(r)], starts[static_cast<size_t>(r) + 1],
                       axis + 1, q);
  };
  if (lo < 0) return value(hi);
  if (hi < 0 || at(lo) == x) return value(lo);
  const double w = (x - at(lo)) / (at(hi) - at(lo));
  return (1 - w) * value(lo) + w * value(hi);
}

}  // namespace

size_t GemmTable::rows() const { return points_[0].size() + points_[1].size() + points_[2].size(); }

GemmTable GemmTable::parse(const std::string& csv, const std::string& origin) {
  GemmTable table;
  std::istringstream in(csv);
  std::string line;
  std::map<std::string, size_t> column;
  const std::vector<std::string> needed = {"gpu", "dtype", "layout", "batch", "m",
                                           "n",   "k",     "ms",     "tflops"};
  int lineno = 0;
  std::map<std::tuple<int, double, double, double, double>, int> seen;
  while (std::getline(in, line)) {
    ++lineno;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::vector<std::string> f = fields(line);
    const std::string where = concat(origin, ":", lineno);
    if (column.empty()) {
      for (size_t i = 0; i < f.size(); ++i) column[f[i]] = i;
      for (const std::string& name : needed)
        if (!column.count(name))
          throw DataError(concat(where, ": the header has no column '", name,
                                 "' (needs gpu,dtype,layout,batch,m,n,k,ms,tflops)"));
      continue;
    }
    auto field = [&](const std::string& name) -> const std::string& {
      const size_t i = column.at(name);
      if (i >= f.size()) throw DataError(concat(where, ": ", f.size(), " fields, no '", name, "'"));
      return f[i];
    };
    auto positive = [&](const std::string& name) {
      double v = 0;
      size_t used = 0;
      try {
        v = std::stod(field(name), &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != field(name).size())
        throw DataError(concat(where, ": ", name, " '", field(name), "' is not a number"));
      if (!(v > 0) || !std::isfinite(v))
        throw DataError(concat(where, ": ", name, " must be positive, got ", field(name)));
      return v;
    };
    const std::string& layout = field("layout");
    int li = -1;
    for (GemmLayout l : kLayouts)
      if (layout == layout_name(l)) li = static_cast<int>(l);
    if (li < 0) throw DataError(concat(where, ": layout '", layout, "' is none of NN, NT, TN"));
    if (table.gpu_.empty() && table.dtype_.empty()) {
      table.gpu_ = field("gpu");
      table.dtype_ = field("dtype");
    } else if (field("gpu") != table.gpu_ || field("dtype") != table.dtype_) {
      throw DataError(concat(where, ": gpu '", field("gpu"), "', dtype '", field("dtype"),
                             "' differ from the first row's '", table.gpu_, "', '", table.dtype_,
                             "' (one table per GPU model and type)"));
    }
    const double batch = positive("batch"), m = positive("m"), n = positive("n"), k = positive("k"),
                 ms = positive("ms"), tflops = positive("tflops");
    const double rate = 2 * batch * m * n * k / (ms * 1e-3);
    if (std::abs(rate / (tflops * 1e12) - 1) > kTflopsTolerance)
      throw DataError(
          concat(where, ": tflops ", tflops, " disagrees with 2·batch·m·n·k / ms = ", rate / 1e12));
    const Point p{std::log(batch), std::log(m), std::log(n), std::log(k), std::log(rate)};
    if (!seen.emplace(std::make_tuple(li, p.batch, p.m, p.n, p.k), lineno).second)
      throw DataError(concat(where, ": the shape ", layout, " batch ", field("batch"), " ",
                             field("m"), "x", field("n"), "x", field("k"), " again (line ",
                             seen[std::make_tuple(li, p.batch, p.m, p.n, p.k)], ")"));
    table.points_[li].push_back(p);
  }
  if (column.empty()) throw DataError(concat(origin, ": no header line"));
  for (GemmLayout l : kLayouts) {
    auto& pts = table.points_[static_cast<int>(l)];
    if (pts.empty())
      throw DataError(
          concat(origin, ": no row of layout ", layout_name(l), " (a table times NN, NT and TN)"));
    std::sort(pts.begin(), pts.end(), [](const Point& a, const Point& b) {
      return std::tie(a.batch, a.m, a.n, a.k) < std::tie(b.batch, b.m, b.n, b.k);
    });
    table.batched_[static_cast<int>(l)] = pts.back().batch > 0;  // log(batch) > 0: batch > 1
  }
  return table;
}

double GemmTable::flops_per_s(GemmLayout layout, double batch, int64_t m, int64_t n,
                              int64_t k) const {
  PSAR_CHECK(batch > 0 && m > 0 && n > 0 && k > 0, "GEMM ", batch, " x ", m, "x", n, "x", k,
             " has an empty side");
  // Batched rows of a layout with none: NN's (attention GEMMs timed in NN only).
  const bool batched = batch > 1 && !batched_[static_cast<int>(layout)];
  const auto& pts = points_[static_cast<int>(batched ? GemmLayout::kNN : layout)];
  const double q[4] = {std::log(batch), std::log(static_cast<double>(m)),
                       std::log(static_cast<double>(n)), std::log(static_cast<double>(k))};
  return std::exp(interpolate(pts, 0, pts.size(), 0, q));
}

namespace detail {
const std::vector<std::pair<const char*, const char*>>& gemm_table_sources();
}  // namespace detail

namespace {

// Every built-in table, parsed once: immutable data compiled into psar.
const std::map<std::string, GemmTable>& builtin_tables() {
  static const std::map<std::string, GemmTable> tables = [] {
    std::map<std::string, GemmTable> out;
    for (const auto& [name, text] : detail::gemm_table_sources())
      out.emplace(name, GemmTable::parse(text, concat("sim/gemm/", name, ".csv")));
    return out;
  }();
  return tables;
}

}  // namespace

std::vector<std::string> builtin_gemm_table_names() {
  std::vector<std::string> names;
  for (const auto& entry : builtin_tables()) names.push_back(entry.first);
  return names;
}

const GemmTable& builtin_gemm_table(const std::string& name, const std::string& key) {
  const auto& tables = builtin_tables();
  const auto it = tables.find(name);
  if (it == tables.end()) {
    std::string known;
    for (const auto& entry : tables) known += (known.empty() ? "" : ", ") + entry.first;
    throw ConfigError(concat(key, ": no GEMM table '", name, "' (built in: ",
                             known.empty() ? "none" : known, "; sim/gemm/NAME.csv)"));
  }
  return it->second;
}

}  // namespace psar::sim
