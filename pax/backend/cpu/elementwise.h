// CPU elementwise kernels over contiguous ranges. Each call switches once on
// (op, dtype) and runs a vectorised loop (Highway, dispatched at run time to
// the best SIMD target). Callers split large arrays across threads.
// bf16 and f16 are computed in f32, in blocks converted on the fly.
#pragma once

#include <cstddef>
#include <cstdint>

#include "pax/compile/loop_program.h"  // the operation enums
#include "pax/core/dtype.h"

namespace pax::cpu {

using ::pax::BinaryOp;
using ::pax::CompareOp;
using ::pax::UnaryOp;

// y[i] = op(x[i]); x and y may alias.
void unary(UnaryOp op, DType dtype, const void* x, void* y, size_t n);
// y[i] = op(a[i], b[i]).
void binary(BinaryOp op, DType dtype, const void* a, const void* b, void* y, size_t n);
// y[i] = a[i] <op> b[i] (floats compare as IEEE: NaN is unordered).
void compare(CompareOp op, DType dtype, const void* a, const void* b, bool* y, size_t n);
void is_finite(DType dtype, const void* x, bool* y, size_t n);
// y[i] = x[i] ** exponent (repeated multiplication; negative exponents invert).
void integer_pow(DType dtype, int64_t exponent, const void* x, void* y, size_t n);
// Element type conversion with XLA semantics (float->int saturates, NaN->0,
// ->bool is "!= 0", ->bf16/f16 round to nearest even).
void convert(DType from, const void* x, DType to, void* y, size_t n);
// convert() over n elements split across threads.
void convert_parallel(DType from, const void* x, DType to, void* y, int64_t n);
// y[i] = cases[which[i]][i]; `which` is bool or i32, cases have element width `width`.
void select_n(DType which_dtype, const void* which, const void* const* cases, size_t num_cases, size_t width, void* y,
              size_t n);

// bf16 values held as f32 (fused loops): y[i] = x[i] rounded to bf16
// precision, as f32 (float_to_bf16's rounding, widened; x may be y); and the
// f32 unary / binary kernels with each result so rounded, which is bit for
// bit what the bf16 kernels compute, widened.
void round_to_bf16(const float* x, float* y, size_t n);
void unary_round_bf16(UnaryOp op, const float* x, float* y, size_t n);
void binary_round_bf16(BinaryOp op, const float* a, const float* b, float* y, size_t n);

}  // namespace pax::cpu
