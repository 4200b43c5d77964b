// Kernels that write their output without reading an input: iota.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "pax/backend/cuda/cuda_check.h"
#include "pax/backend/cuda/cuda_kernels.h"

namespace pax::cuda {
namespace {

template <class T>
__device__ T from_index(int64_t v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16_rn(float(v));
  else if constexpr (std::is_same_v<T, __half>) return __float2half_rn(float(v));
  else return T(v);
}

// out[r * inner + j] = r % n, over outer * n rows of `inner` elements.
template <class T>
__global__ void iota_rows(T* out, int64_t total, int64_t n, int64_t inner) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_index<T>((i / inner) % n);
}

template <class T>
void launch_iota(const TensorView& y, int64_t n, int64_t inner, cudaStream_t stream) {
  const int64_t total = y.numel();
  if (total == 0) return;
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, 65535);
  iota_rows<T><<<unsigned(blocks), threads, 0, stream>>>(y.as<T>(), total, n, inner);
  PAX_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

namespace {

void iota_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView>,
                 std::span<const TensorView> out) {
  const TensorView& y = out[0];
  const int64_t dim = p.i("dimension");
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < y.rank(); ++d) inner *= y.dim(d);
  const int64_t n = y.dim(dim);
  const auto stream = static_cast<cudaStream_t>(ctx.stream);
  switch (y.dtype) {
    case DType::f32: return launch_iota<float>(y, n, inner, stream);
    case DType::f64: return launch_iota<double>(y, n, inner, stream);
    case DType::bf16: return launch_iota<__nv_bfloat16>(y, n, inner, stream);
    case DType::f16: return launch_iota<__half>(y, n, inner, stream);
    case DType::i32: return launch_iota<int32_t>(y, n, inner, stream);
    case DType::i64: return launch_iota<int64_t>(y, n, inner, stream);
    case DType::u32: return launch_iota<uint32_t>(y, n, inner, stream);
    case DType::u8: return launch_iota<uint8_t>(y, n, inner, stream);
    default: PAX_FAIL("iota: no CUDA kernel for ", dtype_name(y.dtype));
  }
}

[[maybe_unused]] const bool kRegistered = register_cuda_kernels({{Prim::iota, iota_kernel}});

}  // namespace

}  // namespace pax::cuda
