// Parameters of the shape primitives that both their shape rules
// (shape.cc) and the backends' kernels read.
#pragma once

#include <cstddef>

#include "pax/ir/params.h"

namespace pax {

// slice's steps per dimension; absent or empty `strides` mean 1.
inline Ints slice_strides(const Params& p, size_t rank) {
  if (p.has("strides") && !p.ints("strides").empty()) return p.ints("strides");
  return Ints(rank, 1);
}

}  // namespace pax
