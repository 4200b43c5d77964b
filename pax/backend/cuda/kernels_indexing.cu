// CUDA kernels of the index-driven primitives: gather, scatter_add and
// select_n. Indices and selectors are read on the device; the index
// arithmetic is in layout_index_math.h.
//
// scatter_add is deterministic without atomics and matches the CPU bit for
// bit: every update element gets its target offset (windows that leave the
// operand are dropped), the (target, update offset) pairs are sorted by
// target with CUB's stable radix sort, which keeps the update order among
// equal targets, and one thread per target adds its run, in that order, to
// the operand's value, rounding after each addition as the CPU does.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>

#include "pax/backend/cuda/cuda_check.h"
#include "pax/backend/cuda/cuda_kernels.h"
#include "pax/backend/cuda/kernel_launch.cuh"
#include "pax/backend/cuda/layout_index_math.h"
#include "pax/prims/indexing_params.h"

namespace pax::cuda {
namespace {

using layout::GatherMap;
using layout::ScatterMap;

// Calls f(I{}) with the C++ type of an index dtype.
template <class F>
void visit_index(const char* op, DType dtype, F&& f) {
  switch (dtype) {
    case DType::u8: return f(uint8_t{});
    case DType::u32: return f(uint32_t{});
    case DType::i32: return f(int32_t{});
    case DType::i64: return f(int64_t{});
    default: break;
  }
  PAX_FAIL(op, ": indices must have an integer dtype (u8, u32, i32, i64), got ", dtype_name(dtype));
}

// ---------------------------------------------------------------------------
// gather

template <class T, class I>
__global__ void gather_elements(T* out, const T* operand, const I* indices, GatherMap m, T fill, int64_t n) {
  PAX_GRID_STRIDE(i, n) {
    const int64_t src = layout::gather_source(m, indices, i);
    out[i] = src < 0 ? fill : operand[src];
  }
}

void gather_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                   std::span<const TensorView> out) {
  const TensorView& x = in[0];
  const TensorView& idx = in[1];
  const TensorView& y = out[0];
  const int64_t n = y.numel();
  if (n == 0) return;
  const GatherSpec spec = gather_spec(p);
  const GatherMap m = layout::gather_map(spec, *x.shape, *idx.shape, *y.shape);
  // The fill value converted on the host by the CPU's rules.
  uint64_t fill_bits = 0;
  convert_host(DType::f64, &spec.fill_value, y.dtype, &fill_bits, 1);
  visit_width("gather", y.dtype, [&](auto w) {
    using T = decltype(w);
    T fill;
    std::memcpy(&fill, &fill_bits, sizeof(T));
    visit_index("gather", idx.dtype, [&](auto i) {
      using I = decltype(i);
      gather_elements<T, I>
          <<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(y.as<T>(), x.as<const T>(), idx.as<const I>(), m, fill, n);
    });
  });
  PAX_CUDA_CHECK(cudaGetLastError());
}

// ---------------------------------------------------------------------------
// scatter_add

// keys[i] = target of update element i (`dropped` when its window leaves the
// operand), offsets[i] = its offset in updates.
template <class I>
__global__ void scatter_targets(uint64_t* keys, uint64_t* offsets, const I* indices, ScatterMap m, uint64_t dropped,
                                int64_t n) {
  PAX_GRID_STRIDE(i, n) {
    const layout::ScatterItem item = layout::scatter_item(m, indices, i);
    keys[i] = item.target < 0 ? dropped : uint64_t(item.target);
    offsets[i] = uint64_t(item.update);
  }
}

// The first element of each run of equal keys adds the run in order.
template <class T>
__global__ void add_runs(T* out, const T* updates, const uint64_t* keys, const uint64_t* offsets, uint64_t dropped,
                         int64_t n) {
  PAX_GRID_STRIDE(i, n) {
    const uint64_t t = keys[i];
    if (t == dropped || (i > 0 && keys[i - 1] == t)) continue;
    T acc = out[t];
    for (int64_t j = i; j < n && keys[j] == t; ++j) acc = layout::add(acc, updates[offsets[j]]);
    out[t] = acc;
  }
}

// Calls f(T{}) with the storage type scatter_add adds in for `dtype`.
template <class F>
void visit_add_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::u8: return f(uint8_t{});
    case DType::u32: return f(uint32_t{});
    case DType::i32: return f(int32_t{});
    case DType::i64: return f(int64_t{});
    case DType::bf16: return f(layout::Bf16Bits{});
    case DType::f16: return f(layout::F16Bits{});
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::bool_: break;
  }
  PAX_FAIL("scatter_add: bool operands are not supported");
}

void* scratch_data(const std::shared_ptr<Buffer>& b) { return b->data(); }

void scatter_add_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                        std::span<const TensorView> out) {
  const TensorView& x = in[0];
  const TensorView& idx = in[1];
  const TensorView& upd = in[2];
  const TensorView& y = out[0];
  const cudaStream_t stream = stream_of(ctx);
  if (y.data != x.data && y.nbytes() > 0) {
    PAX_CUDA_CHECK(cudaMemcpyAsync(y.data, x.data, y.nbytes(), cudaMemcpyDeviceToDevice, stream));
  }
  const int64_t n = upd.numel();
  if (n == 0 || y.numel() == 0) return;
  visit_add_type(x.dtype, [](auto) {});  // bool fails before any work is queued
  const ScatterMap m = layout::scatter_map(scatter_spec(p), *x.shape, *upd.shape);

  // Dropped elements sort last; no key exceeds it, so the sort needs only
  // its bits.
  const uint64_t dropped = uint64_t(y.numel());
  const int end_bit = int(std::bit_width(dropped));
  const size_t pair_bytes = size_t(n) * sizeof(uint64_t);
  const std::shared_ptr<Buffer> keys_in = ctx.allocate_scratch(pair_bytes), keys_out = ctx.allocate_scratch(pair_bytes),
                                offsets_in = ctx.allocate_scratch(pair_bytes),
                                offsets_out = ctx.allocate_scratch(pair_bytes);
  auto* k_in = static_cast<uint64_t*>(scratch_data(keys_in));
  auto* k_out = static_cast<uint64_t*>(scratch_data(keys_out));
  auto* o_in = static_cast<uint64_t*>(scratch_data(offsets_in));
  auto* o_out = static_cast<uint64_t*>(scratch_data(offsets_out));

  visit_index("scatter_add", idx.dtype, [&](auto i) {
    using I = decltype(i);
    scatter_targets<I><<<blocks_for(n), kThreads, 0, stream>>>(k_in, o_in, idx.as<const I>(), m, dropped, n);
  });
  PAX_CUDA_CHECK(cudaGetLastError());

  size_t temp_bytes = 0;
  PAX_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, k_in, k_out, o_in, o_out, n, 0, end_bit, stream));
  const std::shared_ptr<Buffer> temp = ctx.allocate_scratch(std::max<size_t>(temp_bytes, 1));
  PAX_CUDA_CHECK(
      cub::DeviceRadixSort::SortPairs(scratch_data(temp), temp_bytes, k_in, k_out, o_in, o_out, n, 0, end_bit, stream));

  visit_add_type(x.dtype, [&](auto t) {
    using T = decltype(t);
    add_runs<T><<<blocks_for(n), kThreads, 0, stream>>>(y.as<T>(), upd.as<const T>(), k_out, o_out, dropped, n);
  });
  PAX_CUDA_CHECK(cudaGetLastError());
}

// ---------------------------------------------------------------------------
// select_n

// Cases travel as kernel arguments, this many per launch; a launch writes the
// elements whose selected case is among its own.
constexpr int kCasesPerLaunch = 32;

template <class T>
struct CaseGroup {
  const T* ptr[kCasesPerLaunch];
  int first;
  int count;
};

// W: uint8_t for a bool selector (any nonzero byte is true), int32_t otherwise.
template <class T, class W>
__global__ void select_elements(T* out, const W* which, bool scalar, CaseGroup<T> g, int64_t num_cases, int64_t n) {
  PAX_GRID_STRIDE(i, n) {
    const W w = which[scalar ? 0 : i];
    const int64_t v = std::is_same_v<W, uint8_t> ? int64_t(w != 0) : int64_t(w);
    const int64_t c = layout::select_case(v, num_cases) - g.first;
    if (c >= 0 && c < g.count) out[i] = g.ptr[c][i];
  }
}

void select_n_kernel(const KernelContext& ctx, const Params&, std::span<const TensorView> in,
                     std::span<const TensorView> out) {
  const TensorView& which = in[0];
  const TensorView& y = out[0];
  const int64_t n = y.numel();
  if (n == 0) return;
  const int64_t num_cases = int64_t(in.size()) - 1;
  const bool scalar = which.rank() == 0;
  PAX_CHECK(which.dtype == DType::bool_ || which.dtype == DType::i32, "select_n: selector must be bool or int32, got ",
            dtype_name(which.dtype));
  visit_width("select_n", y.dtype, [&](auto w) {
    using T = decltype(w);
    for (int64_t first = 0; first < num_cases; first += kCasesPerLaunch) {
      CaseGroup<T> g{};
      g.first = int(first);
      g.count = int(std::min<int64_t>(kCasesPerLaunch, num_cases - first));
      for (int c = 0; c < g.count; ++c) g.ptr[c] = in[size_t(first + c + 1)].as<const T>();
      if (which.dtype == DType::bool_) {
        select_elements<T, uint8_t><<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(
            y.as<T>(), which.as<const uint8_t>(), scalar, g, num_cases, n);
      } else {
        select_elements<T, int32_t><<<blocks_for(n), kThreads, 0, stream_of(ctx)>>>(
            y.as<T>(), which.as<const int32_t>(), scalar, g, num_cases, n);
      }
      PAX_CUDA_CHECK(cudaGetLastError());
    }
  });
}

[[maybe_unused]] const bool kRegistered = register_cuda_kernels({
    {Prim::gather, gather_kernel},
    {Prim::scatter_add, scatter_add_kernel},
    {Prim::select_n, select_n_kernel},
});

}  // namespace
}  // namespace pax::cuda
