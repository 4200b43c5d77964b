// Dispatch helpers for kernels: pax::visit_dtype (from core) maps a runtime
// DType to its C++ type; visit_width maps an element width to an unsigned
// type of that size for kernels that only move bytes.
#pragma once

#include <cstdint>

#include "pax/core/dtype.h"
#include "pax/core/error.h"

namespace pax::cpu {

using pax::visit_dtype;

// The unsigned integer type of the same width (for byte-moving kernels).
// clang-format off
template <size_t N> struct bits_of;
template <> struct bits_of<1> { using type = uint8_t; };
template <> struct bits_of<2> { using type = uint16_t; };
template <> struct bits_of<4> { using type = uint32_t; };
template <> struct bits_of<8> { using type = uint64_t; };
// clang-format on

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
