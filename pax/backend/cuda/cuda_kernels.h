// The CUDA backend's kernels, by primitive: each queues its work on the
// stream of the KernelContext it is given (pax/backend/kernel.h). The files
// that hold them (*.cu) register them when the library loads:
//
//   [[maybe_unused]] const bool kRegistered =
//       register_cuda_kernels({{Prim::iota, iota_kernel}});
#pragma once

#include <initializer_list>
#include <utility>
#include <vector>

#include "pax/backend/kernel.h"
#include "pax/ir/jaxpr.h"
#include "pax/ir/prims.h"

namespace pax::cuda {

// The kernel of `prim` on a CUDA device, or nullptr where there is none yet
// (eager execution then names the primitive and the backend).
KernelFn cuda_kernel(Prim prim);

// Adds kernels to the table (a primitive registered twice is a pax::Error);
// returns true.
bool register_cuda_kernels(std::initializer_list<std::pair<Prim, KernelFn>> kernels);

// out = transpose(in, perm) on ctx's stream (out contiguous, of shape
// in[perm]): the transpose primitive's kernel, for other kernels' copies.
void transpose_into(const KernelContext& ctx, const TensorView& in, const TensorView& out,
                    const std::vector<int64_t>& perm);

// The generated kernel an elementwise primitive runs eagerly on operands
// like `in` into `out` (kernels_elementwise.cc); pax::Error naming what the
// renderer lacks where it has no kernel for them.
struct CudaKernelSource;  // cuda_kernels_source.h
CudaKernelSource elementwise_kernel_source(Prim prim, const Params& params, std::span<const TensorView> in,
                                           std::span<const TensorView> out);

}  // namespace pax::cuda
