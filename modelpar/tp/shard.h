#pragma once
// How a parameter of the serial model is cut over the t ranks of a
// tensor-parallel group, and how a rank gets exactly the serial model's values
// for its slice.
//
// Every rank keeps only its shard in its ParamStore (declared with the local
// shape under the serial name). ParamStore::finalize() initializes that local
// tensor as if it were whole, so ShardedParams::initialize() then overwrites
// each shard with the serial values: the initializer is counter-based
// (core/rng.h), so the value of element i of the full tensor is a pure
// function of (seed, name, i) and a shard computes its own elements by their
// global indices, without materializing the full tensor. This is the choice
// documented in docs/tensor_parallel.md.
//
// Layouts (row-major, weight [C_in, C_out] as in core/ops.h):
//   replicated  every rank holds the whole tensor (layer norms, embeddings,
//               biases added after g)
//   columns     weight [C_in, C_out] → [C_in, C_out/t]; a bias [C_out] →
//               [C_out/t]. With groups = k the columns are k equal blocks
//               (Q | K | V) and each block is split, so rank r holds
//               [Q_r | K_r | V_r]: its heads' queries, keys and values.
//   rows        weight [C_in, C_out] → rows [r·C_in/t, (r+1)·C_in/t): one
//               contiguous slice.

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/param_store.h"

namespace psar {

struct ShardSpec {
  enum class Kind { kReplicated, kColumns, kRows } kind = Kind::kReplicated;
  int groups = 1;  // kColumns only
  static ShardSpec replicated() { return {}; }
  static ShardSpec columns(int groups = 1) { return {Kind::kColumns, groups}; }
  static ShardSpec rows() { return {Kind::kRows, 1}; }
};

// Local shape of a full tensor ([rows, cols], or [cols] for a bias).
Shape shard_shape(const Shape& full, ShardSpec spec, int t);

// local = this rank's shard of `full` (used by tests to slice serial gradients).
void copy_shard(std::span<const float> full, const Shape& full_shape, ShardSpec spec, int rank,
                int t, std::span<float> local);

// The inverse: writes this rank's shard `local` into its place in `full`.
void place_shard(std::span<const float> local, const Shape& full_shape, ShardSpec spec, int rank,
                 int t, std::span<float> full);

// local = the values the serial model's parameter `full` gets from `seed`, for
// this rank's shard.
void initialize_shard(const ParamInfo& full, uint64_t seed, ShardSpec spec, int rank, int t,
                      std::span<float> local);

// Every parameter of a tensor-parallel model with its full (serial) shape and
// how it is cut.
class ShardedParams {
 public:
  struct Entry {
    int id = -1;     // index in the ParamStore
    ParamInfo full;  // name, serial shape and initializer
    ShardSpec spec;
  };

  ShardedParams(int rank, int t) : rank_(rank), t_(t) {}

  // Declares this rank's shard of parameter `name` (serial shape `full`).
  int add(ParamStore& store, const std::string& name, const Shape& full, Init init, ShardSpec spec);
  // After ParamStore::finalize(seed): gives every shard its serial values.
  void initialize(ParamStore& store, uint64_t seed) const;

  const std::vector<Entry>& entries() const { return entries_; }
  int rank() const { return rank_; }
  int size() const { return t_; }

 private:
  int rank_, t_;
  std::vector<Entry> entries_;
};

}  // namespace psar
