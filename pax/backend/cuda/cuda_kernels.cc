// The table of CUDA kernels by primitive, filled by the kernel files as the
// library loads.
#include "pax/backend/cuda/cuda_kernels.h"

#include <array>
#include <atomic>

#include "pax/backend/cpu/kernels.h"
#include "pax/backend/cuda/cuda_check.h"
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

void run_cuda_kernel(Prim prim, const KernelContext& ctx, const Params& params, std::initializer_list<TensorView> in,
                     std::initializer_list<TensorView> out) {
  const KernelFn kernel = cuda_kernel(prim);
  PAX_CHECK(kernel, "cuda: no ", prim_name(prim), " kernel");
  kernel(ctx, params, std::span<const TensorView>(in.begin(), in.size()),
         std::span<const TensorView>(out.begin(), out.size()));
}

void run_on_host(Prim prim, const KernelContext& ctx, const Params& params, std::span<const TensorView> in,
                 std::span<const TensorView> out) {
  const KernelFn kernel = cpu::cpu_kernel(prim);
  PAX_CHECK(kernel, "cuda: ", prim_name(prim), " has no kernel on the host either");
  const cudaStream_t stream = static_cast<cudaStream_t>(ctx.stream);
  std::vector<std::vector<char>> host;
  std::vector<TensorView> host_in, host_out;
  for (const TensorView& v : in) {
    host.emplace_back(v.nbytes());
    PAX_CUDA_CHECK(cudaMemcpyAsync(host.back().data(), v.data, v.nbytes(), cudaMemcpyDeviceToHost, stream));
    host_in.push_back(TensorView{host.back().data(), v.shape, v.dtype});
  }
  for (const TensorView& v : out) {
    PAX_CHECK(!v.strides, "cuda: ", prim_name(prim), " on the host writes no strided results");
    host.emplace_back(v.nbytes());
    host_out.push_back(TensorView{host.back().data(), v.shape, v.dtype});
  }
  PAX_CUDA_CHECK(cudaStreamSynchronize(stream));
  kernel(host_kernel_context(), params, host_in, host_out);
  for (size_t i = 0; i < out.size(); ++i) {
    PAX_CUDA_CHECK(cudaMemcpyAsync(out[i].data, host_out[i].data, out[i].nbytes(), cudaMemcpyHostToDevice, stream));
  }
  PAX_CUDA_CHECK(cudaStreamSynchronize(stream));  // the host copies go when this returns
}

void transpose_into(const KernelContext& ctx, const TensorView& in, const TensorView& out,
                    const std::vector<int64_t>& perm) {
  run_cuda_kernel(Prim::transpose, ctx, Params{{"permutation", Ints(perm.begin(), perm.end())}}, {in}, {out});
}

const Shape* KernelScratch::keep_shape(const std::vector<int64_t>& dims) {
  shapes_.emplace_back(Ints(dims.begin(), dims.end()));
  return &shapes_.back();
}

TensorView KernelScratch::allocate(const std::vector<int64_t>& dims, DType dtype) {
  const Shape* shape = keep_shape(dims);
  return TensorView{temps_.allocate(shape->numel(), dtype), shape, dtype};
}

TensorView KernelScratch::transposed(const TensorView& x, const std::vector<int64_t>& perm) {
  std::vector<int64_t> dims;
  for (int64_t a : perm) dims.push_back(x.dim(a));
  const TensorView out = allocate(dims, x.dtype);
  transpose_into(ctx_, x, out, perm);
  return out;
}

TensorView KernelScratch::converted(const TensorView& x, DType dtype) {
  const TensorView out = allocate(x.shape->dims(), dtype);
  run_cuda_kernel(Prim::convert_element_type, ctx_, Params{{"new_dtype", dtype}, {"weak_type", false}}, {x}, {out});
  return out;
}

TensorView KernelScratch::reshaped(const TensorView& x, const std::vector<int64_t>& dims) {
  const Shape* shape = keep_shape(dims);
  PAX_CHECK(shape->numel() == x.shape->numel(), "cuda: reshaping ", x.shape->numel(), " elements to ", shape->numel());
  return TensorView{x.data, shape, x.dtype};
}

}  // namespace pax::cuda
