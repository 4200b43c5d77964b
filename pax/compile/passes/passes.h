// The compiler's jaxpr-to-jaxpr passes. Each takes a well-typed jaxpr and
// returns an equivalent one; all primitives are pure, so equations may be
// removed, merged or evaluated early. Variables keep their numbers (new ones
// are appended), so avals stay indexed by Var.
//
//   inline_calls    splices the program of every jit_call equation, and the
//                   body of every custom_vjp_call, in place
//   fold_constants  evaluates equations whose inputs are all constants, at
//                   compile time, when their outputs are small
//   simplify        algebraic identities (x*1, neg(neg x), reshape chains, ...)
//   cse             merges equations with the same primitive, params and inputs
//   dce             drops equations whose results are never used
//   widen_products  turns a 16-bit product the backend has no kernel for into
//                   converts around an f32 product (passes/widen.cc)
//   hoist_input_computations
//                   moves small computations of the inputs alone (parameter
//                   casts) to the start, so that fused loops may read them
//   fold_bias_into_products
//                   turns a product plus a bias broadcast along its leading
//                   dims into one dot_general with a bias operand, which the
//                   backend adds inside its GEMM (passes/bias.cc; run by
//                   lower() for backends that say so, not by optimize())
//   fold_multipliers_into_products
//                   turns a product times a same-shaped array (a GELU's
//                   backward) into one dot_general with a multiplier operand,
//                   applied inside the GEMM (passes/multiplier.cc; as above)
//   fold_relus_into_products
//                   turns a ReLU of a product into one dot_general with
//                   has_relu, applied by the product's kernel, the ReLU's
//                   mask computed from its result (passes/relu.cc; as above)
//
// optimize() runs them in order; in debug builds (NDEBUG undefined) every
// pass's result is type-checked.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>

#include "pax/ir/jaxpr.h"

namespace pax {

struct StepSchedule;  // pax/compile/fusion.h

// Outputs above this many elements are left to run time by constant folding
// (a broadcast of a scalar to a large shape is not materialised).
inline constexpr int64_t kDefaultFoldLimit = int64_t(1) << 16;

Jaxpr inline_calls(const Jaxpr& jaxpr);
Jaxpr fold_constants(const Jaxpr& jaxpr, int64_t max_elements = kDefaultFoldLimit);
Jaxpr simplify(const Jaxpr& jaxpr);
Jaxpr cse(const Jaxpr& jaxpr);
Jaxpr dce(const Jaxpr& jaxpr);
Jaxpr hoist_input_computations(const Jaxpr& jaxpr);
// After a first fusion schedule: gives each loop that reads a short elementwise
// function of narrower values (a bf16 -> f32 convert, a mask select) computed by
// another loop its own copy of it, so that the wide value is not stored and
// read back (passes/duplicate.cc). nullopt: no loop needs a copy.
std::optional<Jaxpr> duplicate_producers(const Jaxpr& jaxpr, const StepSchedule& schedule);

// Whether the backend has a kernel of its own for equation `e` of `j` (a
// dot_general of 16-bit operands); where it has none it would widen them.
using NativeProduct = std::function<bool(const Jaxpr& j, const Eqn& e)>;
Jaxpr widen_products(const Jaxpr& jaxpr, const NativeProduct& native);

// Whether the backend computes this dot_general of `j` with a bias operand
// inside its GEMM.
using ProductBias = std::function<bool(const Jaxpr& j, const Eqn& dot)>;
Jaxpr fold_bias_into_products(const Jaxpr& jaxpr, const ProductBias& can_fold);
// Whether the backend multiplies this dot_general's result by a same-shaped
// operand inside its GEMM.
using ProductEpilogue = std::function<bool(const Jaxpr& j, const Eqn& dot)>;
Jaxpr fold_multipliers_into_products(const Jaxpr& jaxpr, const ProductEpilogue& can_fold);
// Whether the backend applies a ReLU to this dot_general's result in its
// GEMM (passes/relu.cc).
Jaxpr fold_relus_into_products(const Jaxpr& jaxpr, const ProductEpilogue& can_fold);

struct PassOptions {
  int64_t fold_limit = kDefaultFoldLimit;
  NativeProduct native_product;  // empty: every product is native (no widening)
};

// inline_calls, widen_products (where options.native_product is set), then
// fold / simplify / cse / dce twice (each can expose work for the others),
// then hoist_input_computations.
Jaxpr optimize(const Jaxpr& jaxpr, const PassOptions& options = {});

}  // namespace pax
