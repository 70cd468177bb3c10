#include "core/param_store.h"

#include <algorithm>

#include "core/errors.h"
#include "core/rng.h"

namespace psar {

int ParamStore::add(const std::string& name, Shape shape, Init init) {
  PSAR_CHECK(!finalized_, "ParamStore::add('", name, "') after finalize()");
  PSAR_CHECK(!by_name_.contains(name), "duplicate parameter name '", name, "'");
  ParamInfo info;
  info.name = name;
  info.numel = psar::numel(shape);
  info.shape = std::move(shape);
  info.offset = total_;
  info.init = init;
  total_ += info.numel;
  by_name_[name] = static_cast<int>(infos_.size());
  infos_.push_back(std::move(info));
  return static_cast<int>(infos_.size()) - 1;
}

void ParamStore::initialize(const ParamInfo& info, uint64_t seed, std::span<float> out,
                            int64_t first) {
  const uint64_t stream = fnv1a(info.name);
  switch (info.init.kind) {
    case Init::Kind::kZeros: std::fill(out.begin(), out.end(), 0.0f); break;
    case Init::Kind::kOnes: std::fill(out.begin(), out.end(), 1.0f); break;
    case Init::Kind::kNormal: Philox::fill_normal(out, info.init.a, seed, stream, first); break;
    case Init::Kind::kUniform:
      Philox::fill_uniform(out, info.init.a, info.init.b, seed, stream, first);
      break;
  }
}

void ParamStore::finalize(uint64_t seed, Device device) {
  PSAR_CHECK(!finalized_, "ParamStore::finalize() called twice");
  Tensor host({total_});
  for (const auto& info : infos_)
    initialize(info, seed, {host.data() + info.offset, static_cast<size_t>(info.numel)});
  params_ = device == Device::kCpu ? std::move(host) : host.to(device);
  grads_ = Tensor({total_}, device);
  finalized_ = true;
  map_arenas();
}

void ParamStore::map_arenas() {
  param_at_.resize(infos_.size());
  grad_at_.resize(infos_.size());
  for (size_t i = 0; i < infos_.size(); ++i) {
    param_at_[i] = params_.data() + infos_[i].offset;
    grad_at_[i] = grads_.data() + infos_[i].offset;
  }
}

std::pair<size_t, size_t> ParamStore::whole_params(int64_t begin, int64_t end) const {
  const auto first = std::lower_bound(infos_.begin(), infos_.end(), begin,
                                      [](const ParamInfo& p, int64_t at) { return p.offset < at; });
  auto last = first;
  while (last != infos_.end() && last->offset + last->numel <= end) ++last;
  PSAR_CHECK(begin <= end && (first == infos_.end() ? begin == total_ : first->offset == begin) &&
                 (last == infos_.end() ? end == total_ : last->offset == end),
             "arena floats [", begin, ", ", end, ") are not whole parameters");
  return {static_cast<size_t>(first - infos_.begin()), static_cast<size_t>(last - infos_.begin())};
}

void ParamStore::release_arenas() {
  PSAR_CHECK(finalized_ && device() == Device::kCpu, "release_arenas: a finalized host store");
  params_ = Tensor();
  grads_ = Tensor();
  released_ = true;
  std::fill(param_at_.begin(), param_at_.end(), nullptr);
  std::fill(grad_at_.begin(), grad_at_.end(), nullptr);
}

void ParamStore::release_grads() {
  PSAR_CHECK(finalized_ && !released_ && device() == Device::kCpu,
             "release_grads: a finalized host store with its parameter arena");
  grads_ = Tensor();
  grads_released_ = true;
  std::fill(grad_at_.begin(), grad_at_.end(), nullptr);
}

void ParamStore::map_grads(int64_t begin, int64_t end, float* grads) {
  PSAR_CHECK(grads_released_, "ParamStore::map_grads with the gradient arena allocated");
  const auto [first, last] = whole_params(begin, end);
  for (size_t i = first; i < last; ++i)
    grad_at_[i] = grads ? grads + (infos_[i].offset - begin) : nullptr;
}

void ParamStore::map(int64_t begin, int64_t end, float* params, float* grads) {
  PSAR_CHECK(released_, "ParamStore::map with the arenas allocated");
  const auto [first, last] = whole_params(begin, end);
  for (size_t i = first; i < last; ++i) {
    param_at_[i] = params ? params + (infos_[i].offset - begin) : nullptr;
    grad_at_[i] = grads ? grads + (infos_[i].offset - begin) : nullptr;
  }
}

void ParamStore::restore_arenas(std::span<const float> values) {
  PSAR_CHECK(released_ && static_cast<int64_t>(values.size()) == total_,
             "restore_arenas: ", values.size(), " values for ", total_, " floats");
  params_ = Tensor({total_});
  std::copy(values.begin(), values.end(), params_.data());
  grads_ = Tensor({total_});
  released_ = grads_released_ = false;
  map_arenas();
}

int ParamStore::index_of(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) throw Error("no parameter named '" + name + "'");
  return it->second;
}

const ParamInfo& ParamStore::info(const std::string& name) const { return infos_[index_of(name)]; }

Tensor ParamStore::param(int index) {
  PSAR_CHECK(finalized_, "ParamStore::param() before finalize()");
  const auto& info = infos_.at(index);
  float* at = param_at_[static_cast<size_t>(index)];
  PSAR_CHECK(at, "parameter '", info.name, "' read while not gathered (sync.zero: 3)");
  return Tensor::view(at, info.shape, released_ ? Device::kCpu : params_.device());
}

Tensor ParamStore::grad(int index) {
  PSAR_CHECK(finalized_, "ParamStore::grad() before finalize()");
  const auto& info = infos_.at(index);
  float* at = grad_at_[static_cast<size_t>(index)];
  PSAR_CHECK(at, "gradient of '", info.name, "' written while not gathered (sync.zero: 2 or 3)");
  return Tensor::view(at, info.shape,
                      released_ || grads_released_ ? Device::kCpu : grads_.device());
}

void ParamStore::zero_grads() { grads_.zero(); }

void ParamStore::move_to(Device device) {
  if (device == params_.device()) return;
  PSAR_CHECK(!released_ && !grads_released_, "ParamStore::move_to with the arenas released");
  params_ = params_.to(device);
  grads_ = grads_.to(device);
  map_arenas();
}

}  // namespace psar
