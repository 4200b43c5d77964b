// CPU kernels of the sorting primitives, sort and top_k: the parameters
// unpacked for the drivers of sort.h.
#include "pax/backend/cpu/kernels.h"
#include "pax/backend/cpu/sort.h"

namespace pax::cpu {
namespace {

void sort_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                 std::span<const TensorView> out) {
  cpu::sort(in, out, p.i("dimension"), p.i("num_keys"));
}

void top_k_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                  std::span<const TensorView> out) {
  cpu::top_k(in[0], p.i("k"), out[0], out[1]);
}

}  // namespace

void register_sort_kernels(CpuKernelTable& t) {
  t[size_t(Prim::sort)] = sort_kernel;
  t[size_t(Prim::top_k)] = top_k_kernel;
}

}  // namespace pax::cpu
