// The CPU backend's kernels, one entry per primitive (nullptr where the
// primitive has none: buffer-sharing reshapes, control flow, collectives).
// Each family of primitives fills its entries in one file,
// kernels_<family>.cc, beside the shape rules of pax/prims/<family>.cc that
// fix what the kernels receive; kernels.cc builds the table once.
#pragma once

#include <array>

#include "pax/backend/kernel.h"
#include "pax/ir/prims.h"

namespace pax::cpu {

using CpuKernelTable = std::array<KernelFn, kNumPrims>;

// The kernel that runs `prim` on the CPU, or nullptr when it has none.
KernelFn cpu_kernel(Prim prim);

// Family registration functions (see the file comment).
void register_elementwise_kernels(CpuKernelTable& t);
void register_reduce_kernels(CpuKernelTable& t);
void register_shape_kernels(CpuKernelTable& t);
void register_indexing_kernels(CpuKernelTable& t);
void register_dot_kernels(CpuKernelTable& t);
void register_conv_kernels(CpuKernelTable& t);
void register_window_kernels(CpuKernelTable& t);
void register_sort_kernels(CpuKernelTable& t);
void register_random_kernels(CpuKernelTable& t);
void register_attention_kernels(CpuKernelTable& t);

}  // namespace pax::cpu
