// The elementwise operations that kernels and fused loops compute: the
// operation a primitive's kernel applies (prims.def's kernel column), the
// instructions of fused loops (pax/compile/loop_program.h) and the
// operations of every backend's elementwise kernels.
#pragma once

#include <cstdint>

namespace pax {

// The floating-point operations come from elementwise_ops.def; the
// integer and boolean ones follow them.
enum class UnaryOp : uint8_t {
#define PAX_UNARY_FLOAT_OP(id, functor, f32, f64) id,
#include "pax/ir/elementwise_ops.def"
  not_,
};
inline constexpr int kNumUnaryOps = int(UnaryOp::not_) + 1;
inline constexpr int kNumUnaryFloatOps = int(UnaryOp::not_);

enum class BinaryOp : uint8_t {
#define PAX_BINARY_FLOAT_OP(id, functor) id,
#include "pax/ir/elementwise_ops.def"
  rem,
  pow,
  and_,
  or_,
  xor_,
  shift_left,
  shift_right_logical,
  shift_right_arithmetic,
};
inline constexpr int kNumBinaryOps = int(BinaryOp::shift_right_arithmetic) + 1;
inline constexpr int kNumBinaryFloatTableOps = int(BinaryOp::rem);

// The name of an operation ("erf_inv", "round_even", "add").
const char* unary_op_name(UnaryOp op);
const char* binary_op_name(BinaryOp op);

enum class CompareOp : uint8_t { eq, ne, lt, le, gt, ge };
inline constexpr int kNumCompareOps = int(CompareOp::ge) + 1;

enum class ReduceOp : uint8_t { sum, prod, max, min, and_, or_ };

// The kernel column of prims.def: which operation computes a primitive.
struct ElementwiseKernel {
  enum class Kind : uint8_t {
    none,     // not elementwise, or no kernel (bitcast_convert_type)
    unary,    // op is a UnaryOp
    binary,   // op is a BinaryOp
    compare,  // op is a CompareOp
    special,  // a kernel with parameters (round, is_finite, integer_pow, convert, select_n)
  };
  Kind kind = Kind::none;
  uint8_t op = 0;
};

}  // namespace pax
