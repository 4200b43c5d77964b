// numpy-level reductions: sum / prod / max / min / all / any / mean / var /
// std with axes and keepdims, argmax / argmin, cumsum.
#include <cmath>

#include "pax/core/error.h"
#include "pax/ops/numpy.h"

namespace pax {

Ints Axes::resolve(int64_t rank, const char* op) const {
  if (!axes) {
    Ints all(static_cast<size_t>(rank));
    for (int64_t i = 0; i < rank; ++i) all[size_t(i)] = i;
    return all;
  }
  return normalize_axes(*axes, rank, op);
}

namespace {

// Re-inserts size-1 axes where the reduction removed them.
Array keep_dims(const Array& reduced, const Shape& in, const Ints& axes) {
  std::vector<int64_t> shape = in.dims();
  for (int64_t a : axes) shape[size_t(a)] = 1;
  return lax::reshape(reduced, shape);
}

Array finish(const Array& reduced, const Array& x, const Ints& axes, bool keepdims) {
  return keepdims ? keep_dims(reduced, x.shape(), axes) : reduced;
}

// Sums of bool count as int32, of u8 as u32 (as jnp does).
Array sum_input(const Array& x) {
  if (x.dtype() == DType::bool_) return x.astype(DType::i32);
  if (x.dtype() == DType::u8) return x.astype(DType::u32);
  return x;
}

void check_nonempty(const Array& x, const Ints& axes, const char* op) {
  for (int64_t a : axes) {
    PAX_CHECK(x.dim(a) != 0, op, ": zero-size axis ", a, " of ", x.aval().str(), " has no identity for this reduction");
  }
}

int64_t count(const Array& x, const Ints& axes) {
  int64_t n = 1;
  for (int64_t a : axes) n *= x.dim(a);
  return n;
}

}  // namespace

Array sum(const Array& x, const Axes& axes, bool keepdims) {
  Ints ax = axes.resolve(x.ndim(), "sum");
  return finish(lax::reduce_sum(sum_input(x), ax), x, ax, keepdims);
}

Array prod(const Array& x, const Axes& axes, bool keepdims) {
  Ints ax = axes.resolve(x.ndim(), "prod");
  return finish(lax::reduce_prod(sum_input(x), ax), x, ax, keepdims);
}

Array max(const Array& x, const Axes& axes, bool keepdims) {
  Ints ax = axes.resolve(x.ndim(), "max");
  check_nonempty(x, ax, "max");
  return finish(lax::reduce_max(x, ax), x, ax, keepdims);
}

Array min(const Array& x, const Axes& axes, bool keepdims) {
  Ints ax = axes.resolve(x.ndim(), "min");
  check_nonempty(x, ax, "min");
  return finish(lax::reduce_min(x, ax), x, ax, keepdims);
}

Array all(const Array& x, const Axes& axes, bool keepdims) {
  Ints ax = axes.resolve(x.ndim(), "all");
  return finish(lax::reduce_and(x.astype(DType::bool_), ax), x, ax, keepdims);
}

Array any(const Array& x, const Axes& axes, bool keepdims) {
  Ints ax = axes.resolve(x.ndim(), "any");
  return finish(lax::reduce_or(x.astype(DType::bool_), ax), x, ax, keepdims);
}

Array mean(const Array& x, const Axes& axes, bool keepdims) {
  Ints ax = axes.resolve(x.ndim(), "mean");
  const DType out = is_floating(x.dtype()) ? x.dtype() : DType::f32;
  const DType compute = out == DType::f64 ? DType::f64 : DType::f32;
  Array s = lax::reduce_sum(x.astype(compute), ax);
  Array m = lax::div(s, full(s.shape(), double(count(x, ax)), compute));
  return finish(m.astype(out), x, ax, keepdims);
}

Array var(const Array& x, const Axes& axes, bool keepdims, int64_t ddof) {
  Ints ax = axes.resolve(x.ndim(), "var");
  const DType out = is_floating(x.dtype()) ? x.dtype() : DType::f32;
  const DType compute = out == DType::f64 ? DType::f64 : DType::f32;
  Array xc = x.astype(compute);
  Array centered = subtract(xc, mean(xc, Ints(ax), true));
  Array s = lax::reduce_sum(lax::mul(centered, centered), ax);
  const double n = double(count(x, ax) - ddof);
  Array v = lax::div(s, full(s.shape(), n, compute));
  return finish(v.astype(out), x, ax, keepdims);
}

Array std(const Array& x, const Axes& axes, bool keepdims, int64_t ddof) { return sqrt(var(x, axes, keepdims, ddof)); }

namespace {
Array arg_reduce(const Array& x, std::optional<int64_t> axis, bool keepdims, bool is_max, const char* op) {
  if (!axis) {
    Array flat = lax::reshape(x, {x.size()});
    Array r = arg_reduce(flat, 0, false, is_max, op);
    if (!keepdims) return r;
    return lax::reshape(r, Ints(size_t(x.ndim()), 1));
  }
  const int64_t a = normalize_axis(*axis, x.ndim(), op);
  PAX_CHECK(x.dim(a) != 0, op, ": attempt to get ", op, " of an empty axis (axis ", a, " of ", x.aval().str(), ")");
  Array r = is_max ? lax::argmax(x, a) : lax::argmin(x, a);
  return keepdims ? keep_dims(r, x.shape(), {a}) : r;
}
}  // namespace

Array argmax(const Array& x, std::optional<int64_t> axis, bool keepdims) {
  return arg_reduce(x, axis, keepdims, true, "argmax");
}
Array argmin(const Array& x, std::optional<int64_t> axis, bool keepdims) {
  return arg_reduce(x, axis, keepdims, false, "argmin");
}

Array cumsum(const Array& x, std::optional<int64_t> axis) {
  if (!axis) return lax::cumsum(sum_input(lax::reshape(x, {x.size()})), 0);
  return lax::cumsum(sum_input(x), normalize_axis(*axis, x.ndim(), "cumsum"));
}

}  // namespace pax
