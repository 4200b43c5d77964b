// Names of the kernels' elementwise operations (for tests and messages),
// expanded from elementwise_ops.def and the hand-kept integer operations.
#include "pax/ir/elementwise_ops.h"

#include <array>
#include <cstddef>

namespace pax {
namespace {

constexpr std::array<const char*, kNumUnaryOps> kUnaryNames = {
#define PAX_UNARY_FLOAT_OP(id, functor, f32, f64) #id,
#include "pax/ir/elementwise_ops.def"
    "not",
};

constexpr std::array<const char*, kNumBinaryOps> kBinaryNames = {
#define PAX_BINARY_FLOAT_OP(id, functor) #id,
#include "pax/ir/elementwise_ops.def"
    "rem", "pow", "and", "or", "xor", "shift_left", "shift_right_logical", "shift_right_arithmetic",
};
static_assert(kBinaryNames[kNumBinaryOps - 1] != nullptr, "a BinaryOp without a name");

}  // namespace

const char* unary_op_name(UnaryOp op) { return kUnaryNames[size_t(op)]; }
const char* binary_op_name(BinaryOp op) { return kBinaryNames[size_t(op)]; }

}  // namespace pax
