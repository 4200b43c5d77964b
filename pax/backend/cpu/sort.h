// CPU kernels of the sorting primitives: variadic stable sort along one axis
// and top_k along the last axis. Floats use a total order in which -0.0 equals
// 0.0 and every NaN sorts above +inf (NaNs equal to each other).
#pragma once

#include <cstdint>
#include <span>

#include "pax/backend/kernel.h"

namespace pax::cpu {

// Sorts every row along `dimension` of `in` (operands of one shape) stably and
// lexicographically by in[0 .. num_keys), applying the same permutation to
// every operand; out[i] receives the permuted in[i]. Parallel over rows.
void sort(std::span<const TensorView> in, std::span<const TensorView> out, int64_t dimension, int64_t num_keys);

// The k largest entries of every row along the last axis of x, descending;
// equal entries keep the lower index first. values: x's dtype, indices: i32.
void top_k(const TensorView& x, int64_t k, const TensorView& values, const TensorView& indices);

}  // namespace pax::cpu
