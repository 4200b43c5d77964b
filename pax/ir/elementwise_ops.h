// The elementwise operations that kernels and fused loops compute: the
// operation a primitive's kernel applies (prims.def's kernel column), the
// instructions of fused loops (pax/compile/loop_program.h) and the
// operations of every backend's elementwise kernels.
#pragma once

#include <cstdint>

namespace pax {

enum class UnaryOp : uint8_t {
  neg,
  abs,
  sign,
  exp,
  expm1,
  log,
  log1p,
  sqrt,
  rsqrt,
  tanh,
  logistic,
  erf,
  erf_inv,
  sin,
  cos,
  floor,
  ceil,
  round_away,
  round_even,
  not_,
};
inline constexpr int kNumUnaryOps = int(UnaryOp::not_) + 1;

enum class BinaryOp : uint8_t {
  add,
  sub,
  mul,
  div,
  rem,
  pow,
  max,
  min,
  and_,
  or_,
  xor_,
  shift_left,
  shift_right_logical,
  shift_right_arithmetic,
};
inline constexpr int kNumBinaryOps = int(BinaryOp::shift_right_arithmetic) + 1;

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
