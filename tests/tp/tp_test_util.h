#pragma once
// Shared pieces of the tensor-parallel tests: groups of t in-process ranks,
// a harness that runs one parallel block on one rank, and the comparison of a
// rank's shards against slices of the serial model.
//
// "Equal within 1e-5 relative" means, per tensor: max |tp − serial| ≤ 1e-5 ·
// max |serial| (the serial tensor's largest entry sets the scale, so entries
// near zero are judged on the tensor's scale, not their own).

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "allreduce/allreducer.h"
#include "comm/inproc_comm.h"
#include "core/param_store.h"
#include "core/rng.h"
#include "modelpar/tp/group.h"
#include "modelpar/tp/shard.h"

namespace psar::tp_testing {

inline std::vector<float> randn(size_t n, uint64_t stream, float scale = 1.0f) {
  std::vector<float> v(n);
  Philox::fill_normal(v, scale, 4242, stream);
  return v;
}

inline ::testing::AssertionResult close(std::span<const float> got, std::span<const float> want,
                                        double tol = 1e-5) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  double err = 0, scale = 0;
  size_t at = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double e = std::abs(double{got[i]} - want[i]);
    if (e > err) err = e, at = i;
    scale = std::max(scale, std::abs(double{want[i]}));
  }
  if (err <= tol * scale) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "max |diff| " << err << " at " << at << " (got " << got[at] << ", want " << want[at]
         << ") > " << tol << " × max |want| " << scale;
}

// Runs fn(tp, comm) on t in-process ranks, each with a TpGroup over the world
// of t ranks and its own instance of the named all-reduce algorithm.
inline void run_group(int t, const std::string& allreduce,
                      const std::function<void(TpGroup&, Comm&)>& fn) {
  run_inproc(t, [&](Comm& comm) {
    auto algo = make_allreducer(allreduce);
    TpGroup tp(&comm, algo.get());
    fn(tp, comm);
  });
}

// One parallel block (ParallelMLP or ParallelSelfAttention) on one rank, with
// its own parameters initialized from `seed` as the serial model's slices.
template <typename Layer>
struct Harness {
  template <typename Options>
  Harness(TpGroup& group, const Options& options, uint64_t seed)
      : tp(group), shards(group.rank(), group.size()), layer(group, options) {
    layer.declare(shards, store);
    store.finalize(seed);
    shards.initialize(store, seed);
    layer.bind(store);
  }
  TpGroup& tp;
  ShardedParams shards;
  ParamStore store;
  Layer layer;
};

// This rank's slice of the serial model's tensor `name` (parameter or gradient).
inline std::vector<float> serial_slice(std::span<const float> serial_full,
                                       const ShardedParams::Entry& e, int rank, int t) {
  std::vector<float> out(static_cast<size_t>(numel(shard_shape(e.full.shape, e.spec, t))));
  copy_shard(serial_full, e.full.shape, e.spec, rank, t, out);
  return out;
}

// Every gradient (or, with params = true, every parameter) of a rank's shards
// against the slices of the serial store's full tensors.
inline void expect_shards_match(ParamStore& tp_store, const ShardedParams& shards,
                                ParamStore& serial, bool params, double tol = 1e-5) {
  for (const auto& e : shards.entries()) {
    Tensor full = params ? serial.param(e.full.name) : serial.grad(e.full.name);
    Tensor mine = params ? tp_store.param(e.id) : tp_store.grad(e.id);
    const auto want = serial_slice(full.span(), e, shards.rank(), shards.size());
    EXPECT_TRUE(close(mine.span(), want, tol))
        << (params ? "parameter " : "gradient of ") << e.full.name << " on rank " << shards.rank()
        << " of " << shards.size();
  }
}

// Bytes the ring algorithms send in all, summed over the t ranks: an
// all-reduce of n floats 2(t−1)·n·4, an all-gather of n floats (t−1)·n·4.
inline int64_t ring_allreduce_bytes(int t, int64_t n) { return 2 * (t - 1) * n * 4; }
inline int64_t ring_all_gather_bytes(int t, int64_t n) { return (t - 1) * n * 4; }

}  // namespace psar::tp_testing
