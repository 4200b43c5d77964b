// DType names, sizes, promotion and host conversion.
#include "pax/core/dtype.h"

#include <cmath>
#include <limits>
#include <ostream>

#include "pax/core/error.h"

namespace pax {

float bf16_to_float(uint16_t bits) {
  uint32_t u = uint32_t(bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

float f16_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
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
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t float_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t au = u & 0x7fffffffu;
  if (au > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (au >= 0x477ff000u) return sign | 0x7c00u;  // rounds to >= 65520: inf
  if (au < 0x38800000u) {                        // below the smallest normal
    if (au < 0x33000000u) return sign;           // rounds to zero
    uint32_t mant = (au & 0x7fffffu) | 0x800000u;
    int shift = 126 - int(au >> 23);  // 14..24
    uint32_t half = 1u << (shift - 1);
    uint32_t rest = mant & ((1u << shift) - 1);
    uint32_t r = mant >> shift;
    if (rest > half || (rest == half && (r & 1u))) ++r;
    return sign | uint16_t(r);
  }
  uint32_t r = au + 0xfffu + ((au >> 13) & 1u) - (112u << 23);
  return sign | uint16_t(r >> 13);
}

bf16::bf16(float f) : bits(float_to_bf16(f)) {}
bf16::operator float() const { return bf16_to_float(bits); }
f16::f16(float f) : bits(float_to_f16(f)) {}
f16::operator float() const { return f16_to_float(bits); }

size_t itemsize(DType d) {
  switch (d) {
    case DType::bool_:
    case DType::u8: return 1;
    case DType::bf16:
    case DType::f16: return 2;
    case DType::u32:
    case DType::i32:
    case DType::f32: return 4;
    case DType::i64:
    case DType::f64: return 8;
  }
  return 0;
}

const char* dtype_name(DType d) {
  switch (d) {
    case DType::bool_: return "bool";
    case DType::u8: return "uint8";
    case DType::u32: return "uint32";
    case DType::i32: return "int32";
    case DType::i64: return "int64";
    case DType::bf16: return "bfloat16";
    case DType::f16: return "float16";
    case DType::f32: return "float32";
    case DType::f64: return "float64";
  }
  return "?";
}

const char* dtype_short_name(DType d) {
  switch (d) {
    case DType::bool_: return "bool";
    case DType::u8: return "u8";
    case DType::u32: return "u32";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::f32: return "f32";
    case DType::f64: return "f64";
  }
  return "?";
}

DType dtype_from_name(const std::string& name) {
  for (int i = 0; i < kNumDTypes; ++i) {
    DType d = DType(i);
    if (name == dtype_name(d) || name == dtype_short_name(d)) return d;
  }
  PAX_FAIL("unknown dtype '", name,
           "'; valid: bool, uint8/u8, uint32/u32, int32/i32, int64/i64, bfloat16/bf16, "
           "float16/f16, float32/f32, float64/f64");
}

bool is_floating(DType d) { return d == DType::bf16 || d == DType::f16 || d == DType::f32 || d == DType::f64; }
bool is_integer(DType d) { return d == DType::u8 || d == DType::u32 || d == DType::i32 || d == DType::i64; }
bool is_unsigned(DType d) { return d == DType::u8 || d == DType::u32; }

std::ostream& operator<<(std::ostream& os, DType d) { return os << dtype_name(d); }

DType promote_types(DType a, DType b) {
  using D = DType;
  // Indexed by the enum order: bool, u8, u32, i32, i64, bf16, f16, f32, f64.
  static constexpr D kTable[kNumDTypes][kNumDTypes] = {
      /* bool */ {D::bool_, D::u8, D::u32, D::i32, D::i64, D::bf16, D::f16, D::f32, D::f64},
      /* u8   */ {D::u8, D::u8, D::u32, D::i32, D::i64, D::bf16, D::f16, D::f32, D::f64},
      /* u32  */ {D::u32, D::u32, D::u32, D::i64, D::i64, D::bf16, D::f16, D::f32, D::f64},
      /* i32  */ {D::i32, D::i32, D::i64, D::i32, D::i64, D::bf16, D::f16, D::f32, D::f64},
      /* i64  */ {D::i64, D::i64, D::i64, D::i64, D::i64, D::bf16, D::f16, D::f32, D::f64},
      /* bf16 */ {D::bf16, D::bf16, D::bf16, D::bf16, D::bf16, D::bf16, D::f32, D::f32, D::f64},
      /* f16  */ {D::f16, D::f16, D::f16, D::f16, D::f16, D::f32, D::f16, D::f32, D::f64},
      /* f32  */ {D::f32, D::f32, D::f32, D::f32, D::f32, D::f32, D::f32, D::f32, D::f64},
      /* f64  */ {D::f64, D::f64, D::f64, D::f64, D::f64, D::f64, D::f64, D::f64, D::f64},
  };
  return kTable[int(a)][int(b)];
}

namespace {
int category(DType d) { return d == DType::bool_ ? 0 : is_integer(d) ? 1 : 2; }
DType category_default(int c) { return c == 0 ? DType::bool_ : c == 1 ? DType::i32 : DType::f32; }
}  // namespace

WeakDType promote_weak(WeakDType a, WeakDType b) {
  if (!a.weak && !b.weak) return {promote_types(a.dtype, b.dtype), false};
  if (a.weak && b.weak) {
    int c = std::max(category(a.dtype), category(b.dtype));
    return {category_default(c), true};
  }
  const WeakDType& strong = a.weak ? b : a;
  const WeakDType& weak = a.weak ? a : b;
  if (category(strong.dtype) >= category(weak.dtype)) return {strong.dtype, false};
  return {category_default(category(weak.dtype)), true};
}

namespace {

template <class T>
double load_as_double(const void* p, size_t i) {
  const T* t = static_cast<const T*>(p);
  if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) return float(t[i]);
  else return double(t[i]);
}

// Saturating float -> integer conversion with NaN -> 0, as XLA does.
template <class I>
I saturate(double v) {
  if (std::isnan(v)) return 0;
  if (v <= double(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (v >= double(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return I(v);
}

template <class T>
void store_from_double(void* p, size_t i, double v, bool src_float) {
  T* t = static_cast<T*>(p);
  if constexpr (std::is_same_v<T, bool>) t[i] = v != 0.0;
  else if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) t[i] = T(float(v));
  else if constexpr (std::is_floating_point_v<T>) t[i] = T(v);
  else if (src_float) t[i] = saturate<T>(v);
  else t[i] = T(int64_t(v));
}

}  // namespace

void convert_host(DType from, const void* src, DType to, void* dst, size_t n) {
  if (n == 0) return;
  if (from == to) {
    std::memcpy(dst, src, n * itemsize(from));
    return;
  }
  // Integer -> integer goes through int64 so large i64 values stay exact.
  bool int_path = !is_floating(from) && !is_floating(to);
  visit_dtype(from, [&](auto s) {
    using S = decltype(s);
    visit_dtype(to, [&](auto t) {
      using T = decltype(t);
      for (size_t i = 0; i < n; ++i) {
        if (int_path) {
          int64_t v;
          if constexpr (std::is_same_v<S, bool> || std::is_integral_v<S>) v = int64_t(static_cast<const S*>(src)[i]);
          else v = 0;
          if constexpr (std::is_same_v<T, bool>) static_cast<T*>(dst)[i] = v != 0;
          else if constexpr (std::is_integral_v<T>) static_cast<T*>(dst)[i] = T(v);
        } else {
          store_from_double<T>(dst, i, load_as_double<S>(src, i), is_floating(from));
        }
      }
    });
  });
}

}  // namespace pax
