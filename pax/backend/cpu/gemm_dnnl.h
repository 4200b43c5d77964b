// Batched matrix products on the CPU, C[b] = A[b] · B[b] with
//   A (batch, m, k), B (batch, k, n), C (batch, m, n)
// given as strided views: oneDNN's matmul for f32, and bf16 / f16 where the CPU
// has kernels for them (f32 accumulation),
// and a cache-blocked OpenMP loop for f64 and the integer dtypes.
#pragma once

#include <cstdint>

#include "pax/backend/kernel.h"
#include "pax/core/dtype.h"

namespace pax::cpu {

struct GemmShape {
  int64_t batch = 1, m = 1, n = 1, k = 1;
  // When > 1, the batch is two dimensions (batch / inner_batch, inner_batch)
  // with a stride each, as attention's (batch, heads) of a (batch, seq,
  // heads, dim) array: no single stride walks them.
  int64_t inner_batch = 1;
};

// A strided (batch, rows, cols) view; strides in elements. The stride of a
// size-1 dimension is ignored.
struct MatrixView {
  void* data = nullptr;  // read-only for A and B
  DType dtype = DType::f32;
  int64_t batch_stride = 0, row_stride = 0, col_stride = 0;
  int64_t inner_batch_stride = 0;  // with GemmShape::inner_batch > 1
};

// Runs the product through oneDNN when it has an optimised (non-reference)
// kernel for these dtypes and strides, and returns true (repacking an operand
// first where this CPU's kernels would read it slowly in place); otherwise returns
// false without touching C, and the caller makes the operands contiguous or
// converts them. All sizes must be > 0. A and B share a dtype (f32, bf16 or
// f16); C is f32 or that dtype. Primitives and decisions are cached, so a
// repeated call costs one lookup plus the execution. Repacked operands and
// oneDNN's scratchpad take their memory from ctx.
// With `bias` (shape.n values of C's dtype), C = A · B + bias, the bias added
// to every row inside oneDNN's kernel (its matmul bias) before C is written.
// With `multiplier` (an array of C's dtype laid out as C, which must then be
// dense), C = (A · B [+ bias]) * multiplier element by element, inside the
// kernel (a binary post-op).
bool gemm_dnnl(const KernelContext& ctx, const GemmShape& shape, const MatrixView& a, const MatrixView& b,
               const MatrixView& c, const void* bias = nullptr, const void* multiplier = nullptr);

// Whether oneDNN has an optimised kernel for this product of contiguous
// row-major operands of ab_dtype into c_dtype (asked once per shape and
// cached). Where it has none (bf16 / f16 without native support on this CPU),
// callers widen the operands and multiply in f32.
bool gemm_dnnl_supported(const GemmShape& shape, DType ab_dtype, DType c_dtype);

// The row stride (in elements) a caller that makes B = (k, cols) contiguous
// for a product with m rows should give it: `cols`, or a little more where
// this CPU's GEMM reads B in place and rows exactly a multiple of 1 KiB apart
// would collide in the cache (AVX2's f32 kernels; see gemm_dnnl.cc).
int64_t gemm_preferred_row_stride(DType dtype, int64_t m, int64_t cols);

// C = A · B for contiguous row-major operands that all have `dtype` (u8, u32,
// i32, i64, f32 or f64). Integers wrap around like XLA's. Sizes may be 0.
void gemm_blocked(DType dtype, const GemmShape& shape, const void* a, const void* b, void* c);

}  // namespace pax::cpu
