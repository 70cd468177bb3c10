#pragma once
// The (p, t, d) process grid of 3D parallelism: world = p·t·d ranks, each at
// a coordinate (pp, tp, dp), and the three families of groups: the t ranks
// of a tensor-parallel group (same pp, dp), the d replicas of a data-parallel
// group (same pp, tp), and the p stages of a pipeline (same dp, tp — so TP
// rank r of stage s exchanges activations with TP rank r of stage s + 1).
//
// parallel.order names the axes from the fastest-varying rank to the
// slowest. Megatron's default is tp-dp-pp: tensor-parallel ranks adjacent
// (inside a host, where their per-layer all-reduces on the critical path
// are cheapest), then data-parallel replicas, pipeline stages slowest (they
// span hosts):  world rank = (pp · d + dp) · t + tp. tp-pp-dp, dp-tp-pp
// and pp-tp-dp are there for experiments (the last two spread a TP group
// over hosts; pp-tp-dp even at d = 1, where a pipeline's stages are adjacent).

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "comm/comm.h"

namespace psar {

enum class GridAxis { kTp, kDp, kPp };

struct GridShape {
  int tp = 1;  // t
  int pp = 1;  // p
  int dp = 1;  // d = world / (t · p)
  // Axes from the fastest-varying world rank to the slowest.
  std::array<GridAxis, 3> order{GridAxis::kTp, GridAxis::kDp, GridAxis::kPp};
  int size(GridAxis axis) const;
};

// The orders parallel.order accepts, and their names.
std::array<GridAxis, 3> parse_grid_order(const std::string& name);
std::vector<std::string> grid_order_names();
std::string grid_order_name(const std::array<GridAxis, 3>& order);

// Checks that t · p divides the world size; throws ConfigError naming the keys.
GridShape make_grid_shape(int world_size, int tp, int pp, const std::string& order = "tp-dp-pp");

struct GridCoord {
  int tp = 0, dp = 0, pp = 0;
  int get(GridAxis axis) const;
};
GridCoord grid_coord(const GridShape& shape, int world_rank);
int grid_rank(const GridShape& shape, const GridCoord& coord);

class ProcessGrid {
 public:
  // Collective over `world`: splits it into the three families of groups.
  ProcessGrid(Comm& world, GridShape shape);

  const GridShape& shape() const { return shape_; }
  const GridCoord& coord() const { return coord_; }
  Comm& tp() { return *tp_; }  // same (pp, dp): t ranks, ordered by tp
  Comm& dp() { return *dp_; }  // same (pp, tp): d ranks, ordered by dp
  Comm& pp() { return *pp_; }  // same (dp, tp): p ranks, ordered by stage

 private:
  GridShape shape_;
  GridCoord coord_;
  std::unique_ptr<Comm> tp_, dp_, pp_;
};

}  // namespace psar
