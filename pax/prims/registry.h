// The per-primitive table of backend-neutral facts. Each family of
// primitives registers, in three neighbouring files:
//   <family>.cc        shape/dtype rule (and impl rules)
//   <family>_ad.cc     VJP and JVP rules, written with pax::lax ops so that
//                      they are themselves traceable and differentiable
//   <family>_batch.cc  batching rules for vmap
// Control flow and collectives keep all their rules in one file each.
// Kernels belong to the backends (the CPU backend's table is its kernels.h,
// filled by kernels_<family>.cc); parameters that both a shape rule and a
// kernel read are parsed in <family>_params.h here (rounds_half_to_even below).
#pragma once

#include <array>
#include <span>
#include <string>
#include <vector>

#include "pax/core/array.h"
#include "pax/core/shape.h"
#include "pax/ir/params.h"
#include "pax/ir/prims.h"

namespace pax {

// Computes the output avals from the input avals, or throws pax::Error naming
// the primitive, the operands and what would be valid.
using ShapeRule = std::vector<AVal> (*)(std::span<const AVal> in, const Params& params);

// Eager evaluation of primitives that are not a single kernel (jit_call,
// control flow): receives concrete arrays.
using ImplRule = std::vector<Array> (*)(std::span<const Array> in, const Params& params);

// Reverse mode: input cotangents from output cotangents. An undefined
// (default-constructed) Array is a symbolic zero, in both directions; inputs
// without a gradient (integers, indices) get an undefined cotangent. The rule
// returns one entry per input, with the input's shape and dtype.
// `needs` marks the inputs that need a cotangent: the backward pass leaves
// out inputs that lead to no differentiated value, so a rule may skip
// computing theirs (the image gradient of a first convolution); empty means
// every input (needs_cotangent reads it).
using CotangentMask = std::vector<bool>;
inline bool needs_cotangent(const CotangentMask& needs, size_t i) { return i >= needs.size() || needs[i]; }
using VjpRule = std::vector<Array> (*)(std::span<const Array> primals_in, std::span<const Array> primals_out,
                                       std::span<const Array> cotangents_out, const Params& params,
                                       const CotangentMask& needs);

// Forward mode: output tangents from input tangents (undefined = zero).
using JvpRule = std::vector<Array> (*)(std::span<const Array> primals_in, std::span<const Array> tangents_in,
                                       std::span<const Array> primals_out, const Params& params);

// vmap: `values` carry the batch axis at `bdims[i]` (-1: not batched). The
// rule returns the outputs and the batch axis of each (-1: not batched).
struct BatchInfo {
  int64_t axis_size;
  std::string axis_name;  // of the vmap level applying the rule (collectives compare it)
  // The operands and results as one example sees them. The vmap level has
  // checked them with the primitive's shape rule before calling the batching
  // rule, so errors name the shapes the user wrote and params are valid.
  std::vector<AVal> in_avals;
  std::vector<AVal> out_avals;
};
struct Batched {
  std::vector<Array> values;
  std::vector<int64_t> bdims;
};
using BatchRule = Batched (*)(std::span<const Array> values, std::span<const int64_t> bdims, const Params& params,
                              const BatchInfo& info);

// Under grad, the outputs and the residuals the primitive's VJP rule reads
// (the tape entry holds the residuals after the outputs): custom_vjp's fwd.
using VjpForwardRule = std::pair<std::vector<Array>, std::vector<Array>> (*)(std::span<const Array> in,
                                                                             const Params& params);

struct PrimDef {
  ShapeRule shape_rule = nullptr;
  // >= 0 when output 0 has the same bytes as that input (reshape, squeeze,
  // expand_dims): eager execution then shares the buffer instead of copying.
  int output_aliases_input = -1;
  ImplRule impl = nullptr;
  VjpRule vjp = nullptr;
  JvpRule jvp = nullptr;
  BatchRule batch = nullptr;
  // The primitive as a function of other primitives: a transformation with
  // no rule of its own for it (no vjp, jvp or batch rule) processes this
  // body instead, equation by equation (jit_call's program, custom_vjp's
  // function under jvp and vmap).
  ImplRule expand = nullptr;
  VjpForwardRule vjp_forward = nullptr;  // with vjp: the forward pass under grad
};

using PrimTable = std::array<PrimDef, kNumPrims>;

// A primitive's derivative rules, in one line of its family's _ad.cc.
inline void set_ad_rules(PrimTable& table, Prim p, VjpRule vjp, JvpRule jvp) {
  table[size_t(p)].vjp = vjp;
  table[size_t(p)].jvp = jvp;
}

const PrimDef& prim_def(Prim p);

// Checks the arity and runs the primitive's shape rule.
std::vector<AVal> infer_avals(Prim p, std::span<const AVal> in, const Params& params);

// Family registration functions (see the file comment).
void register_elementwise_prims(PrimTable& table);
void register_elementwise_ad(PrimTable& table);
void register_elementwise_batching(PrimTable& table);
void register_window_prims(PrimTable& table);
void register_window_ad(PrimTable& table);
void register_window_batching(PrimTable& table);
void register_reduce_prims(PrimTable& table);
void register_reduce_ad(PrimTable& table);
void register_reduce_batching(PrimTable& table);
void register_shape_prims(PrimTable& table);
void register_shape_ad(PrimTable& table);
void register_shape_batching(PrimTable& table);
void register_indexing_prims(PrimTable& table);
void register_indexing_ad(PrimTable& table);
void register_indexing_batching(PrimTable& table);
void register_dot_prims(PrimTable& table);
void register_dot_ad(PrimTable& table);
void register_dot_batching(PrimTable& table);
void register_conv_prims(PrimTable& table);
void register_conv_ad(PrimTable& table);
void register_conv_batching(PrimTable& table);
void register_attention_prims(PrimTable& table);
void register_attention_ad(PrimTable& table);
void register_attention_batching(PrimTable& table);
void register_sort_prims(PrimTable& table);
void register_sort_ad(PrimTable& table);
void register_sort_batching(PrimTable& table);
void register_random_prims(PrimTable& table);
void register_random_batching(PrimTable& table);
void register_control_prims(PrimTable& table);
void register_control_flow_prims(PrimTable& table);
void register_collective_prims(PrimTable& table);

// Whether a `round` equation rounds half to even (rounding_method 1) rather
// than half away from zero (0, the default).
inline bool rounds_half_to_even(const Params& p) { return p.has("rounding_method") && p.i("rounding_method") == 1; }

}  // namespace pax
