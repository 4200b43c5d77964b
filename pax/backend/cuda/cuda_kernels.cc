// The table of CUDA kernels by primitive, filled by the kernel files as the
// library loads.
#include "pax/backend/cuda/cuda_kernels.h"

#include <array>
#include <atomic>

#include "pax/core/error.h"

namespace pax::cuda {
namespace {

using Table = std::array<std::atomic<KernelFn>, kNumPrims>;

Table& table() {
  static Table t{};
  return t;
}

}  // namespace

KernelFn cuda_kernel(Prim prim) { return table()[size_t(prim)].load(std::memory_order_acquire); }

bool register_cuda_kernels(std::initializer_list<std::pair<Prim, KernelFn>> kernels) {
  for (const auto& [prim, fn] : kernels) {
    KernelFn expected = nullptr;
    PAX_CHECK(table()[size_t(prim)].compare_exchange_strong(expected, fn), "cuda: a second kernel for ",
              prim_name(prim));
  }
  return true;
}

void transpose_into(const KernelContext& ctx, const TensorView& in, const TensorView& out,
                    const std::vector<int64_t>& perm) {
  const KernelFn transpose = cuda_kernel(Prim::transpose);
  PAX_CHECK(transpose, "cuda: no transpose kernel");
  const Params params{{"permutation", Ints(perm.begin(), perm.end())}};
  const TensorView ins[] = {in}, outs[] = {out};
  transpose(ctx, params, std::span<const TensorView>(ins), std::span<const TensorView>(outs));
}

}  // namespace pax::cuda
