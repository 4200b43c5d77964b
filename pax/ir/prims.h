// Prim: the enum of primitives generated from prims.def, with names, arities,
// families, cost classes, kernel operations and recompute flags.
#pragma once

#include <array>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string_view>

#include "pax/ir/elementwise_ops.h"

namespace pax {

enum class Prim : uint16_t {
#define PAX_PRIM(id, name, arity, family, accepts, cost, kernel, recompute, wrapper) id,
#include "pax/ir/prims.def"
#undef PAX_PRIM
};

inline constexpr int kNumPrims = 0
#define PAX_PRIM(id, name, arity, family, accepts, cost, kernel, recompute, wrapper) +1
#include "pax/ir/prims.def"
#undef PAX_PRIM
    ;

// The family of a primitive (the section of prims.def it is listed in).
enum class PrimFamily : uint8_t {
  unary,   // elementwise, one operand
  binary,  // elementwise, operands of one shape (two, or select_n's several)
  reduction,
  shape,
  indexing,
  linalg,
  window,
  sort,
  random,
  transform,   // stop_gradient, jit_call, custom_vjp_call
  collective,  // over a named axis
  control,     // cond, while, scan, remat
};

// What an equation of a primitive costs (ir/cost.cc).
enum class PrimCost : uint8_t {
  none,            // moves or reshapes data only
  elementwise,     // a flop per output element
  transcendental,  // a transcendental per output element
  per_input,       // a flop per input element (reductions)
  special,         // a formula of its own
};

// The operand dtypes an elementwise primitive accepts (prims.def's accepts
// column; pax/prims/dtype_rules.h checks them).
enum class Accepts { floating, numeric, integer, int_or_bool, any };

const char* prim_name(Prim p);
PrimFamily prim_family(Prim p);
PrimCost prim_cost(Prim p);
// Elementwise: unary or binary family.
inline bool is_elementwise(Prim p) {
  const PrimFamily f = prim_family(p);
  return f == PrimFamily::unary || f == PrimFamily::binary;
}
int prim_arity(Prim p);  // -1: variadic
// The elementwise operation of each primitive's kernel (prims.def's kernel
// column), usable in constant expressions.
#define PAX_KERNEL_unary(op) \
  ElementwiseKernel { ElementwiseKernel::Kind::unary, uint8_t(UnaryOp::op) }
#define PAX_KERNEL_binary(op) \
  ElementwiseKernel { ElementwiseKernel::Kind::binary, uint8_t(BinaryOp::op) }
#define PAX_KERNEL_compare(op) \
  ElementwiseKernel { ElementwiseKernel::Kind::compare, uint8_t(CompareOp::op) }
#define PAX_KERNEL_special \
  ElementwiseKernel { ElementwiseKernel::Kind::special, 0 }
#define PAX_KERNEL_none \
  ElementwiseKernel {}
inline constexpr std::array<ElementwiseKernel, kNumPrims> kPrimKernels = {
#define PAX_PRIM(id, name, arity, family, accepts, cost, kernel, recompute, wrapper) PAX_KERNEL_##kernel,
#include "pax/ir/prims.def"
#undef PAX_PRIM
};
#undef PAX_KERNEL_unary
#undef PAX_KERNEL_binary
#undef PAX_KERNEL_compare
#undef PAX_KERNEL_special
#undef PAX_KERNEL_none
inline ElementwiseKernel prim_kernel(Prim p) { return kPrimKernels[size_t(p)]; }
// nullopt where the primitive's own shape rule checks its dtypes.
std::optional<Accepts> prim_accepts(Prim p);
// Whether a fused loop recomputes it rather than read it stored.
bool prim_recomputable(Prim p);
// Looks a primitive up by its printed name; throws pax::Error if unknown.
Prim prim_from_name(std::string_view name);
std::ostream& operator<<(std::ostream& os, Prim p);

}  // namespace pax
