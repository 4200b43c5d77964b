// Array handle, host creation and read-back.
#include "pax/core/array.h"

#include <cstring>
#include <vector>

namespace pax {

Array::Array(AVal aval, std::shared_ptr<Buffer> buffer, bool committed)
    : impl_(std::make_shared<const Impl>(Impl{std::move(aval), std::move(buffer), nullptr, committed})) {}

Array::Array(AVal aval, std::shared_ptr<Tracer> tracer)
    : impl_(std::make_shared<const Impl>(Impl{std::move(aval), nullptr, std::move(tracer), false})) {}

const void* Array::data() const {
  const std::shared_ptr<Buffer>& b = buffer();
  if (b->device().kind != DeviceKind::cpu) {
    PAX_CHECK(device_memory(b->device().kind).host_accessible, "the host read the memory of an array ", aval().str(),
              " on ", b->device(), " through a pointer; read it with copy_to_host, to_vector, item ", "or device_get");
  }
  return b->data();
}

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

void Array::copy_to_host(DType as, void* dst) const {
  const std::shared_ptr<Buffer>& b = buffer();
  const Device d = b->device();
  if (d.kind == DeviceKind::cpu || device_memory(d.kind).host_accessible) {
    // Work queued on the device may still be writing the buffer.
    synchronize_device(d);
    convert_host(dtype(), b->data(), as, dst, size_t(size()));
    return;
  }
  if (as == dtype()) {
    device_memory(d.kind).to_host(*b, 0, dst, nbytes());
    return;
  }
  std::vector<unsigned char> staged(nbytes());
  device_memory(d.kind).to_host(*b, 0, staged.data(), staged.size());
  convert_host(dtype(), staged.data(), as, dst, size_t(size()));
}

void Array::check_item() const {
  PAX_CHECK(size() == 1, "item: the array has shape ", shape(), " (", size(),
            " elements); item() needs exactly one element");
}

Array from_host(const void* data, const Shape& shape, DType dtype) {
  return from_host(data, shape, dtype, default_device(), /*committed=*/false);
}

Array from_host(const void* data, const Shape& shape, DType dtype, Device device, bool committed) {
  for (int64_t d : shape) {
    PAX_CHECK(d >= 0, "array: negative dimension in shape ", shape);
  }
  size_t nbytes = size_t(shape.numel()) * itemsize(dtype);
  std::shared_ptr<Buffer> buffer = Buffer::allocate_on(device, nbytes);
  if (nbytes) {
    if (device.kind == DeviceKind::cpu) {
      std::memcpy(buffer->data(), data, nbytes);
    } else {
      device_memory(device.kind).from_host(buffer, 0, data, nbytes);
    }
  }
  return Array(AVal{shape, dtype, false}, std::move(buffer), committed);
}

Array scalar(double value, DType dtype, bool weak_type) {
  const Device device = default_device();
  std::shared_ptr<Buffer> buffer = Buffer::allocate_on(device, itemsize(dtype));
  if (device.kind == DeviceKind::cpu) {
    convert_host(DType::f64, &value, dtype, buffer->data(), 1);
  } else {
    unsigned char bytes[16];
    convert_host(DType::f64, &value, dtype, bytes, 1);
    device_memory(device.kind).from_host(buffer, 0, bytes, itemsize(dtype));
  }
  return Array(AVal{Shape{}, dtype, weak_type}, std::move(buffer));
}

}  // namespace pax
