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

// A model with its parameters, ready to run.
struct Built {
  ParamStore store;
  std::unique_ptr<Gpt> model;
};

inline std::unique_ptr<Built> build(const GptOptions& o, const ModelContext& context = {}) {
  auto b = std::make_unique<Built>();
  b->model = std::make_unique<Gpt>(o, context);
  b->model->declare(b->store);
  b->store.finalize(o.seed);
  b->model->bind(b->store);
  return b;
}

}  // namespace psar::tp_testing
