// What generated fused-loop code (fused_codegen.h) needs beside the per-element
// operations: loads, splats and stores of each slot memory format, over
// Highway's f32 vectors (bf16 bits widened into the high half of f32 lanes and
// narrowed back, as the kernels do; bools as one byte each, masks while
// computed). Like elementwise_ops-inl.h, this text is embedded into the
// library and pasted into generated sources, so it includes only Highway and
// the standard library.
#if defined(PAX_BACKEND_CPU_FUSED_CODEGEN_PRELUDE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef PAX_BACKEND_CPU_FUSED_CODEGEN_PRELUDE_INL_H_
#undef PAX_BACKEND_CPU_FUSED_CODEGEN_PRELUDE_INL_H_
#else
#define PAX_BACKEND_CPU_FUSED_CODEGEN_PRELUDE_INL_H_
#endif

#include <hwy/highway.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

HWY_BEFORE_NAMESPACE();
namespace pax::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

template <class D>
HWY_INLINE hn::Vec<D> LoadF32(D d, const void* p, size_t i) {
  return hn::LoadU(d, static_cast<const float*>(p) + i);
}
template <class D>
HWY_INLINE hn::Vec<D> LoadBf16(D d, const void* p, size_t i) {
  const hn::Rebind<uint16_t, D> d16;
  const hn::RebindToUnsigned<D> du;
  return hn::BitCast(d, hn::ShiftLeft<16>(hn::PromoteTo(du, hn::LoadU(d16, static_cast<const uint16_t*>(p) + i))));
}
template <class D>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> LoadI32(D, const void* p, size_t i) {
  const hn::RebindToSigned<D> di;
  return hn::LoadU(di, static_cast<const int32_t*>(p) + i);
}
template <class D>
HWY_INLINE hn::Mask<D> LoadBool(D d, const void* p, size_t i) {
  const hn::Rebind<uint8_t, D> d8;
  const hn::RebindToUnsigned<D> du;
  const auto bytes = hn::PromoteTo(du, hn::LoadU(d8, static_cast<const uint8_t*>(p) + i));
  return hn::RebindMask(d, hn::Ne(bytes, hn::Zero(du)));
}

template <class D>
HWY_INLINE hn::Vec<D> SplatF32(D d, const void* p) {
  return hn::Set(d, *static_cast<const float*>(p));
}
template <class D>
HWY_INLINE hn::Vec<D> SplatBf16(D d, const void* p) {
  const hn::RebindToUnsigned<D> du;
  return hn::BitCast(d, hn::Set(du, uint32_t(*static_cast<const uint16_t*>(p)) << 16));
}
template <class D>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> SplatI32(D, const void* p) {
  const hn::RebindToSigned<D> di;
  return hn::Set(di, *static_cast<const int32_t*>(p));
}
template <class D>
HWY_INLINE hn::Mask<D> SplatBool(D d, const void* p) {
  const hn::RebindToUnsigned<D> du;
  return hn::RebindMask(d, hn::Ne(hn::Set(du, uint32_t(*static_cast<const uint8_t*>(p))), hn::Zero(du)));
}

template <class D>
HWY_INLINE void StoreF32(D d, hn::Vec<D> v, void* p, size_t i) {
  hn::StoreU(v, d, static_cast<float*>(p) + i);
}
// v holds bf16-exact values (every bf16 result is rounded as it is computed):
// their high halves are the bf16 bits.
template <class D>
HWY_INLINE void StoreBf16(D d, hn::Vec<D> v, void* p, size_t i) {
  const hn::Rebind<uint16_t, D> d16;
  const hn::RebindToUnsigned<D> du;
  const hn::RebindToSigned<D> di;
  const auto high = hn::BitCast(di, hn::ShiftRight<16>(hn::BitCast(du, v)));
  hn::StoreU(hn::DemoteTo(d16, high), d16, static_cast<uint16_t*>(p) + i);
}
template <class D>
HWY_INLINE void StoreI32(D, hn::Vec<hn::RebindToSigned<D>> v, void* p, size_t i) {
  const hn::RebindToSigned<D> di;
  hn::StoreU(v, di, static_cast<int32_t*>(p) + i);
}
// Masks are of the float lanes; int32 values are selected and made from them.
template <class D>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> SelectI32(D, hn::Mask<D> m, hn::Vec<hn::RebindToSigned<D>> no,
                                                    hn::Vec<hn::RebindToSigned<D>> yes) {
  const hn::RebindToSigned<D> di;
  return hn::IfThenElse(hn::RebindMask(di, m), yes, no);
}
template <class D>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> MaskToI32(D, hn::Mask<D> m) {
  const hn::RebindToSigned<D> di;
  return hn::IfThenElseZero(hn::RebindMask(di, m), hn::Set(di, 1));
}
template <class D>
HWY_INLINE hn::Mask<D> I32ToMask(D d, hn::Vec<hn::RebindToSigned<D>> v) {
  const hn::RebindToSigned<D> di;
  return hn::RebindMask(d, hn::Not(hn::Eq(v, hn::Zero(di))));
}

// float -> int32 as the convert kernel: toward zero, saturated at the int32
// range, NaN -> 0. The value converted is first brought into the range (NaN
// made 0), so that the conversion instruction never sees one it cannot
// represent.
template <class D>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> F32ToI32(D d, hn::Vec<D> v) {
  const hn::RebindToSigned<D> di;
  const auto nan = hn::IsNaN(v);
  const auto high = hn::Ge(v, hn::Set(d, 2147483648.0f));  // 2^31 and above
  // The largest float below 2^31, and -2^31 (exact in int32).
  const auto x = hn::Max(hn::Min(hn::IfThenZeroElse(nan, v), hn::Set(d, 2147483520.0f)), hn::Set(d, -2147483648.0f));
  return hn::IfThenElse(hn::RebindMask(di, high), hn::Set(di, INT32_MAX), hn::ConvertTo(di, x));
}

// int32 division and remainder as the kernels compute them (XLA's rules):
// x / 0 = -1, x % 0 = x, INT32_MIN / -1 = INT32_MIN, INT32_MIN % -1 = 0;
// otherwise truncating. No vector instruction divides integers: each lane is
// divided on its own, never by zero nor INT32_MIN by -1.
HWY_INLINE int32_t DivLaneI32(int32_t a, int32_t b) {
  if (b == 0) return -1;
  if (b == -1) return int32_t(0u - uint32_t(a));  // wraps: INT32_MIN stays
  return a / b;
}
HWY_INLINE int32_t RemLaneI32(int32_t a, int32_t b) {
  if (b == 0) return a;
  if (b == -1) return 0;
  return a % b;
}
template <class D, class F>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> PerLaneI32(D, hn::Vec<hn::RebindToSigned<D>> a,
                                                     hn::Vec<hn::RebindToSigned<D>> b, F f) {
  const hn::RebindToSigned<D> di;
  HWY_ALIGN int32_t x[HWY_MAX_BYTES / sizeof(int32_t)];
  HWY_ALIGN int32_t y[HWY_MAX_BYTES / sizeof(int32_t)];
  hn::Store(a, di, x);
  hn::Store(b, di, y);
  for (size_t k = 0; k < hn::Lanes(di); ++k) x[k] = f(x[k], y[k]);
  return hn::Load(di, x);
}
template <class D>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> DivI32(D d, hn::Vec<hn::RebindToSigned<D>> a,
                                                 hn::Vec<hn::RebindToSigned<D>> b) {
  return PerLaneI32(d, a, b, DivLaneI32);
}
template <class D>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> RemI32(D d, hn::Vec<hn::RebindToSigned<D>> a,
                                                 hn::Vec<hn::RebindToSigned<D>> b) {
  return PerLaneI32(d, a, b, RemLaneI32);
}

// int32 shifts as the kernels compute them: a count outside [0, 32) (any
// negative one included) gives 0, or the sign fill for an arithmetic right
// shift. The vector shifts are given counts in range only.
template <class D>
HWY_INLINE hn::Mask<hn::RebindToSigned<D>> ShiftInRangeI32(D, hn::Vec<hn::RebindToSigned<D>> b) {
  const hn::RebindToSigned<D> di;
  return hn::Eq(hn::And(b, hn::Set(di, ~int32_t(31))), hn::Zero(di));
}
template <class D>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> ShiftLeftI32(D d, hn::Vec<hn::RebindToSigned<D>> a,
                                                       hn::Vec<hn::RebindToSigned<D>> b) {
  const hn::RebindToSigned<D> di;
  const hn::RebindToUnsigned<D> du;
  const auto count = hn::BitCast(du, hn::And(b, hn::Set(di, 31)));
  return hn::IfThenElseZero(ShiftInRangeI32(d, b), hn::BitCast(di, hn::Shl(hn::BitCast(du, a), count)));
}
template <class D>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> ShiftRightLogicalI32(D d, hn::Vec<hn::RebindToSigned<D>> a,
                                                               hn::Vec<hn::RebindToSigned<D>> b) {
  const hn::RebindToSigned<D> di;
  const hn::RebindToUnsigned<D> du;
  const auto count = hn::BitCast(du, hn::And(b, hn::Set(di, 31)));
  return hn::IfThenElseZero(ShiftInRangeI32(d, b), hn::BitCast(di, hn::Shr(hn::BitCast(du, a), count)));
}
template <class D>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> ShiftRightArithmeticI32(D d, hn::Vec<hn::RebindToSigned<D>> a,
                                                                  hn::Vec<hn::RebindToSigned<D>> b) {
  const hn::RebindToSigned<D> di;
  return hn::Shr(a, hn::IfThenElse(ShiftInRangeI32(d, b), b, hn::Set(di, 31)));
}

// int32 x to the power e as the integer_pow kernel computes it: the exponent
// taken as int32, wrapping products by squaring; a negative exponent gives 1
// for x = 1, +-1 for x = -1 and 0 otherwise.
template <class D>
HWY_INLINE hn::Vec<hn::RebindToSigned<D>> IntegerPowI32(D, hn::Vec<hn::RebindToSigned<D>> v, int64_t exponent) {
  const hn::RebindToSigned<D> di;
  const uint32_t e = uint32_t(uint64_t(exponent));
  if (e >> 31) {
    const auto minus_one = hn::Set(di, -1), one = hn::Set(di, 1);
    const auto odd = (e & 1) ? minus_one : one;
    return hn::IfThenElse(hn::Eq(v, one), one, hn::IfThenElseZero(hn::Eq(v, minus_one), odd));
  }
  // Unsigned lanes: products wrap around without overflowing.
  const hn::RebindToUnsigned<D> du;
  auto result = hn::Set(du, 1u), base = hn::BitCast(du, v);
  for (uint32_t k = e; k; k >>= 1) {
    if (k & 1) result = hn::Mul(result, base);
    base = hn::Mul(base, base);
  }
  return hn::BitCast(di, result);
}

template <class D>
HWY_INLINE void StoreBool(D d, hn::Mask<D> m, void* p, size_t i) {
  const hn::Rebind<uint8_t, D> d8;
  const hn::RebindToSigned<D> di;
  const auto ones = hn::IfThenElseZero(hn::RebindMask(di, m), hn::Set(di, 1));
  hn::StoreU(hn::DemoteTo(d8, ones), d8, static_cast<uint8_t*>(p) + i);
}

// Runs body(slots, index) over [0, m) a vector at a time; the partial vector
// at the end goes through `tail`, which stages the slots the body touches in
// local buffers. Not unrolled: two bodies a iteration spilled the registers of
// long bodies on AVX2 (16 of them), making the GELU loop with its derivative
// a third slower, and gained nothing measurable on AVX-512.
template <class D, class Body, class Tail>
HWY_INLINE void ForEachVector(D d, void* const* s, int64_t m, const Body& body, const Tail& tail) {
  const size_t n = size_t(m), N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) body(s, i);
  if (i < n) tail(i, n - i);
}

// Copies r elements of `width` bytes at index i of a slot into / out of a
// staging buffer.
HWY_INLINE void StageIn(void* buf, const void* slot, size_t i, size_t r, size_t width) {
  std::memcpy(buf, static_cast<const char*>(slot) + i * width, r * width);
}
HWY_INLINE void StageOut(void* slot, const void* buf, size_t i, size_t r, size_t width) {
  std::memcpy(static_cast<char*>(slot) + i * width, buf, r * width);
}

}  // namespace HWY_NAMESPACE
}  // namespace pax::cpu
HWY_AFTER_NAMESPACE();

#endif  // PAX_BACKEND_CPU_FUSED_CODEGEN_PRELUDE_INL_H_
