// CPU kernels of the indexing primitives, gather and scatter_add: the
// dimension numbers read from the parameters (validated by the shape rules)
// for the drivers of gather.h.
#include "pax/backend/cpu/gather.h"
#include "pax/backend/cpu/kernels.h"
#include "pax/prims/indexing_params.h"

namespace pax::cpu {
namespace {

void gather_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                   std::span<const TensorView> out) {
  cpu::gather(gather_spec(p), in[0], in[1], out[0]);
}

void scatter_add_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                        std::span<const TensorView> out) {
  cpu::scatter_add(ctx, scatter_spec(p), in[0], in[1], in[2], out[0]);
}

}  // namespace

void register_indexing_kernels(CpuKernelTable& t) {
  t[size_t(Prim::gather)] = gather_kernel;
  t[size_t(Prim::scatter_add)] = scatter_add_kernel;
}

}  // namespace pax::cpu
