#pragma once
// Activation recomputation (train.recompute), one mode for the trainer's GPT
// (workloads/gpt.h) and the simulator's cost model (sim/gpt_cost.h): none
// keeps every activation; selective drops the attention core's (scores,
// softmax, dropout) and recomputes them before the backward; full keeps only
// each block's input and recomputes the whole block.

#include <string>
#include <vector>

namespace psar {

enum class Recompute { kNone, kSelective, kFull };
// "none" | "selective" | "full"; ConfigError naming train.recompute otherwise.
Recompute parse_recompute(const std::string& name);
const char* recompute_name(Recompute r);
// Every mode, in the enum's order (the schema's choices for train.recompute).
std::vector<std::string> recompute_names();

}  // namespace psar
