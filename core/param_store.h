#pragma once
// ParamStore: every parameter of a model in ONE contiguous arena and every
// gradient in another of the same layout, with named views into both.
// Synchronization backends see the arenas as flat spans; layers see tensors.
//
// Usage: add() every parameter (name, shape, init), then finalize() once.
// Initial values depend only on (seed, name, element index), so every rank,
// and a tensor-parallel shard cutting a slice out of the full tensor, gets the
// same numbers.
//
// Sharded parameters (ZeRO stage 3, sync/layer_gather.h): release_arenas()
// frees both arenas, and every parameter is then unmapped until map()
// points a range of whole parameters at buffers its caller owns (one
// layer's gathered parameters and its gradient); param() or grad() of an
// unmapped parameter is an error naming it. restore_arenas() brings the
// arenas back whole. Sharded gradients (stage 2): release_grads() frees the
// gradient arena only, and map_grads() points a layer's gradients at its
// caller's buffer; the parameters stay in their arena.

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"

namespace psar {

struct Init {
  enum class Kind { kZeros, kOnes, kNormal, kUniform } kind = Kind::kZeros;
  float a = 0.0f;  // stddev for normal, lower bound for uniform
  float b = 0.0f;  // upper bound for uniform
  static Init zeros() { return {Kind::kZeros}; }
  static Init ones() { return {Kind::kOnes}; }
  static Init normal(float stddev) { return {Kind::kNormal, stddev}; }
  static Init uniform(float lo, float hi) { return {Kind::kUniform, lo, hi}; }
};

struct ParamInfo {
  std::string name;
  Shape shape;
  int64_t offset = 0;  // in floats, into both arenas
  int64_t numel = 0;
  Init init;
};

class ParamStore {
 public:
  // Registers a parameter; returns its index. Only before finalize().
  int add(const std::string& name, Shape shape, Init init);
  // Allocates the arenas on `device` and initializes every parameter from
  // `seed` (on the host, then copied: the values do not depend on the device).
  void finalize(uint64_t seed, Device device = Device::kCpu);
  Device device() const { return params_.device(); }

  bool finalized() const { return finalized_; }
  int64_t size() const { return total_; }  // floats in each arena
  const std::vector<ParamInfo>& infos() const { return infos_; }
  const ParamInfo& info(const std::string& name) const;

  Tensor param(int index);
  Tensor grad(int index);
  Tensor param(const std::string& name) { return param(index_of(name)); }
  Tensor grad(const std::string& name) { return grad(index_of(name)); }

  // The whole arenas, in device() memory.
  std::span<float> params() { return params_.span(); }
  std::span<float> grads() { return grads_.span(); }
  std::span<const float> params() const { return params_.span(); }
  std::span<const float> grads() const { return grads_.span(); }

  void zero_grads();

  // Sharded parameters (above). Whether the arenas are allocated.
  bool has_arenas() const { return !released_; }
  void release_arenas();
  // Sharded gradients (above): the gradient arena freed, every gradient unmapped.
  void release_grads();
  bool has_grad_arena() const { return !released_ && !grads_released_; }
  // Arena floats [begin, end), whole parameters, accumulate their gradients
  // into `grads` (end − begin floats; null unmaps). After release_grads().
  void map_grads(int64_t begin, int64_t end, float* grads);
  // Arena floats [begin, end), whole parameters, read from `params` and
  // accumulate into `grads` (each `end − begin` floats); null unmaps.
  void map(int64_t begin, int64_t end, float* params, float* grads);
  // The arenas again, the parameters `values` (size() floats), the gradients zero.
  void restore_arenas(std::span<const float> values);
  // Moves both arenas to `device`; views taken before are invalid after.
  void move_to(Device device);

  // Fills `out` with the values parameter `info` would get from `seed`, for
  // elements [first, first + out.size()) of its flattened full tensor.
  static void initialize(const ParamInfo& info, uint64_t seed, std::span<float> out,
                         int64_t first = 0);

 private:
  int index_of(const std::string& name) const;
  // The parameters whose floats lie in [begin, end), checked to be whole ones.
  std::pair<size_t, size_t> whole_params(int64_t begin, int64_t end) const;
  void map_arenas();

  std::vector<ParamInfo> infos_;
  std::unordered_map<std::string, int> by_name_;
  Tensor params_;
  Tensor grads_;
  int64_t total_ = 0;
  bool finalized_ = false;
  bool released_ = false;
  bool grads_released_ = false;
  // Where each parameter and its gradient live now (null: unmapped).
  std::vector<float*> param_at_, grad_at_;
};

}  // namespace psar
