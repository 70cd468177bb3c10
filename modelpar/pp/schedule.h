#pragma once
// A pipeline schedule as data: for each
// stage (rank), the ordered list of compute actions it runs in one batch.
// Sends and receives are not listed; they follow from the actions (p2p.h).
// Generators (generators.h) produce schedules, validate.h checks them,
// simulate.h predicts their timeline, and the stage executor and the
// Chrome-trace timeline consume the same action lists and spans.
//
// Stage/chunk mapping, as in Megatron-LM: p stages, v virtual chunks per
// stage; chunk c of stage s is virtual stage c·p + s of a p·v-long virtual
// pipeline, so a micro-batch passes through the p stages v times.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace psar::pp {

enum class Op : uint8_t {
  kForward,         // F: the chunk's forward; stores the activations its backward needs
  kBackward,        // B: fused backward, input and weight gradients together
  kBackwardInput,   // B (split): input gradient only, the half the previous stage waits for
  kBackwardWeight,  // W (split): weight gradient; needs the stored activations, frees them
};

const char* op_name(Op op);  // "forward", "backward", "backward-input", "backward-weight"
char op_letter(Op op);       // 'F', 'B', 'B', 'W' — as in the notes' and papers' figures

struct Action {
  Op op = Op::kForward;
  int microbatch = 0;  // i in [0, m)
  int chunk = 0;       // c in [0, v)
  friend bool operator==(const Action&, const Action&) = default;
};

struct Schedule {
  std::string kind;                          // the generator's registry name, or a test's label
  int stages = 1;                            // p
  int microbatches = 1;                      // m
  int chunks = 1;                            // v
  std::vector<std::vector<Action>> actions;  // [stage] -> actions in execution order

  int virtual_stages() const { return stages * chunks; }
  int virtual_stage(int stage, int chunk) const { return chunk * stages + stage; }
  int stage_of(int vstage) const { return vstage % stages; }
  int chunk_of(int vstage) const { return vstage / stages; }
};

// One action placed on a timeline (simulated here, measured by the executor).
struct ActionSpan {
  Action action;
  double start = 0;
  double end = 0;
};

// Grid cell: "F3", "B3", "W3"; with v > 1 a chunk letter follows, "F3b" is chunk 1.
std::string cell_label(const Action& action, int chunks);
// For error messages: "stage 1 action #4 (backward-input of micro-batch 3, chunk 0)".
std::string describe(int stage, size_t index, const Action& action);
// "gpipe (p=4, m=8, v=1)"
std::string describe(const Schedule& schedule);

}  // namespace psar::pp
