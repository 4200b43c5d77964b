// Index arithmetic of the CUDA layout and indexing kernels (kernels_layout.cu,
// kernels_indexing.cu): maps from a row-major element index to the offsets
// it reads or writes, padding and window math, the clamping of start indices
// read from device memory, the per-element targets of scatter_add, the rule
// by which select_n picks a case, and the CPU's rounding of 16-bit floats.
//
// The device functions compile for the host too, so that the tests run them
// on the host against the CPU kernels (layout_kernels_test.cc); the builders
// that fill the maps from shapes and Params run on the host only.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include "pax/core/dtype.h"
#include "pax/core/error.h"
#include "pax/core/shape.h"
#include "pax/ir/params.h"
#include "pax/prims/indexing_params.h"

#ifdef __CUDACC__
#define PAX_LAYOUT_HD __host__ __device__
#else
#define PAX_LAYOUT_HD
#endif

namespace pax::cuda::layout {

// The largest rank the maps hold: they travel to the device as kernel
// arguments, by value, so their arrays have a fixed size.
inline constexpr int kMaxRank = 16;

PAX_LAYOUT_HD inline int64_t clamp_index(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : (v > hi ? hi : v); }

// ---------------------------------------------------------------------------
// Strided maps.

// A row-major index space of `rank` axes whose element (c_0, ..., c_{r-1})
// sits at base + sum c_d * stride[d] of a buffer (strides may be 0 or
// negative).
struct StridedMap {
  int rank = 0;
  int64_t base = 0;
  int64_t size[kMaxRank] = {};
  int64_t stride[kMaxRank] = {};
};

// The buffer offset of element `linear` (row-major) of the index space.
PAX_LAYOUT_HD inline int64_t map_offset(const StridedMap& m, int64_t linear) {
  int64_t off = m.base;
  for (int d = m.rank - 1; d >= 0; --d) {
    const int64_t c = linear % m.size[d];
    linear /= m.size[d];
    off += c * m.stride[d];
  }
  return off;
}

inline void check_rank(const char* op, int64_t rank) {
  PAX_CHECK(rank <= kMaxRank, op, ": the CUDA kernel takes arrays of rank at most ", kMaxRank, ", got rank ", rank);
}

// The map over `dims` with the given strides.
inline StridedMap strided_map(const char* op, std::span<const int64_t> dims, std::span<const int64_t> strides,
                              int64_t base = 0) {
  check_rank(op, int64_t(dims.size()));
  StridedMap m;
  m.rank = int(dims.size());
  m.base = base;
  for (size_t d = 0; d < dims.size(); ++d) {
    m.size[d] = dims[d];
    m.stride[d] = strides[d];
  }
  return m;
}

// transpose: output element -> operand offset.
inline StridedMap transpose_source(const Shape& in, const Ints& perm) {
  const std::vector<int64_t> in_strides = in.strides();
  std::vector<int64_t> dims, strides;
  for (int64_t a : perm) {
    dims.push_back(in[a]);
    strides.push_back(in_strides[size_t(a)]);
  }
  return strided_map("transpose", dims, strides);
}

// broadcast_in_dim: output element -> operand offset (stride 0 along the
// new axes and along operand axes of size 1).
inline StridedMap broadcast_source(const Shape& in, const Shape& out, const Ints& bdims) {
  const std::vector<int64_t> in_strides = in.strides();
  std::vector<int64_t> strides(size_t(out.rank()), 0);
  for (size_t i = 0; i < bdims.size(); ++i) {
    if (in[int64_t(i)] != 1) strides[size_t(bdims[i])] = in_strides[i];
  }
  return strided_map("broadcast_in_dim", out.dims(), strides);
}

// slice: output element -> operand offset, from the start indices and steps.
inline StridedMap slice_source(const Shape& in, const Shape& out, const Ints& start, const Ints& steps) {
  std::vector<int64_t> strides = in.strides();
  int64_t base = 0;
  for (size_t d = 0; d < strides.size(); ++d) {
    base += start[d] * strides[d];
    strides[d] *= steps[d];
  }
  return strided_map("slice", out.dims(), strides, base);
}

// rev: output element -> operand offset; `dims` are normalised axes.
inline StridedMap rev_source(const Shape& in, const std::vector<int64_t>& dims) {
  std::vector<int64_t> strides = in.strides();
  int64_t base = 0;
  for (int64_t d : dims) {
    if (in[d] == 0) continue;  // an empty array: nothing is read
    base += (in[d] - 1) * strides[size_t(d)];
    strides[size_t(d)] = -strides[size_t(d)];
  }
  return strided_map("rev", in.dims(), strides, base);
}

// concatenate: element of operand `piece` -> output offset, where the piece
// starts at `offset` along `dim` of the output.
inline StridedMap concatenate_destination(const Shape& piece, const Shape& out, int64_t dim, int64_t offset) {
  const std::vector<int64_t> out_strides = out.strides();
  return strided_map("concatenate", piece.dims(), out_strides, offset * out_strides[size_t(dim)]);
}

// ---------------------------------------------------------------------------
// pad.

struct PadMap {
  int rank = 0;
  int64_t out_size[kMaxRank] = {};
  int64_t lo[kMaxRank] = {};    // may be negative (cropping)
  int64_t step[kMaxRank] = {};  // interior + 1
  int64_t in_size[kMaxRank] = {};
  int64_t in_stride[kMaxRank] = {};
};

// The operand offset that output element `linear` copies, or -1 where it is
// padding: operand index k of an axis lands at lo + k * step.
PAX_LAYOUT_HD inline int64_t pad_source(const PadMap& m, int64_t linear) {
  int64_t off = 0;
  bool inside = true;
  for (int d = m.rank - 1; d >= 0; --d) {
    const int64_t o = linear % m.out_size[d];
    linear /= m.out_size[d];
    const int64_t t = o - m.lo[d];
    if (t < 0 || t % m.step[d] != 0 || t / m.step[d] >= m.in_size[d]) {
      inside = false;
      continue;
    }
    off += (t / m.step[d]) * m.in_stride[d];
  }
  return inside ? off : -1;
}

// From padding_config, (lo, hi, interior) per axis flattened.
inline PadMap pad_map(const Shape& in, const Shape& out, const Ints& cfg) {
  check_rank("pad", in.rank());
  const std::vector<int64_t> strides = in.strides();
  PadMap m;
  m.rank = int(in.rank());
  for (size_t d = 0; d < size_t(in.rank()); ++d) {
    m.out_size[d] = out[int64_t(d)];
    m.lo[d] = cfg[3 * d];
    m.step[d] = cfg[3 * d + 2] + 1;
    m.in_size[d] = in[int64_t(d)];
    m.in_stride[d] = strides[d];
  }
  return m;
}

// ---------------------------------------------------------------------------
// Start indices (dynamic_slice, dynamic_update_slice, gather, scatter_add).

// An integer index of dtype `t` (u8, u32, i32 or i64) at `p`, widened.
PAX_LAYOUT_HD inline int64_t load_index(const void* p, DType t) {
  switch (t) {
    case DType::u8: return int64_t(*static_cast<const uint8_t*>(p));
    case DType::u32: return int64_t(*static_cast<const uint32_t*>(p));
    case DType::i32: return int64_t(*static_cast<const int32_t*>(p));
    case DType::i64: return *static_cast<const int64_t*>(p);
    default: return 0;  // the shape rules admit integer indices only
  }
}

// The scalar start indices of dynamic_slice / dynamic_update_slice, one per
// operand axis, where they live (device memory on a GPU).
struct DynamicStarts {
  int rank = 0;
  const void* ptr[kMaxRank] = {};
  DType dtype[kMaxRank] = {};
  int64_t max_start[kMaxRank] = {};  // operand size - window size
  int64_t stride[kMaxRank] = {};     // operand stride
};

// The operand offset of the window's first element; each start is clamped
// into [0, max_start], as XLA and the CPU kernel do.
PAX_LAYOUT_HD inline int64_t dynamic_start_offset(const DynamicStarts& s) {
  int64_t off = 0;
  for (int d = 0; d < s.rank; ++d)
    off += clamp_index(load_index(s.ptr[d], s.dtype[d]), 0, s.max_start[d]) * s.stride[d];
  return off;
}

// The starts `starts` (scalar views) of a window of `window` in `operand`.
template <class View>
inline DynamicStarts dynamic_starts(const char* op, const Shape& operand, std::span<const int64_t> window,
                                    std::span<const View> starts) {
  check_rank(op, operand.rank());
  const std::vector<int64_t> strides = operand.strides();
  DynamicStarts s;
  s.rank = int(operand.rank());
  for (size_t d = 0; d < size_t(operand.rank()); ++d) {
    s.ptr[d] = starts[d].data;
    s.dtype[d] = starts[d].dtype;
    s.max_start[d] = operand[int64_t(d)] - window[d];
    s.stride[d] = strides[d];
  }
  return s;
}

// ---------------------------------------------------------------------------
// gather.

// Output axes carry the operand stride of the slice axis they hold (0 for
// batch axes) and the stride in the flattened batch index (0 for slice axes).
struct GatherMap {
  int rank = 0;  // output rank
  int k = 0;     // index vector length
  bool clip = true;
  int64_t size[kMaxRank] = {};
  int64_t operand_stride[kMaxRank] = {};
  int64_t batch_stride[kMaxRank] = {};
  int64_t max_start[kMaxRank] = {};     // per index component
  int64_t start_stride[kMaxRank] = {};  // per index component
};

// The operand offset of output element `linear`, or -1 where its slice
// leaves the operand in "fill" mode; "clip" clamps the start into range.
template <class I>
PAX_LAYOUT_HD inline int64_t gather_source(const GatherMap& m, const I* indices, int64_t linear) {
  int64_t off = 0, batch = 0;
  for (int q = m.rank - 1; q >= 0; --q) {
    const int64_t c = linear % m.size[q];
    linear /= m.size[q];
    off += c * m.operand_stride[q];
    batch += c * m.batch_stride[q];
  }
  const I* iv = indices + batch * m.k;
  for (int j = 0; j < m.k; ++j) {
    int64_t s = int64_t(iv[j]);
    if (s < 0 || s > m.max_start[j]) {
      if (!m.clip) return -1;
      s = clamp_index(s, 0, m.max_start[j]);
    }
    off += s * m.start_stride[j];
  }
  return off;
}

inline GatherMap gather_map(const GatherSpec& spec, const Shape& operand, const Shape& indices, const Shape& out) {
  check_rank("gather", std::max(out.rank(), operand.rank()));
  const std::vector<int64_t> ostr = operand.strides();
  GatherMap m;
  m.rank = int(out.rank());
  m.k = int(spec.start_index_map.size());
  m.clip = !spec.fill;
  for (size_t j = 0; j < spec.start_index_map.size(); ++j) {
    const int64_t d = spec.start_index_map[j];
    m.max_start[j] = operand[d] - spec.slice_sizes[size_t(d)];
    m.start_stride[j] = ostr[size_t(d)];
  }
  auto contains = [](const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); };
  std::vector<int64_t> slice_axes;
  for (int64_t d = 0; d < operand.rank(); ++d) {
    if (!contains(spec.collapsed_slice_dims, d)) slice_axes.push_back(d);
  }
  const int64_t nbatch = indices.rank() - 1;
  std::vector<int64_t> bstr(size_t(std::max<int64_t>(nbatch, 0)), 1);
  for (int64_t i = nbatch - 1; i > 0; --i) bstr[size_t(i - 1)] = bstr[size_t(i)] * indices[i];
  size_t next_slice = 0, next_batch = 0;
  for (int64_t q = 0; q < out.rank(); ++q) {
    m.size[q] = out[q];
    if (contains(spec.offset_dims, q)) {
      m.operand_stride[q] = ostr[size_t(slice_axes[next_slice++])];
    } else {
      m.batch_stride[q] = bstr[next_batch++];
    }
  }
  return m;
}

// ---------------------------------------------------------------------------
// scatter_add. Update element `item` = window * window_numel + e, where e
// runs row-major over the window axes (operand order) and the windows
// row-major over the batch axes of updates (the leading axes of indices).

struct ScatterMap {
  int window_rank = 0;
  int batch_rank = 0;
  int k = 0;  // index vector length
  int64_t window_numel = 1;
  int64_t window_size[kMaxRank] = {};
  int64_t window_operand_stride[kMaxRank] = {};
  int64_t window_update_stride[kMaxRank] = {};
  int64_t batch_size[kMaxRank] = {};
  int64_t batch_update_stride[kMaxRank] = {};
  int64_t max_start[kMaxRank] = {};     // per index component
  int64_t start_stride[kMaxRank] = {};  // per index component
};

struct ScatterItem {
  int64_t target;  // output offset, -1 when the window leaves the operand (dropped)
  int64_t update;  // offset in updates
};

template <class I>
PAX_LAYOUT_HD inline ScatterItem scatter_item(const ScatterMap& m, const I* indices, int64_t item) {
  int64_t e = item % m.window_numel;
  int64_t w = item / m.window_numel;
  const int64_t window = w;
  int64_t target = 0, update = 0;
  for (int d = m.window_rank - 1; d >= 0; --d) {
    const int64_t c = e % m.window_size[d];
    e /= m.window_size[d];
    target += c * m.window_operand_stride[d];
    update += c * m.window_update_stride[d];
  }
  for (int d = m.batch_rank - 1; d >= 0; --d) {
    const int64_t c = w % m.batch_size[d];
    w /= m.batch_size[d];
    update += c * m.batch_update_stride[d];
  }
  const I* iv = indices + window * m.k;
  for (int j = 0; j < m.k; ++j) {
    const int64_t s = int64_t(iv[j]);
    if (s < 0 || s > m.max_start[j]) return ScatterItem{-1, update};
    target += s * m.start_stride[j];
  }
  return ScatterItem{target, update};
}

inline ScatterMap scatter_map(const ScatterSpec& spec, const Shape& operand, const Shape& updates) {
  check_rank("scatter_add", std::max(operand.rank(), updates.rank()));
  auto contains = [](const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); };
  const std::vector<int64_t> ostr = operand.strides(), ustr = updates.strides();
  ScatterMap m;
  std::vector<int64_t> wsize(size_t(operand.rank()), 1);
  for (int64_t d = 0, j = 0; d < operand.rank(); ++d) {
    if (contains(spec.inserted_window_dims, d)) continue;
    const int64_t uaxis = spec.update_window_dims[size_t(j++)];
    wsize[size_t(d)] = updates[uaxis];
    m.window_size[m.window_rank] = updates[uaxis];
    m.window_operand_stride[m.window_rank] = ostr[size_t(d)];
    m.window_update_stride[m.window_rank] = ustr[size_t(uaxis)];
    m.window_numel *= updates[uaxis];
    ++m.window_rank;
  }
  for (int64_t q = 0; q < updates.rank(); ++q) {
    if (contains(spec.update_window_dims, q)) continue;
    m.batch_size[m.batch_rank] = updates[q];
    m.batch_update_stride[m.batch_rank] = ustr[size_t(q)];
    ++m.batch_rank;
  }
  m.k = int(spec.scatter_dims_to_operand_dims.size());
  for (size_t j = 0; j < spec.scatter_dims_to_operand_dims.size(); ++j) {
    const int64_t d = spec.scatter_dims_to_operand_dims[j];
    m.max_start[j] = operand[d] - wsize[size_t(d)];
    m.start_stride[j] = ostr[size_t(d)];
  }
  return m;
}

// ---------------------------------------------------------------------------
// select_n.

// The case a selector value picks: bool selectors give 0 or 1, int32
// selectors are clamped into [0, num_cases), as jax.lax.select_n's lowering
// (a comparison tree) does.
PAX_LAYOUT_HD inline int64_t select_case(int64_t which, int64_t num_cases) {
  return clamp_index(which, 0, num_cases - 1);
}

// ---------------------------------------------------------------------------
// 16-bit floats, rounded as pax::float_to_bf16 / float_to_f16 (pax/core/
// dtype.cc) so that sums stored per step agree with the CPU bit for bit.

PAX_LAYOUT_HD inline uint32_t f32_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  return std::bit_cast<uint32_t>(f);
#endif
}
PAX_LAYOUT_HD inline float f32_from_bits(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  return std::bit_cast<float>(u);
#endif
}

PAX_LAYOUT_HD inline float bf16_to_f32(uint16_t bits) { return f32_from_bits(uint32_t(bits) << 16); }

PAX_LAYOUT_HD inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

PAX_LAYOUT_HD inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {
    u = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    u = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    u = sign;
  } else {  // subnormal: normalise
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    u = sign | (uint32_t(112 - e) << 23) | ((mant & 0x3ffu) << 13);
  }
  return f32_from_bits(u);
}

PAX_LAYOUT_HD inline uint16_t f32_to_f16(float f) {
  const uint32_t u = f32_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t au = u & 0x7fffffffu;
  if (au > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (au >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (au < 0x38800000u) {                                  // below the smallest normal
    if (au < 0x33000000u) return sign;                     // rounds to zero
    const uint32_t mant = (au & 0x7fffffu) | 0x800000u;
    const int shift = 126 - int(au >> 23);  // 14..24
    const uint32_t half = 1u << (shift - 1);
    const uint32_t rest = mant & ((1u << shift) - 1);
    uint32_t r = mant >> shift;
    if (rest > half || (rest == half && (r & 1u))) ++r;
    return uint16_t(sign | r);
  }
  const uint32_t r = au + 0xfffu + ((au >> 13) & 1u) - (112u << 23);
  return uint16_t(sign | (r >> 13));
}

// Storage types of the 16-bit floats, distinct so that `add` rounds each
// the right way.
struct Bf16Bits {
  uint16_t bits;
};
struct F16Bits {
  uint16_t bits;
};

// a + b as the CPU's scatter_add adds one contribution: integers wrap,
// 16-bit floats add in f32 and round back.
template <class T>
PAX_LAYOUT_HD inline T add(T a, T b) {
  if constexpr (std::is_same_v<T, Bf16Bits>) {
    return Bf16Bits{f32_to_bf16(bf16_to_f32(a.bits) + bf16_to_f32(b.bits))};
  } else if constexpr (std::is_same_v<T, F16Bits>) {
    return F16Bits{f32_to_f16(f16_to_f32(a.bits) + f16_to_f32(b.bits))};
  } else if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return T(U(U(a) + U(b)));
  } else {
    return a + b;
  }
}

}  // namespace pax::cuda::layout
