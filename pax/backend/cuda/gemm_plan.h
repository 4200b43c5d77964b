// The layout plan of dot_general on cuBLASLt, a pure function of the
// dimension numbers, shapes, dtypes and output strides (no CUDA here, so
// that it is tested exhaustively on any machine).
//
// cuBLASLt multiplies column-major matrices, D = op(A) op(B), batched with
// one stride per matrix. The plan merges the operands' batch, free and
// contracting axes into (batch, m, n, k) over strided views of the operands
// as they lie: a row-major result C = lhs . rhs is computed as
// C^T = rhs^T . lhs^T (`swap`), a result written transposed (output strides)
// as C = lhs . rhs, and each operand is read transposed or not, whichever
// its strides allow. Where no view exists the plan lists the operands to
// copy first (a permutation, materialised contiguous) and, where the output
// layout cannot be written directly, a contiguous temporary to move the
// result from. Batch axes that form two strided runs (attention's batch and
// heads of (batch, seq, heads, dim) arrays) become a loop of `outer` calls,
// each batched over the inner run, rather than a copy.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pax/backend/cuda/cuda_peak.h"
#include "pax/core/dtype.h"
#include "pax/core/shape.h"
#include "pax/prims/dot_params.h"

namespace pax::cuda {

struct GemmPlanOptions {
  // f32 products in f32, or on the tensor cores in TF32 when asked
  // (jax.default_matmul_precision("tensorfloat32")).
  F32Matmul f32 = F32Matmul::f32;
  // The most calls a two-level batch may take before copying an operand
  // instead (each call costs a launch).
  int64_t max_outer_calls = 64;
};

// cuBLASLt's compute type: CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_FAST_TF32
// (both with an f32 scale), CUBLAS_COMPUTE_64F (f64 scale).
enum class GemmCompute { f32, tf32, f64 };

struct GemmPlan {
  enum class Kind {
    gemm,         // cuBLASLt calls as below
    zeros,        // the contraction is empty (k = 0): the output is zeros
    empty,        // the output has no elements: nothing to do
    unsupported,  // cuBLASLt has no kernel for these dtypes or sizes: `reason`
  };
  Kind kind = Kind::empty;
  std::string reason;  // unsupported: why, naming dtypes or sizes

  // The operands and output as dot_general sees them.
  std::vector<int64_t> lhs_shape, rhs_shape, out_shape;
  std::vector<int64_t> out_strides;  // element strides of the output (row-major unless given)
  int64_t out_extent = 0;            // elements the output spans (1 + the largest offset)
  DType in_dtype = DType::f32, out_dtype = DType::f32;

  // Copies to make first. An operand with a permutation is read from
  // transpose(x, perm) materialised contiguous; the output with one is
  // computed into a contiguous temporary of shape out_shape[perm] whose
  // transpose back is then written into the output's layout. Empty: in place.
  std::vector<int64_t> lhs_perm, rhs_perm, out_perm;

  // The cuBLASLt call, column-major: D = op(A) op(B), D m x n, contraction k.
  // A is the lhs and B the rhs, or with `swap` A the rhs and B the lhs (the
  // transposed product, D = C^T); D is the output or its temporary.
  bool swap = false;
  bool trans_a = false, trans_b = false;  // op(X) = X^T (CUBLAS_OP_T)
  int64_t m = 0, n = 0, k = 0;
  int64_t lda = 1, ldb = 1, ldc = 1;
  // Strided batch (CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT / STRIDED_BATCH_OFFSET),
  // in elements; 0 where the batch is 1.
  int64_t batch = 1, stride_a = 0, stride_b = 0, stride_c = 0;
  // A two-level batch: `outer` calls, call i with A, B, D advanced by i times
  // these (elements).
  int64_t outer = 1, outer_stride_a = 0, outer_stride_b = 0, outer_stride_c = 0;
  GemmCompute compute = GemmCompute::f32;

  // The number of copies the plan makes (operands and the output temporary).
  int copies() const { return int(!lhs_perm.empty()) + int(!rhs_perm.empty()) + int(!out_perm.empty()); }
  // "gemm bf16 x bf16 -> f32 (compute f32): A = rhs^T ..." for errors and logs.
  std::string str() const;
};

// The plan of dot_general(lhs, rhs) with dimension numbers `dims`, giving
// `out_dtype`, written with `out_strides` (element strides of the output's
// axes) when given, row-major otherwise. Throws pax::Error on dimension
// numbers dot_general would reject; dtypes cuBLASLt cannot multiply give an
// `unsupported` plan (the caller uses another kernel).
GemmPlan plan_gemm(const DotDims& dims, const Shape& lhs, const Shape& rhs, DType lhs_dtype, DType rhs_dtype,
                   DType out_dtype, const std::vector<int64_t>* out_strides = nullptr,
                   const GemmPlanOptions& options = {});

// The element strides, per axis of an array of `shape`, of its transpose by
// `perm` laid out contiguous: where a copy planned with `perm` puts each
// element (a copy's destination strides, or a temporary's source strides).
std::vector<int64_t> permuted_strides(const std::vector<int64_t>& shape, const std::vector<int64_t>& perm);

const char* kind_name(GemmPlan::Kind kind);
const char* compute_name(GemmCompute compute);

}  // namespace pax::cuda
