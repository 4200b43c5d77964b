// Small helpers for writing VJP / JVP rules with lax ops. Undefined Arrays
// are symbolic zeros throughout.
#pragma once

#include <vector>

#include "pax/core/array.h"
#include "pax/ops/lax.h"

namespace pax::ad {

// A value of x's shape and dtype filled with v.
inline Array full_like(const Array& x, double v) {
  return lax::broadcast_in_dim(scalar(v, x.dtype()), x.shape().dims(), {});
}
inline Array zeros_like(const Array& x) { return full_like(x, 0.0); }

// a + b where either may be a symbolic zero.
inline Array add(const Array& a, const Array& b) {
  if (!a.defined()) return b;
  if (!b.defined()) return a;
  return lax::add(a, b);
}
// ct * factor, zero when ct is zero.
inline Array mul(const Array& ct, const Array& factor) { return ct.defined() ? lax::mul(ct, factor) : Array(); }
inline Array neg(const Array& ct) { return ct.defined() ? lax::neg(ct) : Array(); }
// Materialises a symbolic zero.
inline Array instantiate(const Array& ct, const Array& like) { return ct.defined() ? ct : zeros_like(like); }

// Sums `ct` (of the broadcast shape) back to `shape` over the axes that
// broadcast_in_dim(x, shape(ct), bdims) added or expanded.
Array unbroadcast(const Array& ct, const Shape& shape, const Ints& broadcast_dimensions);

}  // namespace pax::ad
