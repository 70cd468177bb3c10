#include "trainer/model_parts.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "core/errors.h"
#include "core/ops.h"
#include "modelpar/tp/shard.h"

namespace psar {

namespace {

// Tags of the tied parameters' exchanges on the pipeline communicator: above
// every tag of a batch and of the evaluation (p2p.h), two per tied parameter.
int tied_tag(const StageLayout& layout, size_t k, int which) {
  return 2 * layout.vstages() * layout.microbatches + layout.vstages() + 2 * static_cast<int>(k) +
         which;
}

bool is_copy(const std::vector<TiedParam>& tied, int param) {
  return std::any_of(tied.begin(), tied.end(),
                     [&](const TiedParam& t) { return t.copy && t.param == param; });
}

}  // namespace

void reduce_tied_gradients(ParamStore& store, const std::vector<TiedParam>& tied,
                           const StageLayout& layout, Comm& pipeline, std::vector<float>& scratch) {
  for (size_t k = 0; k < tied.size(); ++k) {
    const std::span<float> grad = store.grad(tied[k].param).span();
    scratch.resize(grad.size());
    pipeline.sendrecv(tied[k].peer, std::span<const float>(grad), tied[k].peer,
                      std::span<float>(scratch), tied_tag(layout, k, 0));
    ops::add_inplace(grad.data(), scratch.data(), static_cast<int64_t>(grad.size()));
  }
}

void share_tied_params(ParamStore& store, const std::vector<TiedParam>& tied,
                       const StageLayout& layout, Comm& pipeline) {
  for (size_t k = 0; k < tied.size(); ++k) {
    const std::span<float> values = store.param(tied[k].param).span();
    if (tied[k].copy)
      pipeline.recv(tied[k].peer, values, tied_tag(layout, k, 1));
    else
      pipeline.send(tied[k].peer, std::span<const float>(values), tied_tag(layout, k, 1));
  }
}

void check_tied_params(ParamStore& store, const std::vector<TiedParam>& tied,
                       const StageLayout& layout, Comm& pipeline, std::vector<float>& scratch) {
  for (size_t k = 0; k < tied.size(); ++k) {
    const std::span<float> values = store.param(tied[k].param).span();
    if (tied[k].copy) {
      pipeline.send(tied[k].peer, std::span<const float>(values), tied_tag(layout, k, 0));
      continue;
    }
    scratch.resize(values.size());
    pipeline.recv(tied[k].peer, std::span<float>(scratch), tied_tag(layout, k, 0));
    PSAR_CHECK(std::memcmp(scratch.data(), values.data(), values.size() * sizeof(float)) == 0,
               "tied parameter ", store.infos()[static_cast<size_t>(tied[k].param)].name,
               ": the copy on pipeline stage ", tied[k].peer, " differs from stage ",
               layout.stage, "'s");
  }
}

std::vector<float> gather_model(const Model& model, ParamStore& store,
                                const std::vector<std::pair<int, int>>& chunks,
                                const StageLayout& layout, Comm& tp, Comm& pipeline) {
  const std::vector<TiedParam> tied = model.tied_params();
  const ShardedParams* sharded = model.sharded_params();
  // Every parameter's serial shape and split, by store index (whole when unsharded).
  std::vector<const ShardedParams::Entry*> entry(store.infos().size(), nullptr);
  if (sharded)
    for (const auto& e : sharded->entries()) entry[static_cast<size_t>(e.id)] = &e;

  // 1. Over the TP group: every rank's local arena, then each tensor unsharded.
  const auto locals = tp.allgather_bytes(std::as_bytes(store.params()));
  std::vector<float> mine;
  std::vector<int64_t> chunk_floats;
  for (const auto& [begin, end] : chunks) {
    const size_t before = mine.size();
    for (int k = begin; k < end; ++k) {
      if (is_copy(tied, k)) continue;
      const ParamInfo& info = store.infos()[static_cast<size_t>(k)];
      const ShardedParams::Entry* e = entry[static_cast<size_t>(k)];
      if (!e || tp.size() == 1 || e->spec.kind == ShardSpec::Kind::kReplicated) {
        const auto values = store.param(k).span();
        mine.insert(mine.end(), values.begin(), values.end());
        continue;
      }
      const size_t at = mine.size();
      mine.resize(at + static_cast<size_t>(e->full.numel));
      for (int r = 0; r < tp.size(); ++r) {
        const auto* arena = reinterpret_cast<const float*>(locals[static_cast<size_t>(r)].data());
        place_shard({arena + info.offset, static_cast<size_t>(info.numel)}, e->full.shape, e->spec,
                    r, tp.size(), {mine.data() + at, static_cast<size_t>(e->full.numel)});
      }
    }
    chunk_floats.push_back(static_cast<int64_t>(mine.size() - before));
  }

  // 2. Over the pipeline: virtual stage u = c·p + s is chunk c of stage s.
  const auto sizes = pipeline.allgather_bytes(std::as_bytes(std::span<const int64_t>(chunk_floats)));
  const auto arenas = pipeline.allgather_bytes(std::as_bytes(std::span<const float>(mine)));
  std::vector<float> out;
  for (int u = 0; u < layout.vstages(); ++u) {
    const int s = u % layout.stages, c = u / layout.stages;
    std::vector<int64_t> n(static_cast<size_t>(layout.chunks));
    std::memcpy(n.data(), sizes[static_cast<size_t>(s)].data(), n.size() * sizeof(int64_t));
    const int64_t first = std::accumulate(n.begin(), n.begin() + c, int64_t{0});
    const auto* arena = reinterpret_cast<const float*>(arenas[static_cast<size_t>(s)].data());
    out.insert(out.end(), arena + first, arena + first + n[static_cast<size_t>(c)]);
  }
  return out;
}

}  // namespace psar
