// conv_general_dilated's parameters read from its Params, and the window
// arithmetic on them: the shape rule (conv.cc) and the backends' kernels
// both need them. Only 2-D convolutions exist.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pax/ir/params.h"

namespace pax {

inline constexpr int64_t kConvSpatial = 2;  // spatial dimensions

struct ConvParams {
  Ints window_strides, padding, lhs_dilation, rhs_dilation, lhs_spec, rhs_spec, out_spec;
  int64_t feature_group_count = 1, batch_group_count = 1;
  int64_t lo(int64_t i) const { return padding[size_t(2 * i)]; }
  int64_t hi(int64_t i) const { return padding[size_t(2 * i + 1)]; }
};

// Empty dilations mean 1 (no dilation), as in jax.lax.
inline ConvParams conv_params(const Params& p) {
  ConvParams c{p.ints("window_strides"), p.ints("padding"),          p.ints("lhs_dilation"),
               p.ints("rhs_dilation"),   p.ints("lhs_spec"),         p.ints("rhs_spec"),
               p.ints("out_spec"),       p.i("feature_group_count"), p.i("batch_group_count")};
  if (c.lhs_dilation.empty()) c.lhs_dilation = Ints(kConvSpatial, 1);
  if (c.rhs_dilation.empty()) c.rhs_dilation = Ints(kConvSpatial, 1);
  return c;
}

// The extent of `size` elements placed `dilation` apart.
inline int64_t dilated_size(int64_t size, int64_t dilation) { return size == 0 ? 0 : (size - 1) * dilation + 1; }

inline int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

}  // namespace pax
