// pax::* — the jax.numpy-level API: numpy broadcasting, type promotion with
// weak C++ scalars, creation, math, reductions with axes / keepdims, shape
// manipulation, indexing, matmul and einsum. Everything is built from the
// primitives of pax/ops/lax.h, so it runs eagerly and under every transform.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "pax/core/array.h"
#include "pax/ir/params.h"
#include "pax/ops/lax.h"

namespace pax {

// An operand of a numpy-level function: an Array, or a C++ scalar literal.
// Literals are weakly typed (like Python scalars in JAX): `x + 1.5` keeps the
// dtype of a bf16 `x`, and the literal is materialised exactly in the result
// dtype (so `x_f64 + 0.1` adds the double 0.1).
class ArrayLike {
 public:
  ArrayLike(const Array& a) : array_(a) {}                             // NOLINT(google-explicit-constructor)
  ArrayLike(Array&& a) : array_(std::move(a)) {}                       // NOLINT
  ArrayLike(double v) : value_(v), literal_(DType::f32) {}             // NOLINT
  ArrayLike(float v) : value_(v), literal_(DType::f32) {}              // NOLINT
  ArrayLike(int v) : value_(v), literal_(DType::i32) {}                // NOLINT
  ArrayLike(long v) : value_(double(v)), literal_(DType::i32) {}       // NOLINT
  ArrayLike(long long v) : value_(double(v)), literal_(DType::i32) {}  // NOLINT
  ArrayLike(unsigned v) : value_(v), literal_(DType::i32) {}           // NOLINT
  ArrayLike(bool v) : value_(v), literal_(DType::bool_) {}             // NOLINT

  bool is_literal() const { return literal_.has_value(); }
  const Array& array() const { return array_; }
  double value() const { return value_; }
  WeakDType weak_dtype() const;
  // The operand as an array of `dtype` (a literal becomes a 0-d array).
  Array as(DType dtype) const;
  // The operand as an array of its own dtype.
  Array to_array() const;

 private:
  Array array_;
  double value_ = 0;
  std::optional<DType> literal_;
};

// Axes of a reduction or squeeze: all axes (default), one axis, or a list.
struct Axes {
  std::optional<Ints> axes;  // nullopt: every axis
  Axes() = default;
  Axes(int axis) : axes(Ints{axis}) {}                             // NOLINT
  Axes(int64_t axis) : axes(Ints{axis}) {}                         // NOLINT
  Axes(std::initializer_list<int64_t> list) : axes(Ints(list)) {}  // NOLINT
  Axes(const Ints& list) : axes(list) {}                           // NOLINT
  // The normalised (non-negative, validated) axes for an array of `rank`.
  Ints resolve(int64_t rank, const char* op) const;
};

// ---- dtypes, promotion, broadcasting
DType result_type(const std::vector<ArrayLike>& operands);
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op = "broadcast_shapes");
Array broadcast_to(const Array& x, const Shape& shape);
Array astype(const Array& x, DType dtype);

// ---- creation (float32 by default, like jnp)
Array zeros(const Shape& shape, DType dtype = DType::f32);
Array ones(const Shape& shape, DType dtype = DType::f32);
Array full(const Shape& shape, double value, DType dtype = DType::f32);
Array zeros_like(const Array& x);
Array ones_like(const Array& x);
Array full_like(const Array& x, double value);
Array arange_impl(double start, double stop, double step, DType dtype);
// arange(stop), arange(start, stop[, step]): integers give int32, floats float32.
template <class T>
requires std::is_arithmetic_v<T> Array arange(T start, T stop, T step = T(1),
                                              std::optional<DType> dtype = std::nullopt) {
  DType d = dtype ? *dtype : (std::is_integral_v<T> ? DType::i32 : DType::f32);
  return arange_impl(double(start), double(stop), double(step), d);
}
template <class T>
requires std::is_arithmetic_v<T> Array arange(T stop) { return arange<T>(T(0), stop); }
Array linspace(double start, double stop, int64_t num = 50, bool endpoint = true, DType dtype = DType::f32);
// N x M matrix with ones on diagonal k.
Array eye(int64_t n, std::optional<int64_t> m = std::nullopt, int64_t k = 0, DType dtype = DType::f32);
Array tril(const Array& x, int64_t k = 0);
Array triu(const Array& x, int64_t k = 0);

// ---- elementwise math (integer inputs of float functions promote to float32)
Array add(const ArrayLike& a, const ArrayLike& b);
Array subtract(const ArrayLike& a, const ArrayLike& b);
Array multiply(const ArrayLike& a, const ArrayLike& b);
Array divide(const ArrayLike& a, const ArrayLike& b);  // true division: integers give float32
Array floor_divide(const ArrayLike& a, const ArrayLike& b);
Array remainder(const ArrayLike& a, const ArrayLike& b);  // sign of the divisor (Python %)
Array power(const ArrayLike& a, const ArrayLike& b);
Array maximum(const ArrayLike& a, const ArrayLike& b);
Array minimum(const ArrayLike& a, const ArrayLike& b);
Array equal(const ArrayLike& a, const ArrayLike& b);
Array not_equal(const ArrayLike& a, const ArrayLike& b);
Array less(const ArrayLike& a, const ArrayLike& b);
Array less_equal(const ArrayLike& a, const ArrayLike& b);
Array greater(const ArrayLike& a, const ArrayLike& b);
Array greater_equal(const ArrayLike& a, const ArrayLike& b);
Array logical_and(const ArrayLike& a, const ArrayLike& b);
Array logical_or(const ArrayLike& a, const ArrayLike& b);
Array logical_xor(const ArrayLike& a, const ArrayLike& b);
Array logical_not(const ArrayLike& x);
Array bitwise_and(const ArrayLike& a, const ArrayLike& b);
Array bitwise_or(const ArrayLike& a, const ArrayLike& b);
Array bitwise_xor(const ArrayLike& a, const ArrayLike& b);
Array where(const ArrayLike& condition, const ArrayLike& x, const ArrayLike& y);
Array clip(const ArrayLike& x, std::optional<ArrayLike> lo, std::optional<ArrayLike> hi);

Array negative(const Array& x);
Array abs(const Array& x);
Array sign(const Array& x);
Array square(const Array& x);
Array reciprocal(const Array& x);
Array exp(const Array& x);
Array expm1(const Array& x);
Array log(const Array& x);
Array log1p(const Array& x);
Array sqrt(const Array& x);
Array rsqrt(const Array& x);
Array cbrt(const Array& x);
Array tanh(const Array& x);
Array sin(const Array& x);
Array cos(const Array& x);
Array erf(const Array& x);
Array floor(const Array& x);
Array ceil(const Array& x);
Array round(const Array& x);  // half to even, as numpy
Array isfinite(const Array& x);
Array isnan(const Array& x);
Array isinf(const Array& x);

Array operator+(const ArrayLike& a, const ArrayLike& b);
Array operator-(const ArrayLike& a, const ArrayLike& b);
Array operator*(const ArrayLike& a, const ArrayLike& b);
Array operator/(const ArrayLike& a, const ArrayLike& b);
Array operator-(const Array& x);
Array operator<(const ArrayLike& a, const ArrayLike& b);
Array operator<=(const ArrayLike& a, const ArrayLike& b);
Array operator>(const ArrayLike& a, const ArrayLike& b);
Array operator>=(const ArrayLike& a, const ArrayLike& b);
Array operator&(const ArrayLike& a, const ArrayLike& b);
Array operator|(const ArrayLike& a, const ArrayLike& b);
Array operator^(const ArrayLike& a, const ArrayLike& b);
Array operator!(const Array& x);

// ---- reductions
Array sum(const Array& x, const Axes& axes = {}, bool keepdims = false);
Array prod(const Array& x, const Axes& axes = {}, bool keepdims = false);
Array max(const Array& x, const Axes& axes = {}, bool keepdims = false);
Array min(const Array& x, const Axes& axes = {}, bool keepdims = false);
Array all(const Array& x, const Axes& axes = {}, bool keepdims = false);
Array any(const Array& x, const Axes& axes = {}, bool keepdims = false);
// mean / var / std compute in at least float32 and return the input's float dtype.
Array mean(const Array& x, const Axes& axes = {}, bool keepdims = false);
Array var(const Array& x, const Axes& axes = {}, bool keepdims = false, int64_t ddof = 0);
Array std(const Array& x, const Axes& axes = {}, bool keepdims = false, int64_t ddof = 0);
// Without an axis the array is flattened first (numpy).
Array argmax(const Array& x, std::optional<int64_t> axis = std::nullopt, bool keepdims = false);
Array argmin(const Array& x, std::optional<int64_t> axis = std::nullopt, bool keepdims = false);
Array cumsum(const Array& x, std::optional<int64_t> axis = std::nullopt);

// ---- shape manipulation
Array reshape(const Array& x, const Ints& shape);  // one entry may be -1
Array ravel(const Array& x);
Array transpose(const Array& x, std::optional<Ints> axes = std::nullopt);  // default: reverse
Array swapaxes(const Array& x, int64_t a, int64_t b);
Array moveaxis(const Array& x, int64_t source, int64_t destination);
Array expand_dims(const Array& x, const Ints& axes);
Array squeeze(const Array& x, const Axes& axes = {});  // default: every size-1 axis
Array concatenate(const std::vector<Array>& arrays, int64_t axis = 0);
Array stack(const std::vector<Array>& arrays, int64_t axis = 0);
// Into `sections` equal parts along axis (must divide evenly).
std::vector<Array> split(const Array& x, int64_t sections, int64_t axis = 0);
// At the given indices along axis (numpy array_split by indices).
std::vector<Array> split(const Array& x, const Ints& indices, int64_t axis = 0);
Array flip(const Array& x, const Axes& axes = {});
// x[start:stop:step] along one axis (negative start/stop count from the end).
Array slice_along(const Array& x, int64_t axis, int64_t start, std::optional<int64_t> stop = std::nullopt,
                  int64_t step = 1);
// numpy.pad with a constant: (before, after) per axis.
Array pad(const Array& x, const std::vector<std::pair<int64_t, int64_t>>& pad_width, double value = 0.0);

// ---- indexing. Negative indices count from the end; indices still out of
// range are clamped (JAX's "clip" gather mode), never read out of bounds.
Array take(const Array& x, const Array& indices, std::optional<int64_t> axis = std::nullopt);
Array take_along_axis(const Array& x, const Array& indices, int64_t axis);

// ---- sorting
Array sort(const Array& x, int64_t axis = -1);
Array argsort(const Array& x, int64_t axis = -1, bool descending = false);

// ---- linear algebra
// numpy matmul: 1-D operands are promoted and the axis removed; batch axes broadcast.
Array matmul(const ArrayLike& a, const ArrayLike& b);
Array dot(const Array& a, const Array& b);
Array outer(const Array& a, const Array& b);
// einsum over one or two operands: "ij,jk->ik", "bthd,bshd->bhts", "...d,df->...f",
// "ij->ji", "ii->"is not supported (no repeated letters within an operand).
Array einsum(const std::string& subscripts, const Array& a);
Array einsum(const std::string& subscripts, const Array& a, const Array& b,
             std::optional<DType> preferred_element_type = std::nullopt);

}  // namespace pax
