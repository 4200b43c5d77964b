// DType: the element types of an Array, their sizes and names, the host types
// bf16 / f16, and the jax.numpy type-promotion lattice.
#pragma once

#include <cstdint>
#include <cstring>
#include <iosfwd>
#include <string>

namespace pax {

enum class DType : uint8_t { bool_, u8, u32, i32, i64, bf16, f16, f32, f64 };
inline constexpr int kNumDTypes = 9;

// Host-side 16-bit float types. They only store bits; arithmetic converts to
// float (kernels compute bf16 and f16 in f32).
struct bf16 {
  uint16_t bits = 0;
  bf16() = default;
  explicit bf16(float f);  // round to nearest even; NaN stays NaN
  operator float() const;  // exact
  static bf16 from_bits(uint16_t b) {
    bf16 r;
    r.bits = b;
    return r;
  }
};
struct f16 {
  uint16_t bits = 0;
  f16() = default;
  explicit f16(float f);   // IEEE binary16, round to nearest even
  operator float() const;  // exact
  static f16 from_bits(uint16_t b) {
    f16 r;
    r.bits = b;
    return r;
  }
};

float bf16_to_float(uint16_t bits);
uint16_t float_to_bf16(float f);
float f16_to_float(uint16_t bits);
uint16_t float_to_f16(float f);

size_t itemsize(DType dtype);
const char* dtype_name(DType dtype);             // "float32", "bfloat16", "int32", "bool", ...
const char* dtype_short_name(DType dtype);       // "f32", "bf16", "i32", "bool", ... (jaxpr style)
DType dtype_from_name(const std::string& name);  // accepts both spellings; throws pax::Error
bool is_floating(DType dtype);
bool is_integer(DType dtype);   // signed or unsigned, not bool
bool is_unsigned(DType dtype);  // u8, u32
std::ostream& operator<<(std::ostream& os, DType dtype);

// jax.numpy type promotion (jax_numpy_dtype_promotion='standard'):
//   bool < u8 < u32;  u8 < i32 < i64;  u32 < i64;  every integer < every float;
//   bf16 and f16 join at f32;  f32 < f64.
// The result is the least upper bound of the two in that lattice, e.g.
//   u8+i32=i32, u32+i32=i64, i64+bf16=bf16, bf16+f16=f32, f16+f32=f32.
// Weak types (C++ scalar literals, like Python scalars in JAX) only decide the
// category: a weak scalar adopts the strong operand's dtype when the strong
// operand's category (bool < integer < float) is at least its own, otherwise the
// result is the default dtype of the scalar's category (i32 or f32) and stays weak.
DType promote_types(DType a, DType b);
struct WeakDType {
  DType dtype;
  bool weak;
};
WeakDType promote_weak(WeakDType a, WeakDType b);

// C++ type <-> DType mapping, for creation and host read-back.
// clang-format off
template <class T> struct dtype_of;
template <> struct dtype_of<bool> { static constexpr DType value = DType::bool_; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };
template <> struct dtype_of<uint32_t> { static constexpr DType value = DType::u32; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::i64; };
template <> struct dtype_of<bf16> { static constexpr DType value = DType::bf16; };
template <> struct dtype_of<f16> { static constexpr DType value = DType::f16; };
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <class T> inline constexpr DType dtype_v = dtype_of<T>::value;
// clang-format on

// Calls f with a value of the C++ type of `d` (bool{}, uint8_t{}, ..., double{}),
// so that a loop is compiled per type and the dtype is switched on once.
template <class F>
decltype(auto) visit_dtype(DType d, F&& f) {
  switch (d) {
    case DType::bool_: return f(bool{});
    case DType::u8: return f(uint8_t{});
    case DType::u32: return f(uint32_t{});
    case DType::i32: return f(int32_t{});
    case DType::i64: return f(int64_t{});
    case DType::bf16: return f(bf16{});
    case DType::f16: return f(f16{});
    case DType::f32: return f(float{});
    case DType::f64: return f(double{});
  }
  return f(float{});  // unreachable for valid dtypes
}

// Converts `n` host values between any two dtypes with the same rules as
// convert_element_type (float->int saturates, NaN->0; ->bool is "!= 0").
void convert_host(DType from, const void* src, DType to, void* dst, size_t n);

}  // namespace pax
