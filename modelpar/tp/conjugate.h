#pragma once
// The conjugate operators of Megatron-LM (Shoeybi et al. 2019, §3), named as
// in the paper so the layer code shows where tensor parallelism communicates:
//
//   f: identity in forward, all-reduce in backward. Sits where a replicated
//      activation X enters a column-parallel GEMM: every rank reads all of X,
//      so ∂L/∂X is the sum of the ranks' partial input gradients.
//   g: all-reduce in forward, identity in backward. Sits after a row-parallel
//      GEMM: each rank holds a partial sum Σ_r Y_r·B_r of the output; the
//      gradient of a replicated output is already whole on every rank.
//
// A transformer layer has one f and one g around attention and one of each
// around the MLP: 2 all-reduces in forward (g) and 2 in backward (f), each of
// the activation [B·T, d_model].
//
// The column scatter/gather pair serves the alternative MLP split (X by
// columns, A by rows) and column-parallel layers that gather their output:
// taking a column block is free; gathering the blocks is an all-gather.

#include <cstdint>
#include <span>
#include <vector>

#include "modelpar/tp/group.h"

namespace psar {

// f forward: identity. Spelled out so the layer code reads like the paper.
inline void f_forward(TpGroup& tp, std::span<const float> x) { (void)tp, (void)x; }
// f backward: dx [N, C] holds this rank's partial input gradient; on return
// the sum over the group (identical bits on every rank).
void f_backward(TpGroup& tp, std::span<float> dx);

// g forward: y [N, C] holds this rank's partial output; on return the sum.
void g_forward(TpGroup& tp, std::span<float> y);
// g backward: identity.
inline void g_backward(TpGroup& tp, std::span<const float> dy) { (void)tp, (void)dy; }

// local [N, C/t] = columns [rank·C/t, (rank+1)·C/t) of full [N, C]. No communication.
void take_columns(float* local, const float* full, int64_t N, int64_t C, int rank, int t);
// full [N, C] = the column blocks local [N, C/t] of every rank, in rank order
// (an all-gather of N·C floats). scratch is resized as needed.
void gather_columns(TpGroup& tp, float* full, const float* local, int64_t N, int64_t C,
                    std::vector<float>& scratch);

// Sequence parallelism (Korthikanti et al. 2022, §4.2.2). Outside the
// tensor-parallel GEMMs — layer norms, dropouts, residual adds — each rank
// keeps 1/t of the rows, rows [rank·N/t, (rank+1)·N/t) of [N, C]. Megatron's
// g and ḡ replace f and g: before a column-parallel GEMM the pieces are
// all-gathered (its backward: a reduce-scatter of the partial input
// gradients), after a row-parallel GEMM the partial outputs are
// reduce-scattered (its backward: an all-gather). Same bytes on the wire as
// the two all-reduces they replace (an all-reduce is a reduce-scatter plus an
// all-gather), 1/t of the activations between them.

// full [N, C] = the row pieces [N/t, C] of every rank, in rank order.
void gather_rows(TpGroup& tp, float* full, const float* piece, int64_t N, int64_t C);
// piece [N/t, C] = this rank's rows of the sum over the group of full [N, C]
// (full is clobbered).
void reduce_scatter_rows(TpGroup& tp, float* piece, float* full, int64_t N, int64_t C);

}  // namespace psar
