#pragma once
// A tiny GPT and its batches, shared by the in-process and the MPI tests.

#include <memory>

#include "core/rng.h"
#include "workloads/gpt.h"

namespace psar::tp_testing {

inline GptOptions tiny(MlpSplit split = MlpSplit::kColumnRow, float dropout = 0.0f) {
  return {.vocab = 11,
          .seq_len = 6,
          .layers = 2,
          .d_model = 16,
          .heads = 4,
          .dropout = dropout,
          .init_std = 0.2f,
          .split = split,
          .seed = 7};
}

inline Batch batch_of(int64_t B, const GptOptions& o, uint64_t stream) {
  Batch b;
  b.size = B;
  for (int64_t i = 0; i < B * o.seq_len; ++i) {
    const auto r = Philox::block(3, stream, static_cast<uint64_t>(i));
    b.tokens.push_back(static_cast<int32_t>(r[0] % o.vocab));
    b.targets.push_back(static_cast<int32_t>(r[1] % o.vocab));
  }
  return b;
}

// A serial-layout model (one stage, any batch) with its parameters, ready to
// run; tensor-parallel over `comm` when it is given.
struct Built {
  std::unique_ptr<TpGroup> group;
  ParamStore store;
  std::unique_ptr<Gpt> model;
};

inline std::unique_ptr<Built> build(const GptOptions& o, Comm* comm = nullptr,
                                    Allreducer* algorithm = nullptr) {
  auto b = std::make_unique<Built>();
  b->group = comm ? std::make_unique<TpGroup>(comm, algorithm) : std::make_unique<TpGroup>();
  b->model = std::make_unique<Gpt>(o, ModelContext{b->group.get(), {}});
  build_params(*b->model, b->store, 1, o.seed);
  return b;
}

}  // namespace psar::tp_testing
