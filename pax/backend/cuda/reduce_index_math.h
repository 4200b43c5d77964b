// Index arithmetic and per-element rules of the CUDA kernels for reductions,
// scans, sorting, random numbers and windows (kernels_reduce.cu,
// kernels_sort.cu, kernels_random.cu, kernels_window.cu): how reductions are
// cut into passes and blocks as the CPU cuts them, the combining rules
// (NaN propagation, first extreme), the sort's order keys and row layout, the
// Threefry-2x32 rounds and the windows of max pooling.
//
// The device functions compile for the host too, so that the tests run them
// on the host against the CPU kernels (reduce_kernels_test.cc); the builders
// that fill the maps from shapes and Params run on the host only.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "pax/backend/cuda/layout_index_math.h"
#include "pax/core/error.h"
#include "pax/core/shape.h"
#include "pax/prims/window_params.h"

#ifdef __CUDACC__
#define PAX_REDUCE_HD __host__ __device__
#else
#define PAX_REDUCE_HD
#endif

namespace pax::cuda::reduce {

using layout::Bf16Bits;
using layout::F16Bits;
using layout::kMaxRank;

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---------------------------------------------------------------------------
// Passes and blocks, as the CPU's drivers cut them (pax/backend/cpu/
// kernels_reduce.cc and reduce.cc), so that column sums add in the CPU's
// order.

// One reduction over the middle axis of a row-major (outer, n, inner) array.
struct Pass {
  int64_t outer = 1, n = 1, inner = 1;
};

// The passes that reduce `axes` of `s` (normalised): unit dimensions are
// dropped, adjacent dimensions of one role merged, and reduced groups that are
// not adjacent reduced one pass each, innermost first. An empty operand is one
// pass with n = 0 (the identity); no reduced extent left is one pass with
// n = 1 (a copy).
inline std::vector<Pass> reduce_passes(const Shape& s, const std::vector<int64_t>& axes) {
  int64_t m = 1;
  std::vector<bool> reduced(size_t(s.rank()), false);
  for (int64_t a : axes) reduced[size_t(a)] = true;
  for (int64_t d = 0; d < s.rank(); ++d) {
    if (!reduced[size_t(d)]) m *= s[d];
  }
  if (s.numel() == 0) return {Pass{m, 0, 1}};
  struct Group {
    bool reduced;
    int64_t size;
  };
  std::vector<Group> groups;
  for (int64_t d = 0; d < s.rank(); ++d) {
    if (s[d] == 1) continue;
    if (!groups.empty() && groups.back().reduced == reduced[size_t(d)]) groups.back().size *= s[d];
    else groups.push_back({reduced[size_t(d)], s[d]});
  }
  std::vector<Pass> passes;
  while (true) {
    size_t g = groups.size();
    while (g > 0 && !groups[g - 1].reduced) --g;
    if (g == 0) {
      if (passes.empty()) passes.push_back(Pass{m, 1, 1});
      return passes;
    }
    --g;
    Pass p;
    for (size_t k = 0; k < g; ++k) p.outer *= groups[k].size;
    for (size_t k = g + 1; k < groups.size(); ++k) p.inner *= groups[k].size;
    p.n = groups[g].size;
    passes.push_back(p);
    groups.erase(groups.begin() + int64_t(g));
    if (g > 0 && g < groups.size()) {
      groups[g - 1].size *= groups[g].size;
      groups.erase(groups.begin() + int64_t(g));
    }
  }
}

// The (outer, n, inner) form around one axis (argmax, argmin, cumsum, sort).
inline Pass around_axis(const Shape& s, int64_t axis) {
  Pass p;
  for (int64_t d = 0; d < s.rank(); ++d) (d < axis ? p.outer : d == axis ? p.n : p.inner) *= s[d];
  return p;
}

// Rows of a column reduction or scan cut into nb blocks of rb rows.
struct Blocks {
  int64_t rb = 1, nb = 1;
};

// The CPU's blocks of a column reduction (reduce.cc make_plan with inner > 1):
// at most 1024 rows, cut finer when there are fewer than 16 tasks
// (`for_threads`; not for the combination of block results).
inline Blocks column_blocks(int64_t outer, int64_t n, int64_t inner, bool for_threads) {
  constexpr int64_t kTaskElems = int64_t(1) << 15, kColChunk = 4096, kColBlock = 1024, kMinTasks = 16;
  const int64_t cw = std::min(inner, kColChunk);
  const int64_t independent = outer * ceil_div(inner, cw);
  Blocks b;
  b.rb = std::min(n, kColBlock);
  if (for_threads && independent * ceil_div(n, b.rb) < kMinTasks) {
    const int64_t want = ceil_div(kMinTasks, independent);
    b.rb = std::min(b.rb, std::max(ceil_div(n, want), ceil_div(kTaskElems, cw)));
  }
  b.nb = ceil_div(n, b.rb);
  return b;
}

// The CPU's blocks of a scan (reduce.cc make_scan_plan): one block unless
// there are fewer than 16 independent columns and the scan is long.
inline Blocks scan_blocks(int64_t outer, int64_t n, int64_t inner) {
  constexpr int64_t kTaskElems = int64_t(1) << 15, kColChunk = 4096, kMinTasks = 16;
  const int64_t cw = inner > 1 ? std::min(inner, kColChunk) : 1;
  const int64_t independent = outer * ceil_div(inner, cw);
  Blocks b;
  b.rb = std::max<int64_t>(n, 1);
  if (independent < kMinTasks && n * cw >= 2 * kTaskElems) {
    const int64_t per_task = inner == 1 ? 4 : 1;
    const int64_t want = ceil_div(kMinTasks * per_task, independent);
    b.rb = std::max(ceil_div(n, want), ceil_div(kTaskElems, cw * per_task));
  }
  b.nb = ceil_div(n, b.rb);
  return b;
}

// ---------------------------------------------------------------------------
// Combining rules.

enum class Op { sum, prod, max, min, and_, or_ };

template <class T>
constexpr bool kIsHalf = std::is_same_v<T, Bf16Bits> || std::is_same_v<T, F16Bits>;

// The type a reduction of storage type T computes in: f32 for 16-bit floats,
// unsigned (wrapping) for integer sums, products and bit operations, T for
// comparisons and floats. bool is stored as uint8_t.
template <Op kOp, class T>
using Acc =
    std::conditional_t<kIsHalf<T>, float,
                       std::conditional_t<std::is_integral_v<T> &&
                                              (kOp == Op::sum || kOp == Op::prod || kOp == Op::and_ || kOp == Op::or_),
                                          std::make_unsigned_t<std::conditional_t<std::is_integral_v<T>, T, int>>, T>>;

PAX_REDUCE_HD inline double f64_from_bits(uint64_t u) {
#ifdef __CUDA_ARCH__
  return __longlong_as_double(static_cast<long long>(u));
#else
  return std::bit_cast<double>(u);
#endif
}
PAX_REDUCE_HD inline uint64_t f64_bits(double d) {
#ifdef __CUDA_ARCH__
  return static_cast<uint64_t>(__double_as_longlong(d));
#else
  return std::bit_cast<uint64_t>(d);
#endif
}

template <class A>
PAX_REDUCE_HD inline A plus_infinity() {
  if constexpr (std::is_same_v<A, float>) return layout::f32_from_bits(0x7f800000u);
  else return f64_from_bits(0x7ff0000000000000ull);
}

// The largest and smallest values of an integer type.
template <class A>
PAX_REDUCE_HD inline A int_max() {
  if constexpr (std::is_signed_v<A>) return A((~std::make_unsigned_t<A>(0)) >> 1);
  else return A(~A(0));
}
template <class A>
PAX_REDUCE_HD inline A int_lowest() {
  if constexpr (std::is_signed_v<A>) return A(-int_max<A>() - 1);
  else return A(0);
}

// The start of every partial result (the CPU chunk kernels' Identity).
template <Op kOp, class A>
PAX_REDUCE_HD inline A identity() {
  if constexpr (kOp == Op::sum || kOp == Op::or_) return A(0);
  else if constexpr (kOp == Op::prod) return A(1);
  else if constexpr (kOp == Op::and_) return A(~A(0));
  else if constexpr (std::is_floating_point_v<A>) return kOp == Op::max ? -plus_infinity<A>() : plus_infinity<A>();
  else return kOp == Op::max ? int_lowest<A>() : int_max<A>();
}

// a op b as the CPU's scalar Apply: floating max / min return the first NaN
// operand, and keep `a` when the two compare equal.
template <Op kOp, class A>
PAX_REDUCE_HD inline A apply(A a, A b) {
  if constexpr (kOp == Op::sum) return A(a + b);
  else if constexpr (kOp == Op::prod) return A(a * b);
  else if constexpr (kOp == Op::and_) return A(a & b);
  else if constexpr (kOp == Op::or_) return A(a | b);
  else {
    if constexpr (std::is_floating_point_v<A>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    if constexpr (kOp == Op::max) return a < b ? b : a;
    else return b < a ? b : a;
  }
}

// A stored element as the type A a reduction of it computes in.
template <class A, class T>
PAX_REDUCE_HD inline A load_as(T v) {
  if constexpr (std::is_same_v<T, Bf16Bits>) return A(layout::bf16_to_f32(v.bits));
  else if constexpr (std::is_same_v<T, F16Bits>) return A(layout::f16_to_f32(v.bits));
  else return A(v);
}

// A value stored as T, 16-bit floats rounded to nearest even as the CPU does.
template <class T, class A>
PAX_REDUCE_HD inline T store_as(A a) {
  if constexpr (std::is_same_v<T, Bf16Bits>) return Bf16Bits{layout::f32_to_bf16(float(a))};
  else if constexpr (std::is_same_v<T, F16Bits>) return F16Bits{layout::f32_to_f16(float(a))};
  else return T(a);
}

// op over rows r < rows of load(r), in the CPU column kernels' order
// (reduce_hwy.cc ColsAccumulate): four rows combined, then into the partial;
// the last rows one at a time.
template <Op kOp, class A, class Load>
PAX_REDUCE_HD inline A column_partial(const Load& load, int64_t rows) {
  A acc = identity<kOp, A>();
  int64_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    acc = apply<kOp>(acc, apply<kOp>(apply<kOp>(load(r), load(r + 1)), apply<kOp>(load(r + 2), load(r + 3))));
  }
  for (; r < rows; ++r) acc = apply<kOp>(acc, load(r));
  return acc;
}

// Thread t's partial of a row of n in the row kernel (one block per row):
// op over elements t, t + step, ... in order. The block then combines
// partials in a fixed tree (p[t] op p[t + s] for s = step / 2, ..., 1), so
// row results are deterministic; their rounding differs from the CPU's,
// whose vector lanes depend on the host's SIMD width.
template <Op kOp, class A, class Load>
PAX_REDUCE_HD inline A strided_partial(const Load& load, int64_t n, int64_t t, int64_t step) {
  A acc = identity<kOp, A>();
  for (int64_t r = t; r < n; r += step) acc = apply<kOp>(acc, load(r));
  return acc;
}

// Whether v replaces the best so far `cur` of an arg-reduction scanned in
// index order: strictly better, or a NaN replacing a number; nothing replaces
// a NaN (reduce.cc better).
template <bool kMax, class V>
PAX_REDUCE_HD inline bool arg_better(V v, V cur) {
  if constexpr (std::is_floating_point_v<V>) return (kMax ? !(v <= cur) : !(v >= cur)) && cur == cur;
  else return kMax ? v > cur : v < cur;
}

// A candidate of an arg-reduction: value and index (index < 0: none).
template <class V>
struct ArgBest {
  V v;
  int64_t i;
};

// The better of two candidates from any parts of a row: the lower index
// unless the higher one is better by arg_better, so that merging in any
// order gives the first extreme (the first NaN, else the first max / min).
template <bool kMax, class V>
PAX_REDUCE_HD inline ArgBest<V> arg_merge(ArgBest<V> a, ArgBest<V> b) {
  if (b.i < 0) return a;
  if (a.i < 0) return b;
  if (b.i < a.i) {
    const ArgBest<V> t = a;
    a = b;
    b = t;
  }
  return arg_better<kMax>(b.v, a.v) ? b : a;
}

// ---------------------------------------------------------------------------
// Sorting. Every element maps to an unsigned order key whose integer order is
// the CPU's total order (pax/backend/cpu/sort.cc): NaNs above +inf and equal
// to each other, -0.0 equal to +0.0. Rows are sorted by stable radix passes
// over all rows at once, the last key first and the row number last.

// Floats: NaN -> all ones, +-0 -> the sign bit, others sign-magnitude turned
// into an order-preserving unsigned integer.
template <class U>
PAX_REDUCE_HD inline U float_order(U bits, U exp_mask) {
  constexpr int kBits = int(sizeof(U) * 8);
  constexpr U kSign = U(U(1) << (kBits - 1));
  const U mag = U(bits & U(~kSign));
  const U negative = U(U(0) - U(bits >> (kBits - 1)));
  U key = U(bits ^ U(negative | kSign));
  key = mag > exp_mask ? U(~U(0)) : key;
  return mag == 0 ? kSign : key;
}

// The order key of a stored element of `dtype` (its raw bits, zero-extended).
PAX_REDUCE_HD inline uint64_t order_key(DType dtype, uint64_t bits) {
  switch (dtype) {
    case DType::bool_: return bits != 0 ? 1u : 0u;
    case DType::u8:
    case DType::u32: return bits;
    case DType::i32: return uint64_t(uint32_t(bits) ^ 0x80000000u);
    case DType::i64: return bits ^ 0x8000000000000000ull;
    case DType::bf16: return float_order<uint16_t>(uint16_t(bits), uint16_t(0x7f80));
    case DType::f16: return float_order<uint16_t>(uint16_t(bits), uint16_t(0x7c00));
    case DType::f32: return float_order<uint32_t>(uint32_t(bits), 0x7f800000u);
    case DType::f64: return float_order<uint64_t>(bits, 0x7ff0000000000000ull);
  }
  return 0;
}

// The raw bits of element `i` of an array of `width` bytes per element.
PAX_REDUCE_HD inline uint64_t element_bits(const void* data, int width, int64_t i) {
  switch (width) {
    case 1: return static_cast<const uint8_t*>(data)[i];
    case 2: return static_cast<const uint16_t*>(data)[i];
    case 4: return static_cast<const uint32_t*>(data)[i];
    default: return static_cast<const uint64_t*>(data)[i];
  }
}

// The bits an order key of `dtype` uses (the radix passes sort only those).
inline int order_key_bits(DType dtype) { return dtype == DType::bool_ ? 1 : int(8 * itemsize(dtype)); }

// A descending order key: the complement within the key's bits, so that a
// stable ascending sort puts larger elements first and keeps equal ones in
// index order (top_k).
PAX_REDUCE_HD inline uint64_t descending_key(uint64_t key, int bits) {
  const uint64_t mask = bits >= 64 ? ~uint64_t(0) : ((uint64_t(1) << bits) - 1);
  return ~key & mask;
}

// The sort's working order puts each row's n elements together: position
// e = row * n + r with row = o * inner + i. The array offset of that element
// of an (outer, n, inner) array.
PAX_REDUCE_HD inline int64_t row_element_offset(int64_t e, int64_t n, int64_t inner) {
  const int64_t row = e / n, r = e % n;
  return ((row / inner) * n + r) * inner + row % inner;
}

// ---------------------------------------------------------------------------
// Threefry-2x32, 20 rounds (the JAX / Random123 schedule of
// pax/backend/cpu/threefry_hwy.cc).

PAX_REDUCE_HD inline uint32_t rotl32(uint32_t v, int r) { return (v << r) | (v >> (32 - r)); }

PAX_REDUCE_HD inline void threefry2x32(uint32_t k0, uint32_t k1, uint32_t x0, uint32_t x1, uint32_t& y0, uint32_t& y1) {
  const uint32_t ks[3] = {k0, k1, k0 ^ k1 ^ 0x1BD11BDAu};
  const int rot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  x0 += ks[0];
  x1 += ks[1];
  for (int s = 1; s <= 5; ++s) {
    const int* r = rot[(s - 1) % 2];
    for (int j = 0; j < 4; ++j) {
      x0 += x1;
      x1 = rotl32(x1, r[j]) ^ x0;
    }
    x0 += ks[s % 3];
    x1 += ks[(s + 1) % 3] + uint32_t(s);
  }
  y0 = x0;
  y1 = x1;
}

// Block i of jax.random's threefry random_bits for n u32 outputs: with
// m = ceil(n / 2) it encrypts the counters (i, m + i), or (i, 0) for the
// padding block of an odd n; y0 goes to out[i], y1 to out[m + i] when
// m + i < n (returned false otherwise). n < 2^32 - 1.
PAX_REDUCE_HD inline bool random_bits_block(uint32_t k0, uint32_t k1, uint64_t n, uint64_t i, uint32_t& y0,
                                            uint32_t& y1) {
  const uint64_t m = (n + 1) / 2, pairs = n / 2;
  threefry2x32(k0, k1, uint32_t(i), i < pairs ? uint32_t(m + i) : 0u, y0, y1);
  return i < pairs;
}

// ---------------------------------------------------------------------------
// Windows of reduce_window_max, select_and_scatter_add and
// select_and_gather_add (pax/backend/cpu/kernels_window.cc).

struct WindowMap {
  int rank = 0;
  int64_t window_count = 1;  // elements of one window
  int64_t out_count = 1;
  bool tiles = true;  // stride = window, no padding, no remainder on every axis
  int64_t in[kMaxRank] = {}, out[kMaxRank] = {}, window[kMaxRank] = {}, stride[kMaxRank] = {}, lo[kMaxRank] = {};
  int64_t in_stride[kMaxRank] = {};
};

inline WindowMap window_map(const char* op, const Shape& in, const Shape& out, const Window& w) {
  layout::check_rank(op, in.rank());
  const std::vector<int64_t> strides = in.strides();
  WindowMap m;
  m.rank = int(in.rank());
  for (size_t d = 0; d < size_t(in.rank()); ++d) {
    m.in[d] = in[int64_t(d)];
    m.out[d] = out[int64_t(d)];
    m.window[d] = w.dims[d];
    m.stride[d] = w.strides[d];
    m.lo[d] = w.lo[d];
    m.in_stride[d] = strides[d];
    m.window_count *= w.dims[d];
    m.out_count *= out[int64_t(d)];
    m.tiles = m.tiles && w.strides[d] == w.dims[d] && w.lo[d] == 0 && m.in[d] == m.out[d] * w.dims[d];
  }
  return m;
}

// The input offset of element k (row-major over the window) of the window at
// output position `out_linear`, or -1 where it lies in the padding.
PAX_REDUCE_HD inline int64_t window_element(const WindowMap& m, int64_t out_linear, int64_t k) {
  int64_t off = 0;
  bool inside = true;
  for (int d = m.rank - 1; d >= 0; --d) {
    const int64_t o = out_linear % m.out[d], w = k % m.window[d];
    out_linear /= m.out[d];
    k /= m.window[d];
    const int64_t i = o * m.stride[d] - m.lo[d] + w;
    inside = inside && i >= 0 && i < m.in[d];
    off += i * m.in_stride[d];
  }
  return inside ? off : -1;
}

// The input offset of the element window `out_linear` selects (its first NaN,
// else its first maximum; -1 for a window all in the padding), and its value
// in `best` (load: offset -> value). The CPU's rule: v replaces the best when
// the best is a number and v is larger or NaN.
template <class V, class Load>
PAX_REDUCE_HD inline int64_t window_select(const WindowMap& m, int64_t out_linear, const Load& load, V& best) {
  int64_t at = -1;
  for (int64_t k = 0; k < m.window_count; ++k) {
    const int64_t off = window_element(m, out_linear, k);
    if (off < 0) continue;
    const V v = load(off);
    if (at < 0 || ((best == best) && ((v > best) || (v != v)))) {
      best = v;
      at = off;
    }
  }
  return at;
}

// The output positions whose windows hold input element `in_linear`: the box
// lo[d] <= o_d < hi[d] (empty when some hi[d] <= lo[d]), in row-major order
// the order in which the CPU's scatter visits them. Returns the box's size.
PAX_REDUCE_HD inline int64_t covering_windows(const WindowMap& m, int64_t in_linear, int64_t* lo, int64_t* hi) {
  int64_t count = 1;
  for (int d = m.rank - 1; d >= 0; --d) {
    const int64_t i = in_linear % m.in[d] + m.lo[d];  // position in the padded axis
    in_linear /= m.in[d];
    // o * stride <= i <= o * stride + window - 1
    const int64_t first = i - m.window[d] + 1 <= 0 ? 0 : (i - m.window[d] + 1 + m.stride[d] - 1) / m.stride[d];
    const int64_t last = i / m.stride[d];  // inclusive
    lo[d] = first;
    hi[d] = last + 1 < m.out[d] ? last + 1 : m.out[d];
    count *= hi[d] > lo[d] ? hi[d] - lo[d] : 0;
  }
  return count;
}

// The output position of entry `j` (row-major) of a box from covering_windows.
PAX_REDUCE_HD inline int64_t box_position(const WindowMap& m, const int64_t* lo, const int64_t* hi, int64_t j) {
  int64_t pos = 0, scale = 1;
  for (int d = m.rank - 1; d >= 0; --d) {
    const int64_t size = hi[d] - lo[d];
    pos += (lo[d] + j % size) * scale;
    j /= size;
    scale *= m.out[d];
  }
  return pos;
}

}  // namespace pax::cuda::reduce
