// CPU reduction kernels over an array viewed as (outer, n, inner), row-major
// and contiguous, reducing or scanning the middle dimension:
//   inner == 1 is a row reduction (softmax over [tokens, vocab]),
//   outer == 1 a column reduction (a gradient summed over [batch, features]).
// Callers merge adjacent dimensions into that form; reduced axes that are
// not adjacent take one call per group (chained in the accumulator dtype).
//
// The whole-array entry points (reduce, argreduce, cumsum) run in parallel.
// Long reduced dimensions are cut into blocks whose size depends only on
// (outer, n, inner); block results are combined in a fixed order, so results
// are bit-identical for every thread count. f32 / f64 accumulate in their own
// type, bf16 / f16 in f32 (rounded once at the end), integers wrap. Their
// block partials are scratch from the kernel's context.
//
// The chunk kernels below them (reduce_rows, ...) are single-threaded and
// vectorised with Highway (reduce_hwy.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "pax/backend/kernel.h"
#include "pax/compile/loop_program.h"  // ReduceOp
#include "pax/core/dtype.h"

namespace pax::cpu {

// Longest row segment one task reduces. Fused row reductions cut rows the
// same way, so that their sums are bit-identical to reduce()'s.
inline constexpr int64_t kReduceRowBlock = int64_t(1) << 15;

using ::pax::ReduceOp;

// y[o, i] = op over r of x[o, r, i]. n == 0 gives the identity (sum 0,
// prod 1, max -inf / lowest / false, min +inf / highest / true, and all ones /
// true, or 0 / false). Floating max / min propagate NaN. y has out_dtype:
// the dtype of x, or, to chain reductions without intermediate rounding, any
// dtype with the same accumulator dtype (bf16 -> f32 -> bf16).
void reduce(const KernelContext& ctx, ReduceOp op, DType dtype, const void* x, DType out_dtype, void* y, int64_t outer,
            int64_t n, int64_t inner);

// y[o, i] = index along r of the first maximum (minimum) of x[o, r, i]; a NaN
// counts as the extreme (the first NaN wins). index_dtype is i32 or i64; n >= 1.
void argreduce(const KernelContext& ctx, bool is_max, DType dtype, DType index_dtype, const void* x, void* y,
               int64_t outer, int64_t n, int64_t inner);

// y[o, r, i] = sum of x[o, s, i] for s <= r (s >= r when reverse). Numeric
// dtypes; bf16 / f16 keep a running f32 sum and round each output.
void cumsum(const KernelContext& ctx, DType dtype, const void* x, void* y, int64_t outer, int64_t n, int64_t inner,
            bool reverse);

// The dtype in which reductions of `dtype` accumulate (f32 for bf16 / f16).
DType accumulator_dtype(DType dtype);

// Writes the identity of `op` for `dtype` (one element) to `out`.
void reduce_identity(ReduceOp op, DType dtype, void* out);

// ---- single-threaded chunk kernels. `acc` arrays have accumulator_dtype(dtype).

// acc[r] = op over j < len of x[r * len + j], for r < rows; len >= 1.
void reduce_rows(ReduceOp op, DType dtype, const void* x, size_t rows, size_t len, void* acc);
// acc[j] = op over r < rows of x[r * stride + j], for j < width; rows >= 1.
void reduce_cols(ReduceOp op, DType dtype, const void* x, size_t rows, size_t stride, size_t width, void* acc);
// idx[r] = position of the first extreme of row r (as in reduce_rows).
void argreduce_rows(bool is_max, DType dtype, const void* x, size_t rows, size_t len, int32_t* idx);
// idx[j] = row of the first extreme of column j (as in reduce_cols); rows < 2^31.
void argreduce_cols(bool is_max, DType dtype, const void* x, size_t rows, size_t stride, size_t width, int32_t* idx);
// Running sums along rows / columns (as above), starting from `init` (one
// accumulator per row / column, or nullptr for zero).
void cumsum_rows(DType dtype, const void* x, void* y, size_t rows, size_t len, bool reverse, const void* init);
void cumsum_cols(DType dtype, const void* x, void* y, size_t rows, size_t stride, size_t width, bool reverse,
                 const void* init);

}  // namespace pax::cpu
