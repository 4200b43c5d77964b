// Vectorised elementwise kernels, compiled once per SIMD target by Highway and
// chosen at run time. Transcendentals use Highway's contrib/math with fix-ups so
// that special values (NaN, +-inf, overflow) follow IEEE / XLA semantics;
// erf and erf_inv are rational / polynomial approximations accurate to a few
// ulp in f32. f64 transcendentals use the C library. bf16 and f16 operands are
// widened to f32 in blocks of kBlock elements and rounded back.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "pax/backend/cpu/elementwise_hwy.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/cache_control.h>
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include "pax/backend/cpu/elementwise_ops-inl.h"  // per-element operations, shared with generated code

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "pax/backend/cpu/elementwise.h"
#include "pax/core/error.h"

HWY_BEFORE_NAMESPACE();
namespace pax::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr size_t kBlock = 512;  // f32 staging block for bf16 / f16 (2 KiB)

// ---------------------------------------------------------------------------
// Loops. Whole vectors first, then the tail through a small padded buffer.

template <class T, class Op>
HWY_INLINE void Map1(const T* x, T* y, size_t n, const Op& op) {
  const hn::ScalableTag<T> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(op(d, hn::LoadU(d, x + i)), d, y + i);
  if (i < n) {
    HWY_ALIGN T buf[64] = {};
    std::copy(x + i, x + n, buf);
    hn::Store(op(d, hn::Load(d, buf)), d, buf);
    std::copy(buf, buf + (n - i), y + i);
  }
}

template <class T, class Op>
HWY_INLINE void Map2(const T* a, const T* b, T* y, size_t n, const Op& op) {
  const hn::ScalableTag<T> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  // Large outputs bypass the cache (no read-for-ownership of the destination).
  const bool stream = n * sizeof(T) >= (size_t(4) << 20) && (reinterpret_cast<uintptr_t>(y) % 64) == 0;
  if (stream) {
    for (; i + N <= n; i += N) hn::Stream(op(d, hn::LoadU(d, a + i), hn::LoadU(d, b + i)), d, y + i);
    hwy::FlushStream();
  } else {
    for (; i + N <= n; i += N) hn::StoreU(op(d, hn::LoadU(d, a + i), hn::LoadU(d, b + i)), d, y + i);
  }
  if (i < n) {
    HWY_ALIGN T ba[64] = {};
    HWY_ALIGN T bb[64] = {};
    std::copy(a + i, a + n, ba);
    std::copy(b + i, b + n, bb);
    hn::Store(op(d, hn::Load(d, ba), hn::Load(d, bb)), d, ba);
    std::copy(ba, ba + (n - i), y + i);
  }
}

// ---------------------------------------------------------------------------
// bf16 / f16 <-> f32 conversion of contiguous ranges.

void Bf16ToF32(const uint16_t* x, float* y, size_t n) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<uint16_t, decltype(df)> du16;
  const hn::Rebind<uint32_t, decltype(df)> du32;
  const size_t N = hn::Lanes(df);
  size_t i = 0;
  for (; i + N <= n; i += N) {
    hn::StoreU(hn::BitCast(df, hn::ShiftLeft<16>(hn::PromoteTo(du32, hn::LoadU(du16, x + i)))), df, y + i);
  }
  for (; i < n; ++i) y[i] = bf16_to_float(x[i]);
}

void F32ToBf16(const float* x, uint16_t* y, size_t n) {
  const hn::ScalableTag<float> df;
  const hn::Rebind<uint16_t, decltype(df)> du16;
  const hn::Rebind<uint32_t, decltype(df)> du32;
  const hn::Rebind<int32_t, decltype(df)> di32;
  const size_t N = hn::Lanes(df);
  size_t i = 0;
  const auto k7fff = hn::Set(du32, 0x7fffu);
  const auto kOne = hn::Set(du32, 1u);
  const auto kQuiet = hn::Set(du32, 0x00400000u);
  for (; i + N <= n; i += N) {
    const auto v = hn::LoadU(df, x + i);
    const auto bits = hn::BitCast(du32, v);
    const auto lsb = hn::And(hn::ShiftRight<16>(bits), kOne);
    const auto rounded = hn::Add(bits, hn::Add(lsb, k7fff));
    const auto nan_mask = hn::RebindMask(du32, hn::IsNaN(v));
    const auto out = hn::ShiftRight<16>(hn::IfThenElse(nan_mask, hn::Or(bits, kQuiet), rounded));
    hn::StoreU(hn::DemoteTo(du16, hn::BitCast(di32, out)), du16, y + i);
  }
  for (; i < n; ++i) y[i] = float_to_bf16(x[i]);
}

// Highway's f16 conversions are exact (NaN kept, round to nearest even) only
// where F16C does them; other targets use the portable scalar conversions.
#define PAX_HAS_F16C (HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL)

void F16ToF32(const uint16_t* x, float* y, size_t n) {
  size_t i = 0;
#if PAX_HAS_F16C
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> df16;
  const size_t N = hn::Lanes(df);
  const auto* xh = reinterpret_cast<const hwy::float16_t*>(x);
  for (; i + N <= n; i += N) hn::StoreU(hn::PromoteTo(df, hn::LoadU(df16, xh + i)), df, y + i);
#endif
  for (; i < n; ++i) y[i] = f16_to_float(x[i]);
}

void F32ToF16(const float* x, uint16_t* y, size_t n) {
#if PAX_HAS_F16C
  const hn::ScalableTag<float> df;
  const hn::Rebind<hwy::float16_t, decltype(df)> df16;
  const size_t N = hn::Lanes(df);
  size_t i = 0;
  auto* yh = reinterpret_cast<hwy::float16_t*>(y);
  for (; i + N <= n; i += N) hn::StoreU(hn::DemoteTo(df16, hn::LoadU(df, x + i)), df16, yh + i);
#else
  size_t i = 0;
#endif
  for (; i < n; ++i) y[i] = float_to_f16(x[i]);
}

void LoadF32(DType dtype, const void* x, float* y, size_t n) {
  if (dtype == DType::bf16) Bf16ToF32(static_cast<const uint16_t*>(x), y, n);
  else F16ToF32(static_cast<const uint16_t*>(x), y, n);
}

void StoreF32(DType dtype, const float* x, void* y, size_t n) {
  if (dtype == DType::bf16) F32ToBf16(x, static_cast<uint16_t*>(y), n);
  else F32ToF16(x, static_cast<uint16_t*>(y), n);
}

struct IdentityOp {
  template <class D, class V>
  V operator()(D, V x) const {
    return x;
  }
};

// An operation whose results are rounded to bf16 precision.
template <class Op>
struct RoundedOp {
  Op op;
  template <class D, class... V>
  auto operator()(D d, V... v) const {
    return RoundBf16(d, op(d, v...));
  }
};

// Kernels are written once over a wrapper of their vector operations: Plain
// leaves them as they are, RoundBf16Results rounds each result.
struct Plain {
  static constexpr bool kRound = false;
  template <class Op>
  Op operator()(Op op) const {
    return op;
  }
};
struct RoundBf16Results {
  static constexpr bool kRound = true;
  template <class Op>
  RoundedOp<Op> operator()(Op op) const {
    return {op};
  }
};

void RoundToBf16(const float* x, float* y, size_t n) { Map1(x, y, n, RoundedOp<IdentityOp>{}); }

// Calls body(x32, i, m) for consecutive blocks [i, i + m) of a 16-bit float
// operand widened to f32 (and body(a32, b32, i, m) for two operands).
template <class Body>
HWY_INLINE void ForEachWidenedBlock(DType dtype, const void* x, size_t n, const Body& body) {
  HWY_ALIGN float buf[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = std::min(kBlock, n - i);
    LoadF32(dtype, static_cast<const uint16_t*>(x) + i, buf, m);
    body(buf, i, m);
  }
}
template <class Body>
HWY_INLINE void ForEachWidenedBlock(DType dtype, const void* a, const void* b, size_t n, const Body& body) {
  HWY_ALIGN float ba[kBlock];
  HWY_ALIGN float bb[kBlock];
  for (size_t i = 0; i < n; i += kBlock) {
    const size_t m = std::min(kBlock, n - i);
    LoadF32(dtype, static_cast<const uint16_t*>(a) + i, ba, m);
    LoadF32(dtype, static_cast<const uint16_t*>(b) + i, bb, m);
    body(ba, bb, i, m);
  }
}

// ---------------------------------------------------------------------------
// Float unary operations (f32 vectors; f64 where Highway covers it).

template <class Op>
void SinCosF32(const float* x, float* y, size_t n, const Op& op, float (*libm)(float)) {
  // Blocks whose inputs all lie in Highway's accurate range take the vector path.
  for (size_t i = 0; i < n; i += kBlock) {
    size_t m = std::min(kBlock, n - i);
    bool in_range = true;
    for (size_t j = 0; j < m; ++j) in_range &= std::fabs(x[i + j]) <= 39000.0f;
    if (in_range) {
      Map1(x + i, y + i, m, op);
    } else {
      for (size_t j = 0; j < m; ++j) y[i + j] = libm(x[i + j]);
    }
  }
}

// The f32 kernel of every operation of elementwise_ops.def whose f32 column
// is `map`; sin and cos (`own`) have cases of their own.
// clang-format off
#define PAX_F32_CASE_map(id, functor) case UnaryOp::id: return Map1(x, y, n, w(functor()));
#define PAX_F32_CASE_own(id, functor)
// clang-format on

template <class Wrap>
void UnaryF32With(UnaryOp op, const float* x, float* y, size_t n, Wrap w) {
  switch (op) {
#define PAX_UNARY_FLOAT_OP(id, functor, f32, f64) PAX_F32_CASE_##f32(id, functor)
#include "pax/ir/elementwise_ops.def"
    case UnaryOp::sin:
    case UnaryOp::cos:
      // The C library path of out-of-range blocks is rounded afterwards.
      if (op == UnaryOp::sin) SinCosF32(x, y, n, SinOp(), [](float v) { return std::sin(v); });
      else SinCosF32(x, y, n, CosOp(), [](float v) { return std::cos(v); });
      if constexpr (Wrap::kRound) RoundToBf16(y, y, n);
      return;
    case UnaryOp::not_: break;
  }
  PAX_FAIL("unary kernel: op not defined for float32");
}
#undef PAX_F32_CASE_map
#undef PAX_F32_CASE_own

void UnaryF32(UnaryOp op, const float* x, float* y, size_t n) { UnaryF32With(op, x, y, n, Plain()); }
void UnaryRoundBf16(UnaryOp op, const float* x, float* y, size_t n) { UnaryF32With(op, x, y, n, RoundBf16Results()); }

// erf_inv in f64: f32 estimate refined by Newton steps on the C library's erf.
double ErfInvF64(double x) {
  if (std::isnan(x) || std::fabs(x) > 1) return std::numeric_limits<double>::quiet_NaN();
  if (std::fabs(x) == 1) return std::copysign(std::numeric_limits<double>::infinity(), x);
  float xf = float(x);
  float yf;
  const hn::ScalableTag<float> d;
  HWY_ALIGN float buf[64] = {};
  buf[0] = xf;
  hn::Store(ErfInvOp()(d, hn::Load(d, buf)), d, buf);
  yf = buf[0];
  double y = std::isfinite(yf) ? double(yf) : std::copysign(5.9, x);
  // Newton steps; in the tails on erfc(|y|) = 1 - |x| (exact in double), where
  // erf(y) - x would cancel.
  const bool tail = std::fabs(x) > 0.5;
  const double t = 1.0 - std::fabs(x);
  double ay = std::fabs(y);
  for (int it = 0; it < 4; ++it) {
    double slope = 1.1283791670955126 * std::exp(-ay * ay);
    double err = tail ? t - std::erfc(ay) : std::erf(ay) - std::fabs(x);
    ay -= err / slope;
  }
  return std::copysign(ay, x);
}

// f64 column `map`: the functor over f64 vectors; an expression of `v`:
// that expression per element.
struct MapColumn {};

template <class Functor, class Scalar>
HWY_INLINE void UnaryF64Column(const double* x, double* y, size_t n, Scalar scalar) {
  if constexpr (std::is_same_v<decltype(scalar(0.0)), MapColumn>) {
    Map1(x, y, n, Functor());
  } else {
    for (size_t i = 0; i < n; ++i) y[i] = scalar(x[i]);
  }
}

void UnaryF64(UnaryOp op, const double* x, double* y, size_t n) {
  [[maybe_unused]] constexpr MapColumn map{};
  switch (op) {
#define PAX_UNARY_FLOAT_OP(id, functor, f32, f64) \
  case UnaryOp::id:                               \
    return UnaryF64Column<functor>(x, y, n, [map](double v) { return f64; });
#include "pax/ir/elementwise_ops.def"
    case UnaryOp::not_: break;
  }
  PAX_FAIL("unary kernel: op not defined for float64");
}

template <class T>
void UnaryInt(UnaryOp op, const T* x, T* y, size_t n) {
  using U = std::make_unsigned_t<T>;
  switch (op) {
    case UnaryOp::neg:
      for (size_t i = 0; i < n; ++i) y[i] = T(U(0) - U(x[i]));
      return;
    case UnaryOp::abs:
      for (size_t i = 0; i < n; ++i) y[i] = x[i] < 0 ? T(U(0) - U(x[i])) : x[i];
      return;
    case UnaryOp::sign:
      for (size_t i = 0; i < n; ++i) y[i] = T((x[i] > 0) - (x[i] < 0));
      return;
    case UnaryOp::not_:
      for (size_t i = 0; i < n; ++i) y[i] = T(~x[i]);
      return;
    default: break;
  }
  PAX_FAIL("unary kernel: op not defined for integers");
}

void Unary(UnaryOp op, DType dtype, const void* x, void* y, size_t n) {
  switch (dtype) {
    case DType::f32: return UnaryF32(op, static_cast<const float*>(x), static_cast<float*>(y), n);
    case DType::f64: return UnaryF64(op, static_cast<const double*>(x), static_cast<double*>(y), n);
    case DType::bf16:
    case DType::f16:
      return ForEachWidenedBlock(dtype, x, n, [&](float* buf, size_t i, size_t m) {
        UnaryF32(op, buf, buf, m);
        StoreF32(dtype, buf, static_cast<uint16_t*>(y) + i, m);
      });
    case DType::i32: return UnaryInt(op, static_cast<const int32_t*>(x), static_cast<int32_t*>(y), n);
    case DType::i64: return UnaryInt(op, static_cast<const int64_t*>(x), static_cast<int64_t*>(y), n);
    case DType::u8: return UnaryInt(op, static_cast<const uint8_t*>(x), static_cast<uint8_t*>(y), n);
    case DType::u32: return UnaryInt(op, static_cast<const uint32_t*>(x), static_cast<uint32_t*>(y), n);
    case DType::bool_:
      if (op == UnaryOp::not_) {
        const bool* bx = static_cast<const bool*>(x);
        bool* by = static_cast<bool*>(y);
        for (size_t i = 0; i < n; ++i) by[i] = !bx[i];
        return;
      }
      break;
  }
  PAX_FAIL("unary kernel: op not defined for ", dtype_name(dtype));
}

// ---------------------------------------------------------------------------
// Binary operations.

template <class T, class Wrap = Plain>
void BinaryFloat(BinaryOp op, const T* a, const T* b, T* y, size_t n, Wrap w = {}) {
  switch (op) {
// clang-format off
#define PAX_BINARY_FLOAT_OP(id, functor) case BinaryOp::id: return Map2(a, b, y, n, w(functor()));
#include "pax/ir/elementwise_ops.def"
    // clang-format on
    case BinaryOp::rem:
      for (size_t i = 0; i < n; ++i) y[i] = std::fmod(a[i], b[i]);
      break;
    case BinaryOp::pow:
      for (size_t i = 0; i < n; ++i) y[i] = std::pow(a[i], b[i]);
      break;
    default: PAX_FAIL("binary kernel: op not defined for floats");
  }
  if constexpr (Wrap::kRound) RoundToBf16(y, y, n);
}

void BinaryRoundBf16(BinaryOp op, const float* a, const float* b, float* y, size_t n) {
  BinaryFloat(op, a, b, y, n, RoundBf16Results());
}

// Integer semantics follow XLA: wrap-around arithmetic; x / 0 = -1, x % 0 = x,
// MIN / -1 = MIN, MIN % -1 = 0; shifts by >= the bit width give 0 (or the
// sign fill for arithmetic right shifts).
template <class T>
T IntDiv(T a, T b) {
  if (b == 0) return T(-1);
  if constexpr (std::is_signed_v<T>) {
    if (b == T(-1) && a == std::numeric_limits<T>::min()) return a;
  }
  return T(a / b);
}
template <class T>
T IntRem(T a, T b) {
  if (b == 0) return a;
  if constexpr (std::is_signed_v<T>) {
    if (b == T(-1)) return 0;
  }
  return T(a % b);
}
template <class T>
T IntPow(T base, T exponent) {
  using U = std::make_unsigned_t<T>;
  if constexpr (std::is_signed_v<T>) {
    if (exponent < 0) {
      if (base == 1) return 1;
      if (base == -1) return (exponent & 1) ? T(-1) : T(1);
      return 0;
    }
  }
  U result = 1, b = U(base);
  for (U e = U(exponent); e; e >>= 1) {
    if (e & 1) result *= b;
    b *= b;
  }
  return T(result);
}

template <class T>
void BinaryInt(BinaryOp op, const T* a, const T* b, T* y, size_t n) {
  using U = std::make_unsigned_t<T>;
  constexpr U kBits = U(sizeof(T) * 8);
  switch (op) {
    case BinaryOp::add:
      for (size_t i = 0; i < n; ++i) y[i] = T(U(a[i]) + U(b[i]));
      return;
    case BinaryOp::sub:
      for (size_t i = 0; i < n; ++i) y[i] = T(U(a[i]) - U(b[i]));
      return;
    case BinaryOp::mul:
      for (size_t i = 0; i < n; ++i) y[i] = T(U(a[i]) * U(b[i]));
      return;
    case BinaryOp::div:
      for (size_t i = 0; i < n; ++i) y[i] = IntDiv(a[i], b[i]);
      return;
    case BinaryOp::rem:
      for (size_t i = 0; i < n; ++i) y[i] = IntRem(a[i], b[i]);
      return;
    case BinaryOp::pow:
      for (size_t i = 0; i < n; ++i) y[i] = IntPow(a[i], b[i]);
      return;
    case BinaryOp::max:
      for (size_t i = 0; i < n; ++i) y[i] = std::max(a[i], b[i]);
      return;
    case BinaryOp::min:
      for (size_t i = 0; i < n; ++i) y[i] = std::min(a[i], b[i]);
      return;
    case BinaryOp::and_:
      for (size_t i = 0; i < n; ++i) y[i] = T(a[i] & b[i]);
      return;
    case BinaryOp::or_:
      for (size_t i = 0; i < n; ++i) y[i] = T(a[i] | b[i]);
      return;
    case BinaryOp::xor_:
      for (size_t i = 0; i < n; ++i) y[i] = T(a[i] ^ b[i]);
      return;
    case BinaryOp::shift_left:
      for (size_t i = 0; i < n; ++i) y[i] = U(b[i]) >= kBits ? T(0) : T(U(a[i]) << U(b[i]));
      return;
    case BinaryOp::shift_right_logical:
      for (size_t i = 0; i < n; ++i) y[i] = U(b[i]) >= kBits ? T(0) : T(U(a[i]) >> U(b[i]));
      return;
    case BinaryOp::shift_right_arithmetic:
      for (size_t i = 0; i < n; ++i) {
        using S = std::make_signed_t<T>;
        U s = std::min<U>(U(b[i]), kBits - 1);
        y[i] = T(S(a[i]) >> s);
      }
      return;
  }
}

void BinaryBool(BinaryOp op, const bool* a, const bool* b, bool* y, size_t n) {
  switch (op) {
    case BinaryOp::and_:
    case BinaryOp::min:
      for (size_t i = 0; i < n; ++i) y[i] = a[i] && b[i];
      return;
    case BinaryOp::or_:
    case BinaryOp::max:
      for (size_t i = 0; i < n; ++i) y[i] = a[i] || b[i];
      return;
    case BinaryOp::xor_:
      for (size_t i = 0; i < n; ++i) y[i] = a[i] != b[i];
      return;
    default: break;
  }
  PAX_FAIL("binary kernel: op not defined for bool");
}

void Binary(BinaryOp op, DType dtype, const void* a, const void* b, void* y, size_t n) {
  switch (dtype) {
    case DType::f32:
      return BinaryFloat(op, static_cast<const float*>(a), static_cast<const float*>(b), static_cast<float*>(y), n);
    case DType::f64:
      return BinaryFloat(op, static_cast<const double*>(a), static_cast<const double*>(b), static_cast<double*>(y), n);
    case DType::bf16:
    case DType::f16:
      return ForEachWidenedBlock(dtype, a, b, n, [&](float* ba, float* bb, size_t i, size_t m) {
        BinaryFloat(op, ba, bb, ba, m);
        StoreF32(dtype, ba, static_cast<uint16_t*>(y) + i, m);
      });
    case DType::i32:
      return BinaryInt(op, static_cast<const int32_t*>(a), static_cast<const int32_t*>(b), static_cast<int32_t*>(y), n);
    case DType::i64:
      return BinaryInt(op, static_cast<const int64_t*>(a), static_cast<const int64_t*>(b), static_cast<int64_t*>(y), n);
    case DType::u8:
      return BinaryInt(op, static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b), static_cast<uint8_t*>(y), n);
    case DType::u32:
      return BinaryInt(op, static_cast<const uint32_t*>(a), static_cast<const uint32_t*>(b), static_cast<uint32_t*>(y),
                       n);
    case DType::bool_:
      return BinaryBool(op, static_cast<const bool*>(a), static_cast<const bool*>(b), static_cast<bool*>(y), n);
  }
}

// ---------------------------------------------------------------------------
// Comparisons, is_finite, integer_pow, select_n.

template <class T, class F>
HWY_INLINE void CompareLoop(const T* a, const T* b, bool* y, size_t n, F f) {
  for (size_t i = 0; i < n; ++i) y[i] = f(a[i], b[i]);
}

template <class T>
void CompareTyped(CompareOp op, const T* a, const T* b, bool* y, size_t n) {
  switch (op) {
    case CompareOp::eq: return CompareLoop(a, b, y, n, [](T u, T v) { return u == v; });
    case CompareOp::ne: return CompareLoop(a, b, y, n, [](T u, T v) { return u != v; });
    case CompareOp::lt: return CompareLoop(a, b, y, n, [](T u, T v) { return u < v; });
    case CompareOp::le: return CompareLoop(a, b, y, n, [](T u, T v) { return u <= v; });
    case CompareOp::gt: return CompareLoop(a, b, y, n, [](T u, T v) { return u > v; });
    case CompareOp::ge: return CompareLoop(a, b, y, n, [](T u, T v) { return u >= v; });
  }
}

void Compare(CompareOp op, DType dtype, const void* a, const void* b, bool* y, size_t n) {
  switch (dtype) {
    case DType::f32: return CompareTyped(op, static_cast<const float*>(a), static_cast<const float*>(b), y, n);
    case DType::f64: return CompareTyped(op, static_cast<const double*>(a), static_cast<const double*>(b), y, n);
    case DType::bf16:
    case DType::f16:
      return ForEachWidenedBlock(dtype, a, b, n,
                                 [&](float* ba, float* bb, size_t i, size_t m) { CompareTyped(op, ba, bb, y + i, m); });
    case DType::i32: return CompareTyped(op, static_cast<const int32_t*>(a), static_cast<const int32_t*>(b), y, n);
    case DType::i64: return CompareTyped(op, static_cast<const int64_t*>(a), static_cast<const int64_t*>(b), y, n);
    case DType::u8: return CompareTyped(op, static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b), y, n);
    case DType::u32: return CompareTyped(op, static_cast<const uint32_t*>(a), static_cast<const uint32_t*>(b), y, n);
    case DType::bool_: return CompareTyped(op, static_cast<const bool*>(a), static_cast<const bool*>(b), y, n);
  }
}

void IsFinite(DType dtype, const void* x, bool* y, size_t n) {
  switch (dtype) {
    case DType::f32: {
      const float* xf = static_cast<const float*>(x);
      for (size_t i = 0; i < n; ++i) y[i] = std::isfinite(xf[i]);
      return;
    }
    case DType::f64: {
      const double* xd = static_cast<const double*>(x);
      for (size_t i = 0; i < n; ++i) y[i] = std::isfinite(xd[i]);
      return;
    }
    case DType::bf16:
    case DType::f16: {
      // Exponent bits all ones means inf or NaN.
      const uint16_t* xh = static_cast<const uint16_t*>(x);
      const uint16_t mask = dtype == DType::bf16 ? 0x7f80 : 0x7c00;
      for (size_t i = 0; i < n; ++i) y[i] = (xh[i] & mask) != mask;
      return;
    }
    default: break;
  }
  PAX_FAIL("is_finite kernel: dtype ", dtype_name(dtype), " is not floating");
}

template <class T>
void IntegerPowTyped(int64_t e, const T* x, T* y, size_t n) {
  const bool invert = e < 0;
  uint64_t m = invert ? uint64_t(-(e + 1)) + 1 : uint64_t(e);
  // Vectors first: the same multiplications in the same order as the scalar loop.
  const hn::ScalableTag<T> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + N <= n; i += N) hn::StoreU(IntegerPowVec(d, hn::LoadU(d, x + i), e), d, y + i);
  for (; i < n; ++i) {
    T base = x[i], acc = T(1);
    for (uint64_t k = m; k; k >>= 1) {
      if (k & 1) acc = T(acc * base);
      base = T(base * base);
    }
    y[i] = invert ? T(T(1) / acc) : acc;
  }
}

void IntegerPow(DType dtype, int64_t e, const void* x, void* y, size_t n) {
  switch (dtype) {
    case DType::f32: return IntegerPowTyped(e, static_cast<const float*>(x), static_cast<float*>(y), n);
    case DType::f64: return IntegerPowTyped(e, static_cast<const double*>(x), static_cast<double*>(y), n);
    case DType::bf16:
    case DType::f16:
      return ForEachWidenedBlock(dtype, x, n, [&](float* buf, size_t i, size_t m) {
        IntegerPowTyped(e, buf, buf, m);
        StoreF32(dtype, buf, static_cast<uint16_t*>(y) + i, m);
      });
    case DType::i32: {
      const int32_t* xi = static_cast<const int32_t*>(x);
      int32_t* yi = static_cast<int32_t*>(y);
      for (size_t i = 0; i < n; ++i) yi[i] = IntPow<int32_t>(xi[i], int32_t(e));
      return;
    }
    case DType::i64: {
      const int64_t* xi = static_cast<const int64_t*>(x);
      int64_t* yi = static_cast<int64_t*>(y);
      for (size_t i = 0; i < n; ++i) yi[i] = IntPow<int64_t>(xi[i], e);
      return;
    }
    case DType::u8: {
      const uint8_t* xi = static_cast<const uint8_t*>(x);
      uint8_t* yi = static_cast<uint8_t*>(y);
      for (size_t i = 0; i < n; ++i) yi[i] = e < 0 ? uint8_t(xi[i] == 1) : IntPow<uint8_t>(xi[i], uint8_t(e));
      return;
    }
    case DType::u32: {
      const uint32_t* xi = static_cast<const uint32_t*>(x);
      uint32_t* yi = static_cast<uint32_t*>(y);
      for (size_t i = 0; i < n; ++i) yi[i] = e < 0 ? uint32_t(xi[i] == 1) : IntPow<uint32_t>(xi[i], uint32_t(e));
      return;
    }
    case DType::bool_: break;
  }
  PAX_FAIL("integer_pow kernel: dtype ", dtype_name(dtype), " is not numeric");
}

template <class T, class W>
void SelectTyped(const W* which, const void* const* cases, size_t num_cases, T* y, size_t n) {
  if (num_cases == 2) {
    const T* c0 = static_cast<const T*>(cases[0]);
    const T* c1 = static_cast<const T*>(cases[1]);
    size_t i = 0;
    if constexpr (std::is_same_v<W, bool> && (sizeof(T) == 2 || sizeof(T) == 4)) {
      // The bytes of a bool selector widened to a mask over the case lanes.
      const hn::ScalableTag<T> d;
      const hn::Rebind<uint8_t, decltype(d)> d8;
      const size_t N = hn::Lanes(d);
      const uint8_t* w = reinterpret_cast<const uint8_t*>(which);
      for (; i + N <= n; i += N) {
        const auto mask = hn::Ne(hn::PromoteTo(d, hn::LoadU(d8, w + i)), hn::Zero(d));
        hn::StoreU(hn::IfThenElse(mask, hn::LoadU(d, c1 + i), hn::LoadU(d, c0 + i)), d, y + i);
      }
    }
    // An int32 selector is clamped to the cases: below 1 picks case 0.
    for (; i < n; ++i) y[i] = which[i] > 0 ? c1[i] : c0[i];
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    int64_t w = int64_t(which[i]);
    w = std::clamp<int64_t>(w, 0, int64_t(num_cases) - 1);
    y[i] = static_cast<const T*>(cases[w])[i];
  }
}

void SelectN(DType which_dtype, const void* which, const void* const* cases, size_t num_cases, size_t width, void* y,
             size_t n) {
  auto run = [&](auto t) {
    using T = decltype(t);
    if (which_dtype == DType::bool_) {
      SelectTyped(static_cast<const bool*>(which), cases, num_cases, static_cast<T*>(y), n);
    } else {
      SelectTyped(static_cast<const int32_t*>(which), cases, num_cases, static_cast<T*>(y), n);
    }
  };
  switch (width) {
    case 1: return run(uint8_t{});
    case 2: return run(uint16_t{});
    case 4: return run(uint32_t{});
    case 8: return run(uint64_t{});
  }
}

// ---------------------------------------------------------------------------
// Conversions.

template <class S, class T>
HWY_INLINE T ConvertOne(S s) {
  if constexpr (std::is_same_v<T, bool>) {
    return s != S(0);
  } else if constexpr (std::is_floating_point_v<T> || std::is_same_v<S, bool> || std::is_integral_v<S>) {
    return T(s);
  } else {
    // float -> integer: saturate, NaN -> 0.
    if (std::isnan(s)) return T(0);
    if (s <= S(std::numeric_limits<T>::min())) return std::numeric_limits<T>::min();
    if (s >= S(std::numeric_limits<T>::max())) return std::numeric_limits<T>::max();
    return T(s);
  }
}

template <class S, class T>
void ConvertTyped(const S* x, T* y, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] = ConvertOne<S, T>(x[i]);
}

template <class S>
void ConvertFrom(const S* x, DType to, void* y, size_t n) {
  switch (to) {
    case DType::bool_: return ConvertTyped(x, static_cast<bool*>(y), n);
    case DType::u8: return ConvertTyped(x, static_cast<uint8_t*>(y), n);
    case DType::u32: return ConvertTyped(x, static_cast<uint32_t*>(y), n);
    case DType::i32: return ConvertTyped(x, static_cast<int32_t*>(y), n);
    case DType::i64: return ConvertTyped(x, static_cast<int64_t*>(y), n);
    case DType::f32: return ConvertTyped(x, static_cast<float*>(y), n);
    case DType::f64: return ConvertTyped(x, static_cast<double*>(y), n);
    case DType::bf16:
    case DType::f16: {
      HWY_ALIGN float buf[kBlock];
      for (size_t i = 0; i < n; i += kBlock) {
        size_t m = std::min(kBlock, n - i);
        ConvertTyped(x + i, buf, m);
        StoreF32(to, buf, static_cast<uint16_t*>(y) + i, m);
      }
      return;
    }
  }
}

void Convert(DType from, const void* x, DType to, void* y, size_t n) {
  if (from == to) {
    std::memcpy(y, x, n * itemsize(from));
    return;
  }
  switch (from) {
    case DType::bool_: return ConvertFrom(static_cast<const bool*>(x), to, y, n);
    case DType::u8: return ConvertFrom(static_cast<const uint8_t*>(x), to, y, n);
    case DType::u32: return ConvertFrom(static_cast<const uint32_t*>(x), to, y, n);
    case DType::i32: return ConvertFrom(static_cast<const int32_t*>(x), to, y, n);
    case DType::i64: return ConvertFrom(static_cast<const int64_t*>(x), to, y, n);
    case DType::f32:
      if (to == DType::bf16 || to == DType::f16) return StoreF32(to, static_cast<const float*>(x), y, n);
      return ConvertFrom(static_cast<const float*>(x), to, y, n);
    case DType::f64: return ConvertFrom(static_cast<const double*>(x), to, y, n);
    case DType::bf16:
    case DType::f16: {
      if (to == DType::f32) return LoadF32(from, x, static_cast<float*>(y), n);
      HWY_ALIGN float buf[kBlock];
      for (size_t i = 0; i < n; i += kBlock) {
        size_t m = std::min(kBlock, n - i);
        LoadF32(from, static_cast<const uint16_t*>(x) + i, buf, m);
        if (to == DType::bf16 || to == DType::f16) {
          StoreF32(to, buf, static_cast<uint16_t*>(y) + i, m);
        } else {
          ConvertFrom(buf, to, static_cast<char*>(y) + i * itemsize(to), m);
        }
      }
      return;
    }
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace pax::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace pax::cpu {

HWY_EXPORT(Unary);
HWY_EXPORT(Binary);
HWY_EXPORT(Compare);
HWY_EXPORT(IsFinite);
HWY_EXPORT(IntegerPow);
HWY_EXPORT(Convert);
HWY_EXPORT(SelectN);
HWY_EXPORT(UnaryRoundBf16);
HWY_EXPORT(BinaryRoundBf16);
HWY_EXPORT(RoundToBf16);

void unary(UnaryOp op, DType dtype, const void* x, void* y, size_t n) {
  HWY_DYNAMIC_DISPATCH(Unary)(op, dtype, x, y, n);
}
void binary(BinaryOp op, DType dtype, const void* a, const void* b, void* y, size_t n) {
  HWY_DYNAMIC_DISPATCH(Binary)(op, dtype, a, b, y, n);
}
void compare(CompareOp op, DType dtype, const void* a, const void* b, bool* y, size_t n) {
  HWY_DYNAMIC_DISPATCH(Compare)(op, dtype, a, b, y, n);
}
void is_finite(DType dtype, const void* x, bool* y, size_t n) { HWY_DYNAMIC_DISPATCH(IsFinite)(dtype, x, y, n); }
void integer_pow(DType dtype, int64_t exponent, const void* x, void* y, size_t n) {
  HWY_DYNAMIC_DISPATCH(IntegerPow)(dtype, exponent, x, y, n);
}
void convert(DType from, const void* x, DType to, void* y, size_t n) {
  HWY_DYNAMIC_DISPATCH(Convert)(from, x, to, y, n);
}
void select_n(DType which_dtype, const void* which, const void* const* cases, size_t num_cases, size_t width, void* y,
              size_t n) {
  HWY_DYNAMIC_DISPATCH(SelectN)(which_dtype, which, cases, num_cases, width, y, n);
}

void unary_round_bf16(UnaryOp op, const float* x, float* y, size_t n) {
  HWY_DYNAMIC_DISPATCH(UnaryRoundBf16)(op, x, y, n);
}
void binary_round_bf16(BinaryOp op, const float* a, const float* b, float* y, size_t n) {
  HWY_DYNAMIC_DISPATCH(BinaryRoundBf16)(op, a, b, y, n);
}
void round_to_bf16(const float* x, float* y, size_t n) { HWY_DYNAMIC_DISPATCH(RoundToBf16)(x, y, n); }

}  // namespace pax::cpu
#endif  // HWY_ONCE
