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
  return Tensor::view(params_.data() + info.offset, info.shape, params_.device());
}

Tensor ParamStore::grad(int index) {
  PSAR_CHECK(finalized_, "ParamStore::grad() before finalize()");
  const auto& info = infos_.at(index);
  return Tensor::view(grads_.data() + info.offset, info.shape, grads_.device());
}

void ParamStore::zero_grads() { grads_.zero(); }

void ParamStore::move_to(Device device) {
  if (device == params_.device()) return;
  params_ = params_.to(device);
  grads_ = grads_.to(device);
}

}  // namespace psar
