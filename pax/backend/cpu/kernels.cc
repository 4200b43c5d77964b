// Builds the CPU kernel table once from the family registration functions.
#include "pax/backend/cpu/kernels.h"

namespace pax::cpu {
namespace {

CpuKernelTable build_table() {
  CpuKernelTable t{};
  register_elementwise_kernels(t);
  register_reduce_kernels(t);
  register_shape_kernels(t);
  register_indexing_kernels(t);
  register_dot_kernels(t);
  register_conv_kernels(t);
  register_window_kernels(t);
  register_sort_kernels(t);
  register_random_kernels(t);
  register_attention_kernels(t);
  return t;
}

}  // namespace

KernelFn cpu_kernel(Prim prim) {
  static const CpuKernelTable table = build_table();
  return table[size_t(prim)];
}

}  // namespace pax::cpu
