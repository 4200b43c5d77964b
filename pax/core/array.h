// Array: an immutable value handle. It is either concrete (a Buffer on a device)
// or a tracer owned by an interpreter level (see pax/interp). Shape, dtype and
// weak flag (the AVal) are always known. Row-major and contiguous.
//
// Placement follows JAX: an array made from host values lives on the default
// device, uncommitted, and moves to where the committed operands of an
// operation live; device_put commits it to a device, and an operation's result
// is committed when one of its operands is.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <span>
#include <type_traits>
#include <vector>

#include "pax/core/buffer.h"
#include "pax/core/dtype.h"
#include "pax/core/error.h"
#include "pax/core/shape.h"
#include "pax/core/tracer.h"

namespace pax {

class Array {
 public:
  Array() = default;  // an empty handle; operations reject it with pax::Error
  Array(AVal aval, std::shared_ptr<Buffer> buffer, bool committed = false);
  Array(AVal aval, std::shared_ptr<Tracer> tracer);

  bool defined() const { return impl_ != nullptr; }
  const AVal& aval() const;
  const Shape& shape() const { return aval().shape; }
  DType dtype() const { return aval().dtype; }
  bool weak_type() const { return aval().weak_type; }
  int64_t ndim() const { return shape().rank(); }
  int64_t size() const { return shape().numel(); }  // number of elements
  int64_t dim(int64_t axis) const;                  // negative axes count from the end
  size_t nbytes() const { return size_t(size()) * itemsize(dtype()); }

  bool is_concrete() const { return impl_ && impl_->buffer != nullptr; }
  bool is_tracer() const { return impl_ && impl_->tracer != nullptr; }
  Tracer* tracer() const { return impl_ ? impl_->tracer.get() : nullptr; }
  // The buffer of a concrete array (or of the concrete value behind a grad
  // tracer); throws pax::Error while the value is only being traced.
  const std::shared_ptr<Buffer>& buffer() const;
  // The memory of a concrete array, for host code: a pax::Error on a device
  // whose memory the host may not read (copy_to_host / device_get stage
  // through the backend instead).
  const void* data() const;
  Device device() const { return buffer()->device(); }
  // Placed on its device by device_put or by a committed operand.
  bool committed() const { return impl_ && impl_->committed; }

  // Host read-back, converted to T with convert_element_type's rules.
  template <class T>
  std::vector<T> to_vector() const {
    if constexpr (std::is_same_v<T, bool>) {
      // std::vector<bool> is packed: read back through bytes.
      std::vector<uint8_t> bytes(static_cast<size_t>(size()));
      copy_to_host(DType::bool_, bytes.data());
      return std::vector<bool>(bytes.begin(), bytes.end());
    } else {
      std::vector<T> out(static_cast<size_t>(size()));
      copy_to_host(dtype_v<T>, out.data());
      return out;
    }
  }
  // The single element of a size-1 array.
  template <class T>
  T item() const {
    check_item();
    T out;
    copy_to_host(dtype_v<T>, &out);
    return out;
  }
  void copy_to_host(DType as, void* dst) const;

  // Same values, another dtype (convert_element_type); defined in pax/ops.
  Array astype(DType dtype) const;

  // True when this handle is the only one to its value and no other value
  // (a reshape, say) shares its buffer: the buffer may then be overwritten,
  // as compiled programs do with donated arguments.
  bool owns_buffer_exclusively() const {
    return impl_ && impl_->buffer && impl_.use_count() == 1 && impl_->buffer.use_count() == 1;
  }

  // Identity of the underlying value (two handles to one value compare equal).
  const void* id() const { return impl_.get(); }

 private:
  void check_item() const;
  struct Impl {
    AVal aval;
    std::shared_ptr<Buffer> buffer;
    std::shared_ptr<Tracer> tracer;
    bool committed = false;
  };
  std::shared_ptr<const Impl> impl_;
};

// numpy-style printing: Array([[1., 2.], [3., 4.]], dtype=float32).
std::ostream& operator<<(std::ostream& os, const Array& a);
// Printing options (numpy's threshold / edgeitems / precision).
struct PrintOptions {
  int64_t threshold = 1000;  // summarise arrays with more elements than this
  int64_t edgeitems = 3;     // items shown at each edge of a summarised dimension
  int precision = 8;         // significant digits for floats
};
PrintOptions& print_options();

// Creation from host data (copied), uncommitted on the default device. Throws
// when values.size() != shape.numel().
Array from_host(const void* data, const Shape& shape, DType dtype);
// The same on `device`, committed to it unless `committed` is false.
Array from_host(const void* data, const Shape& shape, DType dtype, Device device, bool committed = true);
template <class T>
Array array(std::span<const T> values, const Shape& shape) {
  PAX_CHECK(int64_t(values.size()) == shape.numel(), "array: ", values.size(), " values do not fill shape ", shape,
            " (which needs ", shape.numel(), ")");
  return from_host(values.data(), shape, dtype_v<T>);
}
template <class T>
Array array(const std::vector<T>& values, const Shape& shape) {
  return array(std::span<const T>(values), shape);
}
template <class T>
Array array(const std::vector<T>& values) {
  return array(std::span<const T>(values), Shape{int64_t(values.size())});
}
template <class T>
Array array(std::initializer_list<T> values) {
  return array(std::span<const T>(values.begin(), values.size()), Shape{int64_t(values.size())});
}
template <class T>
Array array(std::initializer_list<T> values, const Shape& shape) {
  return array(std::span<const T>(values.begin(), values.size()), shape);
}
template <class T>
Array scalar(T value) {
  return from_host(&value, Shape{}, dtype_v<T>);
}
// A scalar of the given dtype from a double (converted with convert rules).
Array scalar(double value, DType dtype, bool weak_type = false);

}  // namespace pax
