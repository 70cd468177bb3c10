#pragma once
// Pictures of a simulated schedule, like the figures in the lecture notes:
// one row per stage, time to the right. `render_grid` draws text, one column
// per time quantum (the largest step that divides every action's start and
// end): a cell holds the action starting there (F3, B3, W3; F3b is chunk 1
// of an interleaved schedule), '-' continues a longer action, '.' is idle.
// Zero-length actions (t_w = 0) take no column and are not drawn.
// `grid_json` writes the same spans for experiments/schedule_grid.py, which
// draws the PNG (plotting stays out of the C++).

#include <string>

#include "modelpar/pp/schedule.h"
#include "modelpar/pp/simulate.h"

namespace psar::pp {

std::string render_grid(const Schedule& schedule, const Prediction& prediction);

std::string grid_json(const Schedule& schedule, const Prediction& prediction,
                      const CostModel& costs);

}  // namespace psar::pp
