// The CUDA backend's kernels, by primitive: each queues its work on the
// stream of the KernelContext it is given (pax/backend/kernel.h).
#pragma once

#include "pax/backend/kernel.h"
#include "pax/ir/jaxpr.h"
#include "pax/ir/prims.h"

namespace pax::cuda {

// The kernel of `prim` on a CUDA device, or nullptr where there is none yet
// (eager execution then names the primitive and the backend).
KernelFn cuda_kernel(Prim prim);

// Whether the CUDA kernel of `eqn` computes it as typed (Backend::supports_op).
bool cuda_supports_op(const Jaxpr& jaxpr, const Eqn& eqn);

}  // namespace pax::cuda
