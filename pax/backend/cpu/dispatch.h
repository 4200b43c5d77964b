// Maps a runtime DType to its C++ element type once per kernel call, so inner
// loops are compiled per type (no per-element switches).
#pragma once

#include <cstdint>

#include "pax/core/dtype.h"
#include "pax/core/error.h"

namespace pax::cpu {

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
  PAX_FAIL("invalid dtype");
}

// The unsigned integer type of the same width (for byte-moving kernels).
template <size_t N> struct bits_of;
template <> struct bits_of<1> { using type = uint8_t; };
template <> struct bits_of<2> { using type = uint16_t; };
template <> struct bits_of<4> { using type = uint32_t; };
template <> struct bits_of<8> { using type = uint64_t; };

// Visits by element width only: f(uint8_t{}), f(uint16_t{}), f(uint32_t{}) or f(uint64_t{}).
template <class F>
decltype(auto) visit_width(size_t bytes, F&& f) {
  switch (bytes) {
    case 1: return f(uint8_t{});
    case 2: return f(uint16_t{});
    case 4: return f(uint32_t{});
    case 8: return f(uint64_t{});
  }
  PAX_FAIL("invalid element width ", bytes);
}

}  // namespace pax::cpu
