// Dtype classes that primitives accept, and the check that names them in errors.
#pragma once

#include "pax/core/shape.h"
#include "pax/ir/prims.h"

namespace pax {

bool accepts(Accepts a, DType d);
// "a floating dtype (bf16, f16, f32, f64)", ...
const char* describe(Accepts a);
// Throws pax::Error "<prim>: operand f32[2] has dtype float32; it requires ..." when
// `x` is not in the class.
void check_accepts(Prim p, Accepts a, const AVal& x);

}  // namespace pax
