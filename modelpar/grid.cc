#include "modelpar/grid.h"

#include <string>

#include "core/errors.h"

namespace psar {

using psar::detail::concat;

namespace {
constexpr struct {
  const char* name;
  std::array<GridAxis, 3> order;
} kOrders[] = {
    {"tp-dp-pp", {GridAxis::kTp, GridAxis::kDp, GridAxis::kPp}},
    {"tp-pp-dp", {GridAxis::kTp, GridAxis::kPp, GridAxis::kDp}},
    {"dp-tp-pp", {GridAxis::kDp, GridAxis::kTp, GridAxis::kPp}},
    {"pp-tp-dp", {GridAxis::kPp, GridAxis::kTp, GridAxis::kDp}},
};
}  // namespace

int GridShape::size(GridAxis axis) const {
  return axis == GridAxis::kTp ? tp : axis == GridAxis::kDp ? dp : pp;
}

int GridCoord::get(GridAxis axis) const {
  return axis == GridAxis::kTp ? tp : axis == GridAxis::kDp ? dp : pp;
}

std::vector<std::string> grid_order_names() {
  std::vector<std::string> names;
  for (const auto& o : kOrders) names.emplace_back(o.name);
  return names;
}

std::array<GridAxis, 3> parse_grid_order(const std::string& name) {
  std::string known;
  for (const auto& o : kOrders) {
    if (name == o.name) return o.order;
    known += (known.empty() ? "" : ", ") + std::string(o.name);
  }
  throw ConfigError("parallel.order: '" + name + "' is not a rank order (known: " + known + ")");
}

std::string grid_order_name(const std::array<GridAxis, 3>& order) {
  for (const auto& o : kOrders)
    if (o.order == order) return o.name;
  return "?";
}

GridShape make_grid_shape(int world_size, int tp, int pp, const std::string& order) {
  if (tp < 1) throw ConfigError(concat("parallel.tp must be at least 1, got ", tp));
  if (pp < 1) throw ConfigError(concat("parallel.pp must be at least 1, got ", pp));
  if (world_size % (tp * pp) != 0)
    throw ConfigError(concat("world size ", world_size,
                             " is not divisible by parallel.tp × parallel.pp = ", tp, " × ", pp,
                             " (the grid needs p·t·d = world size)"));
  GridShape s{tp, pp, world_size / (tp * pp)};
  s.order = parse_grid_order(order);
  return s;
}

GridCoord grid_coord(const GridShape& s, int rank) {
  GridCoord c;
  for (GridAxis axis : s.order) {
    const int v = rank % s.size(axis);
    rank /= s.size(axis);
    (axis == GridAxis::kTp ? c.tp : axis == GridAxis::kDp ? c.dp : c.pp) = v;
  }
  return c;
}

int grid_rank(const GridShape& s, const GridCoord& c) {
  int rank = 0;
  for (size_t k = s.order.size(); k-- > 0;) rank = rank * s.size(s.order[k]) + c.get(s.order[k]);
  return rank;
}

ProcessGrid::ProcessGrid(Comm& world, GridShape shape)
    : shape_(shape), coord_(grid_coord(shape, world.rank())) {
  PSAR_CHECK(shape.tp * shape.pp * shape.dp == world.size(), "grid ", shape.tp, "x", shape.pp,
             "x", shape.dp, " does not cover ", world.size(), " ranks");
  const auto& c = coord_;
  tp_ = world.split(c.pp * shape.dp + c.dp, c.tp);
  dp_ = world.split(c.pp * shape.tp + c.tp, c.dp);
  pp_ = world.split(c.dp * shape.tp + c.tp, c.pp);
}

}  // namespace psar
