#pragma once
// One rank holds a part of the model: the layers of its pipeline stage's
// chunks, each tensor-parallel layer as its TP rank's shard. What the
// training loop does with the parts besides running them:
//
//  - tied parameters (model.h, TiedParam): the GPT's token embedding on the
//    first stage and its head's copy on the last. Before the optimizer step
//    the pair's gradients are summed over the pair (Megatron's embedding
//    group: the ranks of stages 0 and p − 1 with the same (dp, tp)
//    coordinate, which the pipeline communicator connects); after it the
//    owner's values overwrite the copy; at the end of a run the two must
//    hold the same bits.
//  - the whole model: the parts gathered, unsharded and put in the serial
//    model's order (TrainResult::params).

#include <utility>
#include <vector>

#include "comm/comm.h"
#include "core/param_store.h"
#include "workloads/model.h"

namespace psar {

// Each tied parameter's gradient becomes the sum of its two copies' on both
// ranks (a + b = b + a in IEEE arithmetic, so both hold the same bits).
void reduce_tied_gradients(ParamStore& store, const std::vector<TiedParam>& tied,
                           const StageLayout& layout, Comm& pipeline, std::vector<float>& scratch);
// After the step, the owner's values overwrite the copy's. Both took a step
// on the same summed gradient, but the data-parallel reduction adds the
// replicas' gradients in an order that depends on where a value sits in the
// rank's arena (the ring starts each chunk at a different rank), and the two
// copies sit at different places: with three or more replicas the two sums
// can round differently, and the copies would drift apart.
void share_tied_params(ParamStore& store, const std::vector<TiedParam>& tied,
                       const StageLayout& layout, Comm& pipeline);
// PSAR_CHECK that the two copies of every tied parameter hold the same bits.
void check_tied_params(ParamStore& store, const std::vector<TiedParam>& tied,
                       const StageLayout& layout, Comm& pipeline, std::vector<float>& scratch);

// The whole model in the serial arena's order, on every rank of the
// model-parallel group: each TP group's shards unsharded (tp), then the
// stages' chunks put in virtual-stage order (pipeline), tied copies left out.
// chunks: [chunk] its parameters' store indices [begin, end).
std::vector<float> gather_model(const Model& model, ParamStore& store,
                                const std::vector<std::pair<int, int>>& chunks,
                                const StageLayout& layout, Comm& tp, Comm& pipeline);

}  // namespace psar
