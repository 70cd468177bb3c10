#include "core/tensor.h"

#include <algorithm>
#include <sstream>

#include "core/errors.h"

namespace psar {

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    PSAR_CHECK(d >= 0, "negative dimension in shape ", to_string(shape));
    n *= d;
  }
  return n;
}

std::string to_string(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

Tensor::Tensor(Shape shape, Device device) : device_(device) { resize(std::move(shape)); }

Tensor Tensor::view(float* data, Shape shape, Device device) {
  Tensor t;
  t.device_ = device;
  t.numel_ = psar::numel(shape);
  t.shape_ = std::move(shape);
  t.data_ = data;
  return t;
}

void Tensor::resize(Shape shape) {
  PSAR_CHECK(owning() || data_ == nullptr, "cannot resize a view");
  const int64_t n = psar::numel(shape);
  if (n != numel_ || !storage_) {
    storage_.reset();  // free before allocating: device memory is scarcer
    storage_ = std::unique_ptr<float, Free>(device_alloc(device_, std::max<int64_t>(n, 1)),
                                            Free{device_});
    data_ = storage_.get();
    numel_ = n;
  }
  shape_ = std::move(shape);
  zero();
}

void Tensor::ensure(Shape shape) {
  if (psar::numel(shape) != numel_ || (!storage_ && data_ == nullptr)) {
    resize(std::move(shape));
    return;
  }
  PSAR_CHECK(owning(), "cannot resize a view");
  shape_ = std::move(shape);
}

void Tensor::zero() {
  if (device_ == Device::kCpu) {
    std::fill_n(data_, numel_, 0.0f);
  } else {
    device_zero(device_, data_, numel_);
  }
}

Tensor Tensor::to(Device device) const {
  Tensor t(shape_, device);
  device_copy(t.data_, device, data_, device_, numel_);
  return t;
}

void Tensor::copy_from(const Tensor& src) {
  PSAR_CHECK(src.numel_ == numel_, "copy_from: ", psar::to_string(src.shape_), " into ",
             psar::to_string(shape_));
  device_copy(data_, device_, src.data_, src.device_, numel_);
}

void IntBuffer::assign(std::span<const int32_t> values, Device device) {
  const auto n = static_cast<int64_t>(values.size());
  if (n != size_ || device != device_ || !data_) {
    device_free_int(device_, data_);
    data_ = nullptr;
    device_ = device;
    data_ = device_alloc_int(device, n);
    size_ = n;
  }
  device_copy(data_, device_, values.data(), Device::kCpu, n);
}

}  // namespace psar
