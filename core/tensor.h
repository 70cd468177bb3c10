#pragma once
// Tensor: a shape and contiguous row-major float32 storage, owned or viewed.
// Views are how ParamStore hands out parameters that live in one arena.
// The storage lives on a Device (core/device.h): host memory, or CUDA memory
// that only the ops and device_copy touch (operator[] and span() are for host
// tensors).

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/device.h"

namespace psar {

using Shape = std::vector<int64_t>;

int64_t numel(const Shape& shape);
std::string to_string(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;
  // Owning, zero-filled, on `device`.
  explicit Tensor(Shape shape, Device device = Device::kCpu);
  // Non-owning view of `data` (on `device`), which must outlive the tensor.
  static Tensor view(float* data, Shape shape, Device device = Device::kCpu);

  float* data() { return data_; }
  const float* data() const { return data_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int rank() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return numel_; }
  bool owning() const { return storage_ != nullptr; }
  Device device() const { return device_; }

  std::span<float> span() { return {data_, static_cast<size_t>(numel_)}; }
  std::span<const float> span() const { return {data_, static_cast<size_t>(numel_)}; }
  float& operator[](int64_t i) { return data_[i]; }
  float operator[](int64_t i) const { return data_[i]; }

  // Reallocates an owning tensor (contents zeroed) when the element count changes.
  void resize(Shape shape);
  // Like std::vector::resize for a buffer that is always overwritten before it
  // is read: reallocates (zeroed) only when the element count changes, and
  // otherwise keeps the contents (no fill per call on the hot path).
  void ensure(Shape shape);
  void zero();
  // An owning copy on `device` (same shape and values).
  Tensor to(Device device) const;
  // Copies `src`'s values (same element count, any device) into this tensor.
  void copy_from(const Tensor& src);

 private:
  struct Free {
    Free() : device(Device::kCpu) {}
    explicit Free(Device d) : device(d) {}
    void operator()(float* p) const noexcept { device_free(device, p); }
    Device device;
  };
  Shape shape_;
  int64_t numel_ = 0;
  Device device_ = Device::kCpu;
  std::unique_ptr<float, Free> storage_;
  float* data_ = nullptr;
};

// A model's scratch and activation buffer: the part of std::vector<float>'s
// interface the layers use, its storage on the calling thread's current
// device (core/device.h) when it is (re)allocated. resize() reallocates,
// zero-filled, only when the size changes, and otherwise keeps the contents;
// the layers overwrite a buffer before reading it.
class Buffer {
 public:
  Buffer() = default;
  void resize(size_t n) {
    if (n == size_ && data_.device() == current_device() && data_.numel() > 0) return;
    data_ = Tensor({static_cast<int64_t>(n)}, current_device());
    size_ = n;
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }

 private:
  Tensor data_;
  size_t size_ = 0;
};

// int32 values (token ids, class targets) on a device: what a model copies a
// batch's integer columns into when it runs on CUDA.
class IntBuffer {
 public:
  IntBuffer() = default;
  ~IntBuffer() { device_free_int(device_, data_); }
  IntBuffer(const IntBuffer&) = delete;
  IntBuffer& operator=(const IntBuffer&) = delete;
  // Copies `values` (host memory) to `device`, reallocating when the size changes.
  void assign(std::span<const int32_t> values, Device device);
  const int32_t* data() const { return data_; }
  int64_t size() const { return size_; }

 private:
  Device device_ = Device::kCpu;
  int32_t* data_ = nullptr;
  int64_t size_ = 0;
};

}  // namespace psar
