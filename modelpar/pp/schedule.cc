#include "modelpar/pp/schedule.h"

#include "core/errors.h"

namespace psar::pp {

const char* op_name(Op op) {
  switch (op) {
    case Op::kForward:
      return "forward";
    case Op::kBackward:
      return "backward";
    case Op::kBackwardInput:
      return "backward-input";
    case Op::kBackwardWeight:
      return "backward-weight";
  }
  PSAR_CHECK(false, "unknown pipeline op ", static_cast<int>(op));
  return "";
}

char op_letter(Op op) {
  switch (op) {
    case Op::kForward:
      return 'F';
    case Op::kBackward:
    case Op::kBackwardInput:
      return 'B';
    case Op::kBackwardWeight:
      return 'W';
  }
  PSAR_CHECK(false, "unknown pipeline op ", static_cast<int>(op));
  return '?';
}

std::string cell_label(const Action& action, int chunks) {
  std::string label(1, op_letter(action.op));
  label += std::to_string(action.microbatch);
  // Chunk letters a, b, c, ... then #26, #27 for absurdly deep interleaving.
  if (chunks > 1 && action.chunk < 26) label += static_cast<char>('a' + action.chunk);
  if (chunks > 1 && action.chunk >= 26) label.append("#").append(std::to_string(action.chunk));
  return label;
}

std::string describe(int stage, size_t index, const Action& action) {
  return psar::detail::concat("stage ", stage, " action #", index, " (", op_name(action.op),
                              " of micro-batch ", action.microbatch, ", chunk ", action.chunk, ")");
}

std::string describe(const Schedule& s) {
  return psar::detail::concat(s.kind, " (p=", s.stages, ", m=", s.microbatches, ", v=", s.chunks,
                              ")");
}

}  // namespace psar::pp
