// The windows of reduce_window_max, select_and_scatter_add and
// select_and_gather_add read from their Params: the shape rules (window.cc)
// and the backends' kernels both need them.
#pragma once

#include "pax/core/shape.h"
#include "pax/ir/params.h"
#include "pax/ir/prims.h"

namespace pax {

// One entry per operand axis; padding split into lo and hi.
struct Window {
  Ints dims, strides;
  Ints lo, hi;
};

// The window of `prim` over operand `x`; throws pax::Error naming the
// primitive and the operand when the parameters do not fit it.
Window window_of(Prim prim, const AVal& x, const Params& p);

}  // namespace pax
