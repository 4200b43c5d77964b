// Prim: the enum of primitives generated from prims.def, with names, arities,
// families and cost classes.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string_view>

namespace pax {

enum class Prim : uint16_t {
#define PAX_PRIM(id, name, arity, family, cost) id,
#include "pax/ir/prims.def"
#undef PAX_PRIM
};

inline constexpr int kNumPrims = 0
#define PAX_PRIM(id, name, arity, family, cost) +1
#include "pax/ir/prims.def"
#undef PAX_PRIM
    ;

// The family of a primitive (the section of prims.def it is listed in).
enum class PrimFamily : uint8_t {
  unary,       // elementwise, one operand
  binary,      // elementwise, operands of one shape (two, or select_n's several)
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

// What an equation of a primitive costs (compile/cost.cc).
enum class PrimCost : uint8_t {
  none,            // moves or reshapes data only
  elementwise,     // a flop per output element
  transcendental,  // a transcendental per output element
  per_input,       // a flop per input element (reductions)
  special,         // a formula of its own
};

const char* prim_name(Prim p);
PrimFamily prim_family(Prim p);
PrimCost prim_cost(Prim p);
// Elementwise: unary or binary family.
inline bool is_elementwise(Prim p) {
  const PrimFamily f = prim_family(p);
  return f == PrimFamily::unary || f == PrimFamily::binary;
}
int prim_arity(Prim p);  // -1: variadic
// Looks a primitive up by its printed name; throws pax::Error if unknown.
Prim prim_from_name(std::string_view name);
std::ostream& operator<<(std::ostream& os, Prim p);

}  // namespace pax
