#pragma once
// What one GPT step costs, counted from its shapes (docs/simulate.md has the
// derivations): FLOPs per layer and per micro-batch, parameters per stage,
// and the memory terms of the planner. Shapes: b micro-batch, s sequence,
// h hidden, a heads, l layers, V vocabulary, t tensor-parallel degree.
//
//   one block's forward:  24·b·s·h² (QKV, projection, two MLP GEMMs)
//                        + 4·b·s²·h (scores QKᵀ and their product with V)
//   the LM head forward:  2·b·s·h·V
//   backward = 2 × forward; activation recomputation adds one more forward
//   of every block (not of the head).
// Summed over a batch of B sequences this is Megatron-LM's count (Narayanan
// et al. 2021, as stated in docs/theory.md): with recomputation
//   96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)),  without  72·B·s·l·h²·(…).

#include <cstdint>

namespace psar::sim {

struct GptShape {
  int64_t layers = 0, hidden = 0, heads = 0, seq = 0, vocab = 0;
};

double block_forward_flops(const GptShape& g, int64_t microbatch);
double head_forward_flops(const GptShape& g, int64_t microbatch);
// Every FLOP of one step of a batch of `batch` sequences (the whole model).
double step_flops(const GptShape& g, int64_t batch, bool recompute);

// Parameters: a block 12h² + 13h, the embedding V·h + s·h (the head is tied
// to it), the final layer norm 2h.
int64_t block_params(const GptShape& g);
int64_t model_params(const GptShape& g);

}  // namespace psar::sim
