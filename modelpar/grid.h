#pragma once
// The (p, t, d) process grid of 3D parallelism, in Megatron's order:
// tensor-parallel ranks are adjacent (fastest-varying), then data-parallel,
// then pipeline stages:  world rank = (pp_rank · d + dp_rank) · t + tp_rank.
// Tensor parallelism thus stays inside a host (its all-reduces are on the
// critical path), pipeline stages span hosts.

#include <memory>

#include "comm/comm.h"

namespace psar {

struct GridShape {
  int tp = 1;  // t
  int pp = 1;  // p
  int dp = 1;  // d = world / (t · p)
};

// Checks that t · p divides the world size; throws ConfigError naming the keys.
GridShape make_grid_shape(int world_size, int tp, int pp);

struct GridCoord {
  int tp = 0, dp = 0, pp = 0;
};
GridCoord grid_coord(const GridShape& shape, int world_rank);

class ProcessGrid {
 public:
  // Collective over `world`: splits it into the three families of groups.
  ProcessGrid(Comm& world, GridShape shape);

  const GridShape& shape() const { return shape_; }
  const GridCoord& coord() const { return coord_; }
  Comm& tp() { return *tp_; }  // same (pp, dp): t ranks
  Comm& dp() { return *dp_; }  // same (pp, tp): d ranks
  Comm& pp() { return *pp_; }  // same (dp, tp): p ranks, ordered by stage

 private:
  GridShape shape_;
  GridCoord coord_;
  std::unique_ptr<Comm> tp_, dp_, pp_;
};

}  // namespace psar
