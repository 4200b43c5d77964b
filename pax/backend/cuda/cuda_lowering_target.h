// What the CUDA backend answers the compiler (compile/lowering_target.h):
// the products cuBLASLt multiplies as typed, and the reductions, loops and
// row sweeps that its generated kernels (cuda_kernels_source.h) render.
#pragma once

#include "pax/compile/lowering_target.h"

namespace pax::cuda {

const LoweringTarget& cuda_lowering_target();

}  // namespace pax::cuda
