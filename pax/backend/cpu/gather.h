// CPU kernels of the index-driven primitives: XLA gather and scatter-add, with
// the index vector on the last axis of `indices`. The dimension numbers are
// validated by the shape rules (pax/prims/indexing.cc) before these run.
#pragma once

#include "pax/backend/kernel.h"
#include "pax/prims/indexing_params.h"  // the dimension numbers

namespace pax::cpu {

using ::pax::GatherSpec;
using ::pax::ScatterSpec;

// out = gather(operand, indices); `out` is preallocated with the output shape.
// Parallel over the output; each output element is written once.
void gather(const GatherSpec& spec, const TensorView& operand, const TensorView& indices, const TensorView& out);

// out = operand with every in-bounds update window added at its start index;
// windows that would leave the operand are dropped. Each output element
// receives its contributions in update order whatever the thread count, so
// the result is bit-identical for any number of threads. Its window tables
// are scratch from ctx.
void scatter_add(const KernelContext& ctx, const ScatterSpec& spec, const TensorView& operand,
                 const TensorView& indices, const TensorView& updates, const TensorView& out);

}  // namespace pax::cpu
