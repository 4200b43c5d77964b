// Array creation: zeros / ones / full (broadcast of a scalar), arange and
// linspace (iota arithmetic), eye, tril / triu.
#include <cmath>

#include "pax/core/error.h"
#include "pax/ops/numpy.h"

namespace pax {

Array full(const Shape& shape, double value, DType dtype) {
  for (int64_t d : shape) PAX_CHECK(d >= 0, "full: negative dimension in shape ", shape);
  return lax::broadcast_in_dim(scalar(value, dtype), shape.dims(), {});
}
Array zeros(const Shape& shape, DType dtype) { return full(shape, 0.0, dtype); }
Array ones(const Shape& shape, DType dtype) { return full(shape, 1.0, dtype); }
Array zeros_like(const Array& x) { return full(x.shape(), 0.0, x.dtype()); }
Array ones_like(const Array& x) { return full(x.shape(), 1.0, x.dtype()); }
Array full_like(const Array& x, double value) { return full(x.shape(), value, x.dtype()); }

Array arange_impl(double start, double stop, double step, DType dtype) {
  PAX_CHECK(step != 0, "arange: step must not be zero");
  PAX_CHECK(std::isfinite(start) && std::isfinite(stop) && std::isfinite(step),
            "arange: start, stop and step must be finite");
  const int64_t n = std::max<int64_t>(0, int64_t(std::ceil((stop - start) / step)));
  // Integers are exact in their own dtype; floats are computed in f64 and rounded once.
  const DType compute = is_floating(dtype) ? DType::f64 : dtype;
  Array i = lax::iota(compute, {n}, 0);
  Array v = lax::add(lax::mul(i, full({n}, step, compute)), full({n}, start, compute));
  return v.astype(dtype);
}

Array linspace(double start, double stop, int64_t num, bool endpoint, DType dtype) {
  PAX_CHECK(num >= 0, "linspace: num must be >= 0, got ", num);
  const int64_t div = endpoint ? num - 1 : num;
  const double step = div > 0 ? (stop - start) / double(div) : 0.0;
  Array i = lax::iota(DType::f64, {num}, 0);
  Array v = lax::add(lax::mul(i, full({num}, step, DType::f64)), full({num}, start, DType::f64));
  if (endpoint && num > 1) {
    // The last value is exactly `stop`.
    v = lax::select_n(lax::eq(i, full({num}, double(num - 1), DType::f64)), {v, full({num}, stop, DType::f64)});
  }
  return v.astype(dtype);
}

Array eye(int64_t n, std::optional<int64_t> m, int64_t k, DType dtype) {
  const int64_t cols = m.value_or(n);
  PAX_CHECK(n >= 0 && cols >= 0, "eye: sizes must be >= 0, got ", n, " x ", cols);
  Array rows = lax::iota(DType::i64, {n, cols}, 0);
  Array col = lax::iota(DType::i64, {n, cols}, 1);
  return lax::eq(lax::add(rows, full({n, cols}, double(k), DType::i64)), col).astype(dtype);
}

namespace {
// Mask over the last two axes of x: keep where row + k >= col (tril) or <= (triu).
Array triangle(const Array& x, int64_t k, bool lower, const char* op) {
  PAX_CHECK(x.ndim() >= 2, op, ": needs an array of rank >= 2, got ", x.aval().str());
  const int64_t r = x.dim(-2), c = x.dim(-1);
  Array rows = lax::add(lax::iota(DType::i64, {r, c}, 0), full({r, c}, double(k), DType::i64));
  Array cols = lax::iota(DType::i64, {r, c}, 1);
  Array mask = lower ? lax::ge(rows, cols) : lax::le(rows, cols);
  return where(broadcast_to(mask, x.shape()), x, zeros_like(x));
}
}  // namespace

Array tril(const Array& x, int64_t k) { return triangle(x, k, true, "tril"); }
Array triu(const Array& x, int64_t k) { return triangle(x, k, false, "triu"); }

}  // namespace pax
