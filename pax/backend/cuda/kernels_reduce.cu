// CUDA kernels of the reduction primitives: reduce_sum / prod / max / min /
// and / or over any axes, argmax / argmin and cumsum. Their index arithmetic
// and combining rules are in reduce_index_math.h.
//
// Axes are brought to (outer, n, inner) passes as the CPU brings them, chained
// in the accumulator dtype (f32 for 16-bit floats, rounded once at the end).
// Every result is deterministic, none uses atomics:
// - inner == 1 (the last axes): a block per output row, each thread a strided
//   partial, combined in a fixed tree. Integers, bool and max / min agree
//   with the CPU exactly; float sums and products round in this order rather
//   than the CPU's, which depends on the host's SIMD width.
// - inner > 1 (columns): a thread per output column and block of rows, the
//   rows and blocks cut as the CPU cuts them and added in its order (four
//   rows at a time), so float column sums agree with the CPU bit for bit
//   (for bf16 / f16 where the CPU widens in its loads: columns at least four
//   SIMD vectors wide).
// - argmax / argmin give the first extreme (the first NaN, else the first
//   max / min) whatever the order, so they agree exactly.
// - cumsum scans each column sequentially in blocks of rows cut as the CPU
//   cuts them, each block from the exclusive sum of the blocks before it: bit
//   for bit the CPU's, except that the block sums of long last-axis scans are
//   added four rows at a time where the CPU adds them in SIMD lanes.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "pax/backend/cuda/cuda_check.h"
#include "pax/backend/cuda/cuda_kernels.h"
#include "pax/backend/cuda/kernel_launch.cuh"
#include "pax/backend/cuda/reduce_index_math.h"

namespace pax::cuda {
namespace {

using reduce::Bf16Bits;
using reduce::F16Bits;
using reduce::Op;

// kThreads (kernel_launch.cuh) is also the width of the row kernels' tree,
// which fixes their order of additions.
unsigned grid_for(int64_t rows) { return unsigned(std::min<int64_t>(std::max<int64_t>(rows, 1), 65535)); }

__device__ inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

// Calls f(T{}) with the storage type of `dtype` (bool as uint8_t).
template <class F>
void visit_storage(const char* op, DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
    case DType::bf16: return f(Bf16Bits{});
    case DType::f16: return f(F16Bits{});
    case DType::i32: return f(int32_t{});
    case DType::i64: return f(int64_t{});
    case DType::u8:
    case DType::bool_: return f(uint8_t{});
    case DType::u32: return f(uint32_t{});
  }
  PAX_FAIL(op, ": no CUDA kernel for ", dtype_name(dtype));
}

// The storage type of the accumulator dtype of T (partial results).
template <class T>
using Partial = std::conditional_t<reduce::kIsHalf<T>, float, T>;

// ---------------------------------------------------------------------------
// Reductions

// y[row] = op over x[row, :], a block per row.
template <Op kOp, class In, class Out>
__global__ void reduce_rows(Out* y, const In* x, int64_t rows, int64_t n) {
  using A = reduce::Acc<kOp, In>;
  __shared__ A part[kThreads];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const In* xr = x + row * n;
    part[threadIdx.x] = reduce::strided_partial<kOp, A>([xr](int64_t r) { return reduce::load_as<A>(xr[r]); }, n,
                                                        threadIdx.x, kThreads);
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
      if (int(threadIdx.x) < s) part[threadIdx.x] = reduce::apply<kOp>(part[threadIdx.x], part[threadIdx.x + s]);
      __syncthreads();
    }
    if (threadIdx.x == 0) y[row] = reduce::store_as<Out>(part[0]);
    __syncthreads();
  }
}

// y[o, b, i] = op over the rows of block b (rb rows) of x[o, :, i].
template <Op kOp, class In, class Out>
__global__ void reduce_cols(Out* y, const In* x, int64_t outer, int64_t n, int64_t inner, int64_t rb, int64_t nb) {
  using A = reduce::Acc<kOp, In>;
  PAX_GRID_STRIDE(e, outer * nb * inner) {
    const int64_t i = e % inner, b = (e / inner) % nb, o = e / (inner * nb);
    const In* col = x + (o * n + b * rb) * inner + i;
    const A a = reduce::column_partial<kOp, A>([col, inner](int64_t r) { return reduce::load_as<A>(col[r * inner]); },
                                               min64(rb, n - b * rb));
    y[e] = reduce::store_as<Out>(a);
  }
}

// y[i] = x[i] converted (16-bit floats rounded).
template <class In, class Out>
__global__ void convert_elements(Out* y, const In* x, int64_t n) {
  PAX_GRID_STRIDE(i, n) { y[i] = reduce::store_as<Out>(reduce::load_as<Partial<In>>(x[i])); }
}

template <class U>
__global__ void fill_elements(U* y, U v, int64_t n) {
  PAX_GRID_STRIDE(i, n) { y[i] = v; }
}

// One (outer, n, inner) pass, n >= 1, from x (In) into y (Out).
template <Op kOp, class In, class Out>
void reduce_pass(const KernelContext& ctx, const In* x, Out* y, const reduce::Pass& p) {
  const cudaStream_t stream = stream_of(ctx);
  const int64_t m = p.outer * p.inner;
  if (p.n == 1) {
    if constexpr (std::is_same_v<In, Out>) {
      PAX_CUDA_CHECK(cudaMemcpyAsync(y, x, size_t(m) * sizeof(In), cudaMemcpyDeviceToDevice, stream));
    } else {
      convert_elements<In, Out><<<blocks_for(m), kThreads, 0, stream>>>(y, x, m);
      PAX_CUDA_CHECK(cudaGetLastError());
    }
    return;
  }
  if (p.inner == 1) {
    reduce_rows<kOp, In, Out><<<grid_for(p.outer), kThreads, 0, stream>>>(y, x, p.outer, p.n);
    PAX_CUDA_CHECK(cudaGetLastError());
    return;
  }
  // Columns: blocks of rows, then their partials combined level by level
  // (one level unless n is in the millions), as the CPU combines them.
  using P = Partial<In>;
  reduce::Blocks b = reduce::column_blocks(p.outer, p.n, p.inner, true);
  if (b.nb == 1) {
    reduce_cols<kOp, In, Out><<<blocks_for(m), kThreads, 0, stream>>>(y, x, p.outer, p.n, p.inner, b.rb, 1);
    PAX_CUDA_CHECK(cudaGetLastError());
    return;
  }
  std::shared_ptr<Buffer> part = ctx.allocate_scratch(size_t(m * b.nb) * sizeof(P));
  P* src = static_cast<P*>(part->data());
  reduce_cols<kOp, In, P><<<blocks_for(m * b.nb), kThreads, 0, stream>>>(src, x, p.outer, p.n, p.inner, b.rb, b.nb);
  PAX_CUDA_CHECK(cudaGetLastError());
  int64_t rows = b.nb;
  while (true) {
    const reduce::Blocks q = reduce::column_blocks(p.outer, rows, p.inner, false);
    if (q.nb == 1) {
      reduce_cols<kOp, P, Out><<<blocks_for(m), kThreads, 0, stream>>>(y, src, p.outer, rows, p.inner, q.rb, 1);
      PAX_CUDA_CHECK(cudaGetLastError());
      return;
    }
    std::shared_ptr<Buffer> next = ctx.allocate_scratch(size_t(m * q.nb) * sizeof(P));
    P* dst = static_cast<P*>(next->data());
    reduce_cols<kOp, P, P><<<blocks_for(m * q.nb), kThreads, 0, stream>>>(dst, src, p.outer, rows, p.inner, q.rb, q.nb);
    PAX_CUDA_CHECK(cudaGetLastError());
    part = std::move(next);
    src = dst;
    rows = q.nb;
  }
}

template <Prim P>
constexpr Op kOpOf = P == Prim::reduce_sum    ? Op::sum
                     : P == Prim::reduce_prod ? Op::prod
                     : P == Prim::reduce_max  ? Op::max
                     : P == Prim::reduce_min  ? Op::min
                     : P == Prim::reduce_and  ? Op::and_
                                              : Op::or_;

// Whether op is defined for storage type T of `dtype`: sums and products not
// for bool, and / or not for floats.
template <Op kOp, class T>
constexpr bool kDefined = (std::is_floating_point_v<T> || reduce::kIsHalf<T>) ? (kOp != Op::and_ && kOp != Op::or_)
                                                                              : true;

// The identity of a reduction of an empty axis, as the CPU writes it.
void fill_identity(const KernelContext& ctx, Op op, const TensorView& y) {
  const int64_t m = y.numel();
  uint64_t bits = 0;
  visit_storage(prim_name(Prim::reduce_sum), y.dtype, [&](auto t) {
    using T = decltype(t);
    T v{};
    if (y.dtype == DType::bool_) {
      v = T(op == Op::prod || op == Op::and_ || op == Op::min);
    } else {
      switch (op) {
        case Op::sum: v = reduce::store_as<T>(reduce::identity<Op::sum, Partial<T>>()); break;
        case Op::prod: v = reduce::store_as<T>(reduce::identity<Op::prod, Partial<T>>()); break;
        case Op::max: v = reduce::store_as<T>(reduce::identity<Op::max, Partial<T>>()); break;
        case Op::min: v = reduce::store_as<T>(reduce::identity<Op::min, Partial<T>>()); break;
        case Op::and_:
          if constexpr (std::is_integral_v<T>) v = T(~T(0));
          break;
        case Op::or_: break;
      }
    }
    std::memcpy(&bits, &v, sizeof(T));
  });
  const cudaStream_t stream = stream_of(ctx);
  switch (itemsize(y.dtype)) {
    case 1: fill_elements<uint8_t><<<blocks_for(m), kThreads, 0, stream>>>(y.as<uint8_t>(), uint8_t(bits), m); break;
    case 2: fill_elements<uint16_t><<<blocks_for(m), kThreads, 0, stream>>>(y.as<uint16_t>(), uint16_t(bits), m); break;
    case 4: fill_elements<uint32_t><<<blocks_for(m), kThreads, 0, stream>>>(y.as<uint32_t>(), uint32_t(bits), m); break;
    default: fill_elements<uint64_t><<<blocks_for(m), kThreads, 0, stream>>>(y.as<uint64_t>(), bits, m); break;
  }
  PAX_CUDA_CHECK(cudaGetLastError());
}

template <Prim P>
void reduce_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                   std::span<const TensorView> out) {
  constexpr Op kOp = kOpOf<P>;
  const TensorView& x = in[0];
  const TensorView& y = out[0];
  if (y.numel() == 0) return;
  const bool bitwise = kOp == Op::and_ || kOp == Op::or_, arith = kOp == Op::sum || kOp == Op::prod;
  PAX_CHECK(!(bitwise && is_floating(x.dtype)) && !(arith && x.dtype == DType::bool_), prim_name(P),
            ": not defined for ", dtype_name(x.dtype));
  PAX_CHECK(y.dtype == x.dtype, prim_name(P), ": the CUDA kernel writes the operand's dtype ", dtype_name(x.dtype),
            ", got an output of ", dtype_name(y.dtype));
  const std::vector<reduce::Pass> passes =
      reduce::reduce_passes(*x.shape, normalize_axes(p.ints("axes"), x.rank(), prim_name(P)));
  if (passes.front().n == 0) return fill_identity(ctx, kOp, y);
  visit_storage(prim_name(P), x.dtype, [&](auto t) {
    using T = decltype(t);
    if constexpr (kDefined<kOp, T>) {
      using Pt = Partial<T>;
      // Passes after the first read, and all but the last write, the
      // accumulator dtype.
      const void* src = x.data;
      std::shared_ptr<Buffer> held;
      for (size_t k = 0; k < passes.size(); ++k) {
        const reduce::Pass& q = passes[k];
        const bool first = k == 0, last = k + 1 == passes.size();
        std::shared_ptr<Buffer> next = last ? nullptr : ctx.allocate_scratch(size_t(q.outer * q.inner) * sizeof(Pt));
        if (first && last) reduce_pass<kOp, T, T>(ctx, static_cast<const T*>(src), y.as<T>(), q);
        else if (first) reduce_pass<kOp, T, Pt>(ctx, static_cast<const T*>(src), static_cast<Pt*>(next->data()), q);
        else if (last) reduce_pass<kOp, Pt, T>(ctx, static_cast<const Pt*>(src), y.as<T>(), q);
        else reduce_pass<kOp, Pt, Pt>(ctx, static_cast<const Pt*>(src), static_cast<Pt*>(next->data()), q);
        if (!last) {
          held = std::move(next);
          src = held->data();
        }
      }
    }
  });
}

// ---------------------------------------------------------------------------
// argmax / argmin

// The value type arg-reductions compare in: f32 for 16-bit floats.
template <class T>
using ArgValue = Partial<T>;

template <bool kMax, class T, class I>
__global__ void arg_rows(I* y, const T* x, int64_t rows, int64_t n) {
  using V = ArgValue<T>;
  __shared__ V part_v[kThreads];
  __shared__ int64_t part_i[kThreads];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * n;
    reduce::ArgBest<V> best{V(0), -1};
    for (int64_t r = threadIdx.x; r < n; r += kThreads) {
      const V v = reduce::load_as<V>(xr[r]);
      if (best.i < 0 || reduce::arg_better<kMax>(v, best.v)) best = reduce::ArgBest<V>{v, r};
    }
    part_v[threadIdx.x] = best.v;
    part_i[threadIdx.x] = best.i;
    __syncthreads();
    for (int s = kThreads / 2; s > 0; s >>= 1) {
      if (int(threadIdx.x) < s) {
        const reduce::ArgBest<V> m =
            reduce::arg_merge<kMax>(reduce::ArgBest<V>{part_v[threadIdx.x], part_i[threadIdx.x]},
                                    reduce::ArgBest<V>{part_v[threadIdx.x + s], part_i[threadIdx.x + s]});
        part_v[threadIdx.x] = m.v;
        part_i[threadIdx.x] = m.i;
      }
      __syncthreads();
    }
    if (threadIdx.x == 0) y[row] = I(part_i[0]);
    __syncthreads();
  }
}

// A thread per (o, i), scanning the axis in order.
template <bool kMax, class T, class I>
__global__ void arg_cols(I* y, const T* x, int64_t outer, int64_t n, int64_t inner) {
  using V = ArgValue<T>;
  PAX_GRID_STRIDE(e, outer * inner) {
    const T* col = x + (e / inner) * n * inner + e % inner;
    V best = reduce::load_as<V>(col[0]);
    int64_t at = 0;
    for (int64_t r = 1; r < n; ++r) {
      const V v = reduce::load_as<V>(col[r * inner]);
      if (reduce::arg_better<kMax>(v, best)) {
        best = v;
        at = r;
      }
    }
    y[e] = I(at);
  }
}

template <Prim P>
void arg_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                std::span<const TensorView> out) {
  constexpr bool kMax = P == Prim::argmax;
  const TensorView& x = in[0];
  const TensorView& y = out[0];
  PAX_CHECK(y.dtype == DType::i32 || y.dtype == DType::i64, prim_name(P), ": index dtype must be int32 or int64, got ",
            dtype_name(y.dtype));
  const reduce::Pass c = reduce::around_axis(*x.shape, normalize_axis(p.i("axis"), x.rank(), prim_name(P)));
  const int64_t m = c.outer * c.inner;
  if (m == 0) return;
  PAX_CHECK(c.n > 0, prim_name(P), ": cannot reduce an axis of size 0");
  const cudaStream_t stream = stream_of(ctx);
  visit_storage(prim_name(P), x.dtype, [&](auto t) {
    using T = decltype(t);
    auto run = [&](auto* yi) {
      using I = std::remove_pointer_t<decltype(yi)>;
      if (c.inner == 1)
        arg_rows<kMax, T, I><<<grid_for(c.outer), kThreads, 0, stream>>>(yi, x.as<const T>(), c.outer, c.n);
      else arg_cols<kMax, T, I><<<blocks_for(m), kThreads, 0, stream>>>(yi, x.as<const T>(), c.outer, c.n, c.inner);
    };
    if (y.dtype == DType::i32) run(y.as<int32_t>());
    else run(y.as<int64_t>());
  });
  PAX_CUDA_CHECK(cudaGetLastError());
}

// ---------------------------------------------------------------------------
// cumsum

// The type a running sum of T adds in: f32 for 16-bit floats, unsigned
// (wrapping) for integers.
template <class T>
using ScanAcc = reduce::Acc<Op::sum, T>;

// part[o, b, i] = sum of block b of column (o, i), in the CPU column order.
template <class T>
__global__ void scan_block_sums(ScanAcc<T>* part, const T* x, int64_t outer, int64_t n, int64_t inner, int64_t rb,
                                int64_t nb) {
  using A = ScanAcc<T>;
  PAX_GRID_STRIDE(e, outer * nb * inner) {
    const int64_t i = e % inner, b = (e / inner) % nb, o = e / (inner * nb);
    const T* col = x + (o * n + b * rb) * inner + i;
    part[e] = reduce::column_partial<Op::sum, A>([col, inner](int64_t r) { return reduce::load_as<A>(col[r * inner]); },
                                                 min64(rb, n - b * rb));
  }
}

// part[o, b, i] <- the sum of the blocks before b in scan order.
template <class A>
__global__ void scan_exclusive_blocks(A* part, int64_t outer, int64_t nb, int64_t inner, bool reverse) {
  PAX_GRID_STRIDE(e, outer * inner) {
    A* col = part + (e / inner) * nb * inner + e % inner;
    A carry = A(0);
    for (int64_t k = 0; k < nb; ++k) {
      A& s = col[(reverse ? nb - 1 - k : k) * inner];
      const A next = A(carry + s);
      s = carry;
      carry = next;
    }
  }
}

// Each (o, b, i) scans its block's rows in order from its start value.
template <class T>
__global__ void scan_block_rows(T* y, const T* x, const ScanAcc<T>* part, int64_t outer, int64_t n, int64_t inner,
                                int64_t rb, int64_t nb, bool reverse) {
  using A = ScanAcc<T>;
  PAX_GRID_STRIDE(e, outer * nb * inner) {
    const int64_t i = e % inner, b = (e / inner) % nb, o = e / (inner * nb);
    const int64_t base = (o * n + b * rb) * inner + i, rows = min64(rb, n - b * rb);
    A acc = part ? part[e] : A(0);
    for (int64_t k = 0; k < rows; ++k) {
      const int64_t at = base + (reverse ? rows - 1 - k : k) * inner;
      acc = A(acc + reduce::load_as<A>(x[at]));
      y[at] = reduce::store_as<T>(acc);
    }
  }
}

void cumsum_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                   std::span<const TensorView> out) {
  const TensorView& x = in[0];
  const TensorView& y = out[0];
  PAX_CHECK(x.dtype != DType::bool_, "cumsum: not defined for bool");
  if (y.numel() == 0) return;
  const reduce::Pass c = reduce::around_axis(*x.shape, normalize_axis(p.i("axis"), x.rank(), "cumsum"));
  const bool reverse = p.b("reverse");
  const reduce::Blocks b = reduce::scan_blocks(c.outer, c.n, c.inner);
  const cudaStream_t stream = stream_of(ctx);
  const int64_t tasks = c.outer * b.nb * c.inner;
  visit_storage("cumsum", x.dtype, [&](auto t) {
    using T = decltype(t);
    using A = ScanAcc<T>;
    std::shared_ptr<Buffer> part;
    A* init = nullptr;
    if (b.nb > 1) {
      part = ctx.allocate_scratch(size_t(tasks) * sizeof(A));
      init = static_cast<A*>(part->data());
      scan_block_sums<T>
          <<<blocks_for(tasks), kThreads, 0, stream>>>(init, x.as<const T>(), c.outer, c.n, c.inner, b.rb, b.nb);
      PAX_CUDA_CHECK(cudaGetLastError());
      scan_exclusive_blocks<A>
          <<<blocks_for(c.outer * c.inner), kThreads, 0, stream>>>(init, c.outer, b.nb, c.inner, reverse);
      PAX_CUDA_CHECK(cudaGetLastError());
    }
    scan_block_rows<T><<<blocks_for(tasks), kThreads, 0, stream>>>(y.as<T>(), x.as<const T>(), init, c.outer, c.n,
                                                                   c.inner, b.rb, b.nb, reverse);
    PAX_CUDA_CHECK(cudaGetLastError());
  });
}

[[maybe_unused]] const bool kRegistered = register_cuda_kernels({
    {Prim::reduce_sum, reduce_kernel<Prim::reduce_sum>},
    {Prim::reduce_max, reduce_kernel<Prim::reduce_max>},
    {Prim::reduce_min, reduce_kernel<Prim::reduce_min>},
    {Prim::reduce_prod, reduce_kernel<Prim::reduce_prod>},
    {Prim::reduce_and, reduce_kernel<Prim::reduce_and>},
    {Prim::reduce_or, reduce_kernel<Prim::reduce_or>},
    {Prim::argmax, arg_kernel<Prim::argmax>},
    {Prim::argmin, arg_kernel<Prim::argmin>},
    {Prim::cumsum, cumsum_kernel},
});

}  // namespace
}  // namespace pax::cuda
