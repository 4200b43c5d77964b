// numpy-level elementwise functions: operand promotion (with weak literals),
// broadcasting, arithmetic, comparisons, logic, where / clip, unary math and
// the Array operators.
#include <cmath>
#include <limits>

#include "pax/core/error.h"
#include "pax/ops/numpy.h"

namespace pax {

// ---------------------------------------------------------------------------
// ArrayLike

WeakDType ArrayLike::weak_dtype() const {
  if (literal_) return {*literal_, *literal_ != DType::bool_};
  PAX_CHECK(array_.defined(), "use of an empty Array as an operand");
  return {array_.dtype(), array_.weak_type()};
}

Array ArrayLike::as(DType dtype) const {
  if (literal_) return scalar(value_, dtype, /*weak_type=*/true);
  if (array_.dtype() == dtype) return array_;
  return lax::convert_element_type(array_, dtype, array_.weak_type());
}

Array ArrayLike::to_array() const { return literal_ ? scalar(value_, *literal_, *literal_ != DType::bool_) : array_; }

Array astype(const Array& x, DType dtype) { return lax::convert_element_type(x, dtype); }

// ---------------------------------------------------------------------------
// promotion and broadcasting

DType result_type(const std::vector<ArrayLike>& operands) {
  PAX_CHECK(!operands.empty(), "result_type: needs at least one operand");
  WeakDType t = operands[0].weak_dtype();
  for (size_t i = 1; i < operands.size(); ++i) t = promote_weak(t, operands[i].weak_dtype());
  return t.dtype;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const int64_t r = std::max(a.rank(), b.rank());
  std::vector<int64_t> out(static_cast<size_t>(r));
  for (int64_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.rank() ? 1 : a[i - (r - a.rank())];
    int64_t db = i < r - b.rank() ? 1 : b[i - (r - b.rank())];
    PAX_CHECK(da == db || da == 1 || db == 1, op, ": operands could not be broadcast together with shapes ", a, " and ",
              b, " (each dimension must be equal or 1, aligned from the right)");
    out[size_t(i)] = da == 1 ? db : da;
  }
  return Shape(out);
}

Array broadcast_to(const Array& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  PAX_CHECK(x.ndim() <= shape.rank(), "broadcast_to: cannot broadcast ", x.aval().str(), " to the lower-rank shape ",
            shape);
  Ints bdims;
  for (int64_t i = 0; i < x.ndim(); ++i) bdims.push_back(shape.rank() - x.ndim() + i);
  return lax::broadcast_in_dim(x, shape.dims(), bdims);
}

namespace {

// Promotes two operands to their common dtype and broadcasts them.
std::pair<Array, Array> promote2(const ArrayLike& a, const ArrayLike& b, const char* op) {
  WeakDType t = promote_weak(a.weak_dtype(), b.weak_dtype());
  Array x = a.as(t.dtype);
  Array y = b.as(t.dtype);
  Shape s = broadcast_shapes(x.shape(), y.shape(), op);
  return {broadcast_to(x, s), broadcast_to(y, s)};
}

// Like promote2 but integer / bool operands become float32 first.
std::pair<Array, Array> promote2_inexact(const ArrayLike& a, const ArrayLike& b, const char* op) {
  WeakDType t = promote_weak(a.weak_dtype(), b.weak_dtype());
  if (!is_floating(t.dtype)) t.dtype = DType::f32;
  Array x = a.as(t.dtype);
  Array y = b.as(t.dtype);
  Shape s = broadcast_shapes(x.shape(), y.shape(), op);
  return {broadcast_to(x, s), broadcast_to(y, s)};
}

Array to_inexact(const Array& x) {
  return is_floating(x.dtype()) ? x : lax::convert_element_type(x, DType::f32, x.weak_type());
}

Array to_bool(const ArrayLike& x) { return x.as(DType::bool_); }

// Where the truncating remainder r of x / y is non-zero and its sign differs
// from y's: there floor division is one less and Python's % adds y.
Array inexact_with_sign_mismatch(const Array& r, const Array& y) {
  Array zero = lax::broadcast_in_dim(scalar(0.0, r.dtype()), r.shape().dims(), {});
  return lax::bitwise_and(lax::ne(r, zero), lax::ne(lax::lt(r, zero), lax::lt(y, zero)));
}

}  // namespace

// ---------------------------------------------------------------------------
// binary arithmetic

Array add(const ArrayLike& a, const ArrayLike& b) {
  auto [x, y] = promote2(a, b, "add");
  if (x.dtype() == DType::bool_) return lax::bitwise_or(x, y);
  return lax::add(x, y);
}

Array subtract(const ArrayLike& a, const ArrayLike& b) {
  auto [x, y] = promote2(a, b, "subtract");
  PAX_CHECK(x.dtype() != DType::bool_, "subtract: boolean subtract is not supported; use logical_xor");
  return lax::sub(x, y);
}

Array multiply(const ArrayLike& a, const ArrayLike& b) {
  auto [x, y] = promote2(a, b, "multiply");
  if (x.dtype() == DType::bool_) return lax::bitwise_and(x, y);
  return lax::mul(x, y);
}

Array divide(const ArrayLike& a, const ArrayLike& b) {
  auto [x, y] = promote2_inexact(a, b, "divide");
  return lax::div(x, y);
}

Array floor_divide(const ArrayLike& a, const ArrayLike& b) {
  auto [x, y] = promote2(a, b, "floor_divide");
  PAX_CHECK(x.dtype() != DType::bool_, "floor_divide: bool operands are not supported");
  if (is_floating(x.dtype())) return lax::floor(lax::div(x, y));
  if (is_unsigned(x.dtype())) return lax::div(x, y);
  // Truncating division, then one step down where the signs differ and the
  // division was inexact.
  Array adjust = inexact_with_sign_mismatch(lax::rem(x, y), y);
  return lax::sub(lax::div(x, y), lax::convert_element_type(adjust, x.dtype()));
}

Array remainder(const ArrayLike& a, const ArrayLike& b) {
  auto [x, y] = promote2(a, b, "remainder");
  PAX_CHECK(x.dtype() != DType::bool_, "remainder: bool operands are not supported");
  Array r = lax::rem(x, y);
  if (is_unsigned(x.dtype())) return r;
  return lax::select_n(inexact_with_sign_mismatch(r, y), {r, lax::add(r, y)});
}

Array power(const ArrayLike& a, const ArrayLike& b) {
  // Small integral literal exponents use repeated multiplication, like x ** 2 in JAX.
  if (b.is_literal() && !a.is_literal() && b.value() == std::floor(b.value()) && std::fabs(b.value()) <= 64) {
    const Array& x = a.array();
    if (x.dtype() != DType::bool_ && (is_floating(x.dtype()) || b.value() >= 0)) {
      return lax::integer_pow(x, int64_t(b.value()));
    }
  }
  auto [x, y] = promote2(a, b, "power");
  PAX_CHECK(x.dtype() != DType::bool_, "power: bool operands are not supported");
  return lax::pow(x, y);
}

Array maximum(const ArrayLike& a, const ArrayLike& b) {
  auto [x, y] = promote2(a, b, "maximum");
  return lax::max(x, y);
}

Array minimum(const ArrayLike& a, const ArrayLike& b) {
  auto [x, y] = promote2(a, b, "minimum");
  return lax::min(x, y);
}

#define PAX_COMPARE_FN(fn, prim)                     \
  Array fn(const ArrayLike& a, const ArrayLike& b) { \
    auto [x, y] = promote2(a, b, #fn);               \
    return lax::prim(x, y);                          \
  }
PAX_COMPARE_FN(equal, eq)
PAX_COMPARE_FN(not_equal, ne)
PAX_COMPARE_FN(less, lt)
PAX_COMPARE_FN(less_equal, le)
PAX_COMPARE_FN(greater, gt)
PAX_COMPARE_FN(greater_equal, ge)
#undef PAX_COMPARE_FN

#define PAX_LOGICAL_FN(fn, prim)                              \
  Array fn(const ArrayLike& a, const ArrayLike& b) {          \
    Array x = to_bool(a), y = to_bool(b);                     \
    Shape s = broadcast_shapes(x.shape(), y.shape(), #fn);    \
    return lax::prim(broadcast_to(x, s), broadcast_to(y, s)); \
  }
PAX_LOGICAL_FN(logical_and, bitwise_and)
PAX_LOGICAL_FN(logical_or, bitwise_or)
PAX_LOGICAL_FN(logical_xor, bitwise_xor)
#undef PAX_LOGICAL_FN

Array logical_not(const ArrayLike& x) { return lax::bitwise_not(to_bool(x)); }

#define PAX_BITWISE_FN(fn)                                                                                     \
  Array fn(const ArrayLike& a, const ArrayLike& b) {                                                           \
    auto [x, y] = promote2(a, b, #fn);                                                                         \
    PAX_CHECK(!is_floating(x.dtype()), #fn ": operands must be bool or integer, got ", dtype_name(x.dtype())); \
    return lax::fn(x, y);                                                                                      \
  }
PAX_BITWISE_FN(bitwise_and)
PAX_BITWISE_FN(bitwise_or)
PAX_BITWISE_FN(bitwise_xor)
#undef PAX_BITWISE_FN

Array where(const ArrayLike& condition, const ArrayLike& x, const ArrayLike& y) {
  Array c = to_bool(condition);
  WeakDType t = promote_weak(x.weak_dtype(), y.weak_dtype());
  Array a = x.as(t.dtype), b = y.as(t.dtype);
  Shape s = broadcast_shapes(broadcast_shapes(c.shape(), a.shape(), "where"), b.shape(), "where");
  return lax::select_n(broadcast_to(c, s), {broadcast_to(b, s), broadcast_to(a, s)});
}

Array clip(const ArrayLike& x, std::optional<ArrayLike> lo, std::optional<ArrayLike> hi) {
  Array out = x.to_array();
  if (lo) out = maximum(out, *lo);
  if (hi) out = minimum(out, *hi);
  return out;
}

// ---------------------------------------------------------------------------
// unary math

Array negative(const Array& x) {
  PAX_CHECK(x.dtype() != DType::bool_, "negative: bool operands are not supported; use logical_not");
  return lax::neg(x);
}
Array abs(const Array& x) { return x.dtype() == DType::bool_ ? x : lax::abs(x); }
Array sign(const Array& x) { return x.dtype() == DType::bool_ ? x : lax::sign(x); }
Array square(const Array& x) { return lax::integer_pow(x.dtype() == DType::bool_ ? x.astype(DType::i32) : x, 2); }
Array reciprocal(const Array& x) { return divide(1, x); }

#define PAX_FLOAT_FN(fn, prim) \
  Array fn(const Array& x) { return lax::prim(to_inexact(x)); }
PAX_FLOAT_FN(exp, exp)
PAX_FLOAT_FN(expm1, expm1)
PAX_FLOAT_FN(log, log)
PAX_FLOAT_FN(log1p, log1p)
PAX_FLOAT_FN(sqrt, sqrt)
PAX_FLOAT_FN(rsqrt, rsqrt)
PAX_FLOAT_FN(cbrt, cbrt)
PAX_FLOAT_FN(tanh, tanh)
PAX_FLOAT_FN(sin, sin)
PAX_FLOAT_FN(cos, cos)
PAX_FLOAT_FN(erf, erf)
#undef PAX_FLOAT_FN

Array floor(const Array& x) { return is_floating(x.dtype()) ? lax::floor(x) : x; }
Array ceil(const Array& x) { return is_floating(x.dtype()) ? lax::ceil(x) : x; }
Array round(const Array& x) { return is_floating(x.dtype()) ? lax::round(x, lax::RoundingMethod::to_nearest_even) : x; }

Array isfinite(const Array& x) {
  if (is_floating(x.dtype())) return lax::is_finite(x);
  return full(x.shape(), 1, DType::bool_);
}
Array isnan(const Array& x) {
  if (is_floating(x.dtype())) return lax::ne(x, x);
  return full(x.shape(), 0, DType::bool_);
}
Array isinf(const Array& x) {
  if (!is_floating(x.dtype())) return full(x.shape(), 0, DType::bool_);
  return equal(abs(x), std::numeric_limits<double>::infinity());
}

// ---------------------------------------------------------------------------
// operators

Array operator+(const ArrayLike& a, const ArrayLike& b) { return add(a, b); }
Array operator-(const ArrayLike& a, const ArrayLike& b) { return subtract(a, b); }
Array operator*(const ArrayLike& a, const ArrayLike& b) { return multiply(a, b); }
Array operator/(const ArrayLike& a, const ArrayLike& b) { return divide(a, b); }
Array operator-(const Array& x) { return negative(x); }
Array operator<(const ArrayLike& a, const ArrayLike& b) { return less(a, b); }
Array operator<=(const ArrayLike& a, const ArrayLike& b) { return less_equal(a, b); }
Array operator>(const ArrayLike& a, const ArrayLike& b) { return greater(a, b); }
Array operator>=(const ArrayLike& a, const ArrayLike& b) { return greater_equal(a, b); }
Array operator&(const ArrayLike& a, const ArrayLike& b) { return bitwise_and(a, b); }
Array operator|(const ArrayLike& a, const ArrayLike& b) { return bitwise_or(a, b); }
Array operator^(const ArrayLike& a, const ArrayLike& b) { return bitwise_xor(a, b); }
Array operator!(const Array& x) { return logical_not(x); }

}  // namespace pax
