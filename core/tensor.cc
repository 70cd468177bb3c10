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

Tensor::Tensor(Shape shape) { resize(std::move(shape)); }

Tensor Tensor::view(float* data, Shape shape) {
  Tensor t;
  t.numel_ = psar::numel(shape);
  t.shape_ = std::move(shape);
  t.data_ = data;
  return t;
}

void Tensor::resize(Shape shape) {
  PSAR_CHECK(owning() || data_ == nullptr, "cannot resize a view");
  const int64_t n = psar::numel(shape);
  if (n != numel_ || !storage_) {
    storage_ = std::make_unique<float[]>(static_cast<size_t>(std::max<int64_t>(n, 1)));
    data_ = storage_.get();
    numel_ = n;
  }
  shape_ = std::move(shape);
  zero();
}

void Tensor::zero() { std::fill_n(data_, numel_, 0.0f); }

}  // namespace psar
