// CUDA kernels of the sorting primitives: sort (several operands along any
// axis, lexicographic by the first num_keys, stable) and top_k (values and
// int32 indices along the last axis). They give the CPU's results exactly.
//
// Every row's elements are given positions e = row * n + r (the row numbers
// over all rows at once; reduce_index_math.h row_element_offset). A
// permutation of those positions is sorted by stable CUB radix passes over
// all rows together: one per key, the last key first, on order keys whose
// integer order is the CPU's total order (NaN above +inf, -0.0 equal to +0.0),
// and a last pass on the row number. Stability makes the passes a
// lexicographic sort that keeps equal elements in index order; top_k sorts
// complemented keys, so larger elements come first and ties keep the lower
// index. Every operand is then gathered through the permutation.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <memory>

#include "pax/backend/cuda/cuda_check.h"
#include "pax/backend/cuda/cuda_kernels.h"
#include "pax/backend/cuda/kernel_launch.cuh"
#include "pax/backend/cuda/reduce_index_math.h"

namespace pax::cuda {
namespace {

__global__ void iota_positions(uint64_t* perm, int64_t total) {
  PAX_GRID_STRIDE(j, total) { perm[j] = uint64_t(j); }
}

// keys[j] = order key of the element at position perm[j] of `data`.
__global__ void order_keys(uint64_t* keys, const uint64_t* perm, const void* data, DType dtype, int width, int64_t n,
                           int64_t inner, bool descending, int bits, int64_t total) {
  PAX_GRID_STRIDE(j, total) {
    const int64_t at = reduce::row_element_offset(int64_t(perm[j]), n, inner);
    const uint64_t key = reduce::order_key(dtype, reduce::element_bits(data, width, at));
    keys[j] = descending ? reduce::descending_key(key, bits) : key;
  }
}

// keys[j] = the row of position perm[j].
__global__ void row_keys(uint64_t* keys, const uint64_t* perm, int64_t n, int64_t total) {
  PAX_GRID_STRIDE(j, total) { keys[j] = perm[j] / uint64_t(n); }
}

// The element at position j of the output takes the one at position perm[j].
template <class W>
__global__ void gather_sorted(W* out, const W* in, const uint64_t* perm, int64_t n, int64_t inner, int64_t total) {
  PAX_GRID_STRIDE(j, total) {
    out[reduce::row_element_offset(j, n, inner)] = in[reduce::row_element_offset(int64_t(perm[j]), n, inner)];
  }
}

// The first k of every row of n (inner == 1): values and their indices.
template <class W>
__global__ void gather_top(W* values, int32_t* indices, const W* x, const uint64_t* perm, int64_t n, int64_t k,
                           int64_t total) {
  PAX_GRID_STRIDE(e, total) {
    const uint64_t src = perm[(e / k) * n + e % k];
    values[e] = x[src];
    indices[e] = int32_t(src % uint64_t(n));
  }
}

// The radix-sorting state: keys and the permutation, double-buffered.
class Sorter {
 public:
  Sorter(const KernelContext& ctx, int64_t total) : ctx_(ctx), total_(total) {
    const size_t bytes = size_t(total) * sizeof(uint64_t);
    for (auto* b : {&keys_[0], &keys_[1], &perm_[0], &perm_[1]}) *b = ctx.allocate_scratch(bytes);
    iota_positions<<<blocks_for(total), kThreads, 0, stream()>>>(perm(), total);
    PAX_CUDA_CHECK(cudaGetLastError());
  }

  uint64_t* keys() const { return data(keys_[0]); }
  uint64_t* perm() const { return data(perm_[0]); }

  // Sorts (keys, perm) stably by the low `bits` bits of the keys.
  void sort_pass(int bits) {
    size_t temp_bytes = 0;
    uint64_t *k_in = data(keys_[0]), *k_out = data(keys_[1]), *p_in = data(perm_[0]), *p_out = data(perm_[1]);
    PAX_CUDA_CHECK(
        cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, k_in, k_out, p_in, p_out, total_, 0, bits, stream()));
    const std::shared_ptr<Buffer> temp = ctx_.allocate_scratch(std::max<size_t>(temp_bytes, 1));
    PAX_CUDA_CHECK(
        cub::DeviceRadixSort::SortPairs(temp->data(), temp_bytes, k_in, k_out, p_in, p_out, total_, 0, bits, stream()));
    std::swap(keys_[0], keys_[1]);
    std::swap(perm_[0], perm_[1]);
  }

  // One pass per key operand, the last first, then one on the row number.
  void sort_rows(std::span<const TensorView> key_ops, int64_t n, int64_t inner, bool descending) {
    for (size_t k = key_ops.size(); k-- > 0;) {
      const TensorView& v = key_ops[k];
      const int bits = reduce::order_key_bits(v.dtype);
      order_keys<<<blocks_for(total_), kThreads, 0, stream()>>>(keys(), perm(), v.data, v.dtype, int(itemsize(v.dtype)),
                                                                n, inner, descending, bits, total_);
      PAX_CUDA_CHECK(cudaGetLastError());
      sort_pass(bits);
    }
    const int64_t rows = total_ / n;
    if (rows > 1) {
      row_keys<<<blocks_for(total_), kThreads, 0, stream()>>>(keys(), perm(), n, total_);
      PAX_CUDA_CHECK(cudaGetLastError());
      sort_pass(int(std::bit_width(uint64_t(rows - 1))));
    }
  }

 private:
  static uint64_t* data(const std::shared_ptr<Buffer>& b) { return static_cast<uint64_t*>(b->data()); }
  cudaStream_t stream() const { return stream_of(ctx_); }

  const KernelContext& ctx_;
  int64_t total_;
  std::shared_ptr<Buffer> keys_[2], perm_[2];
};

void sort_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                 std::span<const TensorView> out) {
  const Shape& shape = *in[0].shape;
  const int64_t total = shape.numel();
  if (total == 0) return;
  const int64_t num_keys = p.i("num_keys");
  PAX_CHECK(num_keys >= 1 && num_keys <= int64_t(in.size()), "sort: num_keys is ", num_keys, "; it must lie in [1, ",
            in.size(), "]");
  const reduce::Pass c = reduce::around_axis(shape, normalize_axis(p.i("dimension"), shape.rank(), "sort"));
  Sorter sorter(ctx, total);
  sorter.sort_rows(in.subspan(0, size_t(num_keys)), c.n, c.inner, false);
  for (size_t op = 0; op < in.size(); ++op) {
    visit_width("sort", in[op].dtype, [&](auto w) {
      using W = decltype(w);
      gather_sorted<W><<<blocks_for(total), kThreads, 0, stream_of(ctx)>>>(out[op].as<W>(), in[op].as<const W>(),
                                                                           sorter.perm(), c.n, c.inner, total);
    });
    PAX_CUDA_CHECK(cudaGetLastError());
  }
}

void top_k_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                  std::span<const TensorView> out) {
  const TensorView& x = in[0];
  const TensorView &values = out[0], &indices = out[1];
  const int64_t k = p.i("k");
  if (values.numel() == 0) return;
  const int64_t n = x.dim(x.rank() - 1), total = x.numel();
  PAX_CHECK(indices.dtype == DType::i32, "top_k: indices are int32, got ", dtype_name(indices.dtype));
  Sorter sorter(ctx, total);
  sorter.sort_rows(in.subspan(0, 1), n, 1, true);
  visit_width("top_k", x.dtype, [&](auto w) {
    using W = decltype(w);
    gather_top<W><<<blocks_for(values.numel()), kThreads, 0, stream_of(ctx)>>>(
        values.as<W>(), indices.as<int32_t>(), x.as<const W>(), sorter.perm(), n, k, values.numel());
  });
  PAX_CUDA_CHECK(cudaGetLastError());
}

[[maybe_unused]] const bool kRegistered = register_cuda_kernels({
    {Prim::sort, sort_kernel},
    {Prim::top_k, top_k_kernel},
});

}  // namespace
}  // namespace pax::cuda
