// Streaming copies, block fills, accumulator chains and bf16 rounding in f32 (see
// fused_kernels.h), compiled per SIMD target by Highway.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "pax/backend/cpu/fused_kernels_hwy.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cstring>

#include "pax/backend/cpu/dispatch.h"
#include "pax/backend/cpu/fused_kernels.h"

HWY_BEFORE_NAMESPACE();
namespace pax::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

void StreamCopy(void* dst, const void* src, size_t bytes) {
  const hn::ScalableTag<uint8_t> d;
  const size_t N = hn::Lanes(d);
  uint8_t* y = static_cast<uint8_t*>(dst);
  const uint8_t* x = static_cast<const uint8_t*>(src);
  size_t i = 0;
  for (; i + N <= bytes; i += N) hn::Stream(hn::LoadU(d, x + i), d, y + i);
  if (i < bytes) std::memcpy(y + i, x + i, bytes - i);
}

template <class T>
void FillTyped(T value, T* y, size_t n) {
  const hn::ScalableTag<T> d;
  const size_t N = hn::Lanes(d);
  const auto v = hn::Set(d, value);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(v, d, y + i);
  for (; i < n; ++i) y[i] = value;
}

void FillWidth(size_t width, const void* value, void* y, size_t n) {
  visit_width(width, [&](auto t) {
    using T = decltype(t);
    T v;
    std::memcpy(&v, value, sizeof(T));
    FillTyped(v, static_cast<T*>(y), n);
  });
}

// ---------------------------------------------------------------------------
// bf16 values held as f32, narrowed to their bf16 bits.

void NarrowToBf16(const float* x, uint16_t* y, size_t n, bool stream) {
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du;
  const hn::RebindToSigned<decltype(df)> di;
  const hn::Rebind<uint16_t, decltype(df)> du16;
  const size_t N = hn::Lanes(df);
  stream = stream && reinterpret_cast<uintptr_t>(y) % (N * sizeof(uint16_t)) == 0;
  size_t i = 0;
  for (; i + N <= n; i += N) {
    const auto high = hn::ShiftRight<16>(hn::BitCast(du, hn::LoadU(df, x + i)));
    const auto narrow = hn::DemoteTo(du16, hn::BitCast(di, high));
    if (stream) hn::Stream(narrow, du16, y + i);
    else hn::StoreU(narrow, du16, y + i);
  }
  for (; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, x + i, 4);
    y[i] = uint16_t(bits >> 16);
  }
}

// ---------------------------------------------------------------------------
// Accumulator chains. The operations are those of the float binary / unary
// kernels in elementwise_hwy.cc (max / min propagate NaN, the first NaN
// operand winning), applied to the same values.

// clang-format off
struct Add { template <class D, class V> V operator()(D, V a, V b) const { return hn::Add(a, b); } };
struct Sub { template <class D, class V> V operator()(D, V a, V b) const { return hn::Sub(a, b); } };
struct Mul { template <class D, class V> V operator()(D, V a, V b) const { return hn::Mul(a, b); } };
struct Div { template <class D, class V> V operator()(D, V a, V b) const { return hn::Div(a, b); } };
// clang-format on
struct Max {
  template <class D, class V>
  V operator()(D, V a, V b) const {
    return hn::IfThenElse(hn::IsNaN(a), a, hn::IfThenElse(hn::IsNaN(b), b, hn::Max(a, b)));
  }
};
struct Min {
  template <class D, class V>
  V operator()(D, V a, V b) const {
    return hn::IfThenElse(hn::IsNaN(a), a, hn::IfThenElse(hn::IsNaN(b), b, hn::Min(a, b)));
  }
};

constexpr size_t kTile = 8;  // vectors per tile: the accumulators and leaves stay in registers

// Loads `valid` (>= lanes: a whole vector) elements at p, zero-padded.
template <class D, class T>
HWY_INLINE hn::Vec<D> LoadPart(D d, const T* p, size_t valid) {
  if (valid >= hn::Lanes(d)) return hn::LoadU(d, p);
  HWY_ALIGN T buf[HWY_MAX_BYTES / sizeof(T)] = {};
  std::copy(p, p + valid, buf);
  return hn::Load(d, buf);
}

template <class D, class T>
HWY_INLINE void StorePart(D d, hn::Vec<D> v, T* p, size_t valid) {
  if (valid >= hn::Lanes(d)) return hn::StoreU(v, d, p);
  HWY_ALIGN T buf[HWY_MAX_BYTES / sizeof(T)];
  hn::Store(v, d, buf);
  std::copy(buf, buf + valid, p);
}

template <size_t K, class D, class V, class Op>
HWY_INLINE void Apply(D d, Op op, V* t, const V* c, bool leaf_first) {
  if (leaf_first) {
    for (size_t k = 0; k < K; ++k) t[k] = op(d, c[k], t[k]);
  } else {
    for (size_t k = 0; k < K; ++k) t[k] = op(d, t[k], c[k]);
  }
}

// Elements [i, i + valid) as K vectors (the last ones partial or unused).
template <size_t K, bool kStream, class D, class T>
HWY_INLINE void ChainTile(D d, const T* first, bool first_scalar, const ChainStep* steps, size_t num_steps, T* y,
                          size_t i, size_t valid) {
  using V = hn::Vec<D>;
  const size_t N = hn::Lanes(d);
  auto part = [&](size_t k) { return valid > k * N ? valid - k * N : 0; };
  V t[K];
  for (size_t k = 0; k < K; ++k) t[k] = first_scalar ? hn::Set(d, first[0]) : LoadPart(d, first + i + k * N, part(k));
  for (size_t s = 0; s < num_steps; ++s) {
    const ChainStep& step = steps[s];
    if (!step.binary) {
      for (size_t k = 0; k < K; ++k) t[k] = UnaryOp(step.op) == UnaryOp::neg ? hn::Neg(t[k]) : hn::Abs(t[k]);
      continue;
    }
    const T* leaf = static_cast<const T*>(step.leaf);
    V c[K];
    for (size_t k = 0; k < K; ++k) c[k] = step.scalar ? hn::Set(d, leaf[0]) : LoadPart(d, leaf + i + k * N, part(k));
    switch (BinaryOp(step.op)) {
      case BinaryOp::add: Apply<K>(d, Add(), t, c, step.leaf_first); break;
      case BinaryOp::sub: Apply<K>(d, Sub(), t, c, step.leaf_first); break;
      case BinaryOp::mul: Apply<K>(d, Mul(), t, c, step.leaf_first); break;
      case BinaryOp::div: Apply<K>(d, Div(), t, c, step.leaf_first); break;
      case BinaryOp::max: Apply<K>(d, Max(), t, c, step.leaf_first); break;
      default: Apply<K>(d, Min(), t, c, step.leaf_first); break;
    }
  }
  for (size_t k = 0; k < K; ++k) {
    if constexpr (kStream) {
      hn::Stream(t[k], d, y + i + k * N);
    } else if (part(k) > 0) {
      StorePart(d, t[k], y + i + k * N, part(k));
    }
  }
}

template <class T>
void ChainTyped(const T* first, bool first_scalar, const ChainStep* steps, size_t num_steps, T* y, size_t n,
                bool stream) {
  const hn::ScalableTag<T> d;
  const size_t N = hn::Lanes(d);
  stream = stream && reinterpret_cast<uintptr_t>(y) % 64 == 0;
  size_t i = 0;
  for (; i + kTile * N <= n; i += kTile * N) {
    if (stream) ChainTile<kTile, true>(d, first, first_scalar, steps, num_steps, y, i, kTile * N);
    else ChainTile<kTile, false>(d, first, first_scalar, steps, num_steps, y, i, kTile * N);
  }
  for (; i < n; i += N) ChainTile<1, false>(d, first, first_scalar, steps, num_steps, y, i, std::min(N, n - i));
}

void Chain(DType dtype, const void* first, bool first_scalar, const ChainStep* steps, size_t num_steps, void* y,
           size_t n, bool stream) {
  if (dtype == DType::f64) {
    return ChainTyped(static_cast<const double*>(first), first_scalar, steps, num_steps, static_cast<double*>(y), n,
                      stream);
  }
  ChainTyped(static_cast<const float*>(first), first_scalar, steps, num_steps, static_cast<float*>(y), n, stream);
}

}  // namespace HWY_NAMESPACE
}  // namespace pax::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace pax::cpu {

HWY_EXPORT(StreamCopy);
HWY_EXPORT(Chain);
HWY_EXPORT(NarrowToBf16);
HWY_EXPORT(FillWidth);

void fill_block(size_t width, const void* value, void* y, size_t n) {
  HWY_DYNAMIC_DISPATCH(FillWidth)(width, value, y, n);
}

void stream_copy(void* dst, const void* src, size_t bytes) { HWY_DYNAMIC_DISPATCH(StreamCopy)(dst, src, bytes); }

void stream_fence() { hwy::FlushStream(); }

void narrow_to_bf16(const float* x, uint16_t* y, size_t n, bool stream) {
  HWY_DYNAMIC_DISPATCH(NarrowToBf16)(x, y, n, stream);
}

bool chain_supports(bool binary, uint8_t op, DType dtype) {
  if (dtype != DType::f32 && dtype != DType::f64) return false;
  if (!binary) return UnaryOp(op) == UnaryOp::neg || UnaryOp(op) == UnaryOp::abs;
  switch (BinaryOp(op)) {
    // clang-format off
    case BinaryOp::add: case BinaryOp::sub: case BinaryOp::mul: case BinaryOp::div: case BinaryOp::max:
    case BinaryOp::min:
      return true;
    default:
      return false;
  }
  // clang-format on
}

void chain(DType dtype, const void* first, bool first_scalar, std::span<const ChainStep> steps, void* y, size_t n,
           bool stream) {
  HWY_DYNAMIC_DISPATCH(Chain)(dtype, first, first_scalar, steps.data(), steps.size(), y, n, stream);
}

}  // namespace pax::cpu
#endif  // HWY_ONCE
