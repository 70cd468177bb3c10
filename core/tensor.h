#pragma once
// Tensor: a shape and contiguous row-major float32 storage, owned or viewed.
// Views are how ParamStore hands out parameters that live in one arena.

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace psar {

using Shape = std::vector<int64_t>;

int64_t numel(const Shape& shape);
std::string to_string(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  // Owning, zero-filled.
  explicit Tensor(Shape shape);
  // Non-owning view of `data`, which must outlive the tensor.
  static Tensor view(float* data, Shape shape);

  float* data() { return data_; }
  const float* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return numel_; }
  bool owning() const { return storage_ != nullptr; }

  std::span<float> span() { return {data_, static_cast<size_t>(numel_)}; }
  std::span<const float> span() const { return {data_, static_cast<size_t>(numel_)}; }
  float& operator[](int64_t i) { return data_[i]; }
  float operator[](int64_t i) const { return data_[i]; }

  // Reallocates an owning tensor (contents zeroed) when the element count changes.
  void resize(Shape shape);
  void zero();

 private:
  Shape shape_;
  int64_t numel_ = 0;
  std::unique_ptr<float[]> storage_;
  float* data_ = nullptr;
};

}  // namespace psar
