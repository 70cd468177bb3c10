#include "modelpar/grid.h"

#include <string>

#include "core/errors.h"

namespace psar {

GridShape make_grid_shape(int world_size, int tp, int pp) {
  if (tp < 1) throw ConfigError("parallel.tp must be at least 1, got " + std::to_string(tp));
  if (pp < 1) throw ConfigError("parallel.pp must be at least 1, got " + std::to_string(pp));
  if (world_size % (tp * pp) != 0)
    throw ConfigError("world size " + std::to_string(world_size) +
                      " is not divisible by parallel.tp × parallel.pp = " + std::to_string(tp) +
                      " × " + std::to_string(pp));
  return {tp, pp, world_size / (tp * pp)};
}

GridCoord grid_coord(const GridShape& s, int rank) {
  return {rank % s.tp, (rank / s.tp) % s.dp, rank / (s.tp * s.dp)};
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
