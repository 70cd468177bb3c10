#include "modelpar/tp/shard.h"

#include <algorithm>

#include "core/errors.h"

namespace psar {

namespace {

// [rows, cols] of a weight, [1, cols] of a bias.
std::pair<int64_t, int64_t> as_matrix(const Shape& full) {
  PSAR_CHECK(full.size() == 1 || full.size() == 2, "sharded tensors are 1-D or 2-D, got ",
             to_string(full));
  return full.size() == 1 ? std::pair{int64_t{1}, full[0]} : std::pair{full[0], full[1]};
}

// Calls run(global_offset, local_offset, length) for each contiguous run of
// elements of this rank's shard, in local order.
template <typename Run>
void for_each_run(const Shape& full, ShardSpec spec, int rank, int t, Run run) {
  const auto [rows, cols] = as_matrix(full);
  switch (spec.kind) {
    case ShardSpec::Kind::kReplicated:
      run(int64_t{0}, int64_t{0}, rows * cols);
      break;
    case ShardSpec::Kind::kRows: {
      PSAR_CHECK(full.size() == 2 && rows % t == 0, "row split of ", to_string(full), " over ", t);
      const int64_t r = rows / t;
      run(rank * r * cols, int64_t{0}, r * cols);
      break;
    }
    case ShardSpec::Kind::kColumns: {
      const int64_t block = cols / spec.groups, piece = block / t;
      PSAR_CHECK(spec.groups >= 1 && cols % spec.groups == 0 && block % t == 0, "column split of ",
                 to_string(full), " in ", spec.groups, " groups over ", t);
      int64_t local = 0;
      for (int64_t i = 0; i < rows; ++i)
        for (int g = 0; g < spec.groups; ++g, local += piece)
          run(i * cols + g * block + rank * piece, local, piece);
      break;
    }
  }
}

}  // namespace

Shape shard_shape(const Shape& full, ShardSpec spec, int t) {
  int64_t n = 0;
  for_each_run(full, spec, 0, t, [&](int64_t, int64_t, int64_t len) { n += len; });
  switch (spec.kind) {
    case ShardSpec::Kind::kReplicated:
      return full;
    case ShardSpec::Kind::kRows:
      return {full[0] / t, full[1]};
    case ShardSpec::Kind::kColumns:
      return full.size() == 1 ? Shape{n} : Shape{full[0], n / full[0]};
  }
  return full;
}

void copy_shard(std::span<const float> full, const Shape& full_shape, ShardSpec spec, int rank,
                int t, std::span<float> local) {
  PSAR_CHECK(static_cast<int64_t>(full.size()) == numel(full_shape), "full tensor holds ",
             full.size(), " floats, shape ", to_string(full_shape));
  PSAR_CHECK(static_cast<int64_t>(local.size()) == numel(shard_shape(full_shape, spec, t)),
             "shard buffer of ", local.size(), " floats");
  for_each_run(full_shape, spec, rank, t, [&](int64_t global, int64_t at, int64_t len) {
    std::copy_n(full.data() + global, len, local.data() + at);
  });
}

void place_shard(std::span<const float> local, const Shape& full_shape, ShardSpec spec, int rank,
                 int t, std::span<float> full) {
  PSAR_CHECK(static_cast<int64_t>(full.size()) == numel(full_shape), "full tensor holds ",
             full.size(), " floats, shape ", to_string(full_shape));
  PSAR_CHECK(static_cast<int64_t>(local.size()) == numel(shard_shape(full_shape, spec, t)),
             "shard buffer of ", local.size(), " floats");
  for_each_run(full_shape, spec, rank, t, [&](int64_t global, int64_t at, int64_t len) {
    std::copy_n(local.data() + at, len, full.data() + global);
  });
}

void initialize_shard(const ParamInfo& full, uint64_t seed, ShardSpec spec, int rank, int t,
                      std::span<float> local) {
  PSAR_CHECK(static_cast<int64_t>(local.size()) == numel(shard_shape(full.shape, spec, t)),
             "shard buffer of ", local.size(), " floats for '", full.name, "'");
  for_each_run(full.shape, spec, rank, t, [&](int64_t global, int64_t at, int64_t len) {
    ParamStore::initialize(
        full, seed, local.subspan(static_cast<size_t>(at), static_cast<size_t>(len)), global);
  });
}

int ShardedParams::add(ParamStore& store, const std::string& name, const Shape& full, Init init,
                       ShardSpec spec) {
  Entry e;
  e.full.name = name;
  e.full.shape = full;
  e.full.numel = numel(full);
  e.full.init = init;
  e.spec = spec;
  e.id = store.add(name, shard_shape(full, spec, t_), init);
  entries_.push_back(std::move(e));
  return entries_.back().id;
}

void ShardedParams::initialize(ParamStore& store, uint64_t seed) const {
  std::vector<float> host;  // a device arena's shard is filled on the host, then copied
  for (const auto& e : entries_) {
    if (t_ == 1 || e.spec.kind == ShardSpec::Kind::kReplicated) continue;
    Tensor shard = store.param(e.id);
    if (shard.device() == Device::kCpu) {
      initialize_shard(e.full, seed, e.spec, rank_, t_, shard.span());
      continue;
    }
    host.assign(static_cast<size_t>(shard.numel()), 0.0f);
    initialize_shard(e.full, seed, e.spec, rank_, t_, host);
    device_copy(shard.data(), shard.device(), host.data(), Device::kCpu, shard.numel());
  }
}

}  // namespace psar
