// Array handle, host creation and read-back.
#include "pax/core/array.h"

#include <cstring>

namespace pax {

Array::Array(AVal aval, std::shared_ptr<Buffer> buffer)
    : impl_(std::make_shared<const Impl>(Impl{std::move(aval), std::move(buffer), nullptr})) {}

Array::Array(AVal aval, std::shared_ptr<Tracer> tracer)
    : impl_(std::make_shared<const Impl>(Impl{std::move(aval), nullptr, std::move(tracer)})) {}

const AVal& Array::aval() const {
  PAX_CHECK(impl_, "use of an empty Array (default-constructed handle)");
  return impl_->aval;
}

int64_t Array::dim(int64_t axis) const { return shape()[normalize_axis(axis, ndim(), "Array::dim")]; }

const std::shared_ptr<Buffer>& Array::buffer() const {
  PAX_CHECK(impl_, "use of an empty Array (default-constructed handle)");
  if (impl_->buffer) return impl_->buffer;
  if (const Array* value = impl_->tracer->concrete()) return value->buffer();
  PAX_FAIL("the value of the traced array ", impl_->aval.str(), " is needed, but it is being traced by ",
           impl_->tracer->owner(), ", where only its shape and dtype are known; use a static argument, or ",
           "lax control flow (cond, while_loop) instead of C++ control flow on array values");
}

void Array::copy_to_host(DType as, void* dst) const { convert_host(dtype(), data(), as, dst, size_t(size())); }

void Array::check_item() const {
  PAX_CHECK(size() == 1, "item: the array has shape ", shape(), " (", size(),
            " elements); item() needs exactly one element");
}

Array from_host(const void* data, const Shape& shape, DType dtype) {
  for (int64_t d : shape) {
    PAX_CHECK(d >= 0, "array: negative dimension in shape ", shape);
  }
  size_t nbytes = size_t(shape.numel()) * itemsize(dtype);
  auto buffer = Buffer::allocate(nbytes);
  if (nbytes) std::memcpy(buffer->data(), data, nbytes);
  return Array(AVal{shape, dtype, false}, std::move(buffer));
}

Array scalar(double value, DType dtype, bool weak_type) {
  auto buffer = Buffer::allocate(itemsize(dtype));
  convert_host(DType::f64, &value, dtype, buffer->data(), 1);
  return Array(AVal{Shape{}, dtype, weak_type}, std::move(buffer));
}

}  // namespace pax
