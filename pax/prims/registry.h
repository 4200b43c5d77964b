// The per-primitive table: shape/dtype rule and kernels, filled by the family
// files under pax/prims/ (elementwise.cc, reduce.cc, shape.cc, ...). Later
// transforms add their VJP, JVP and batching rules to the same entry.
#pragma once

#include <array>
#include <span>
#include <vector>

#include "pax/backend/kernel.h"
#include "pax/core/shape.h"
#include "pax/ir/params.h"
#include "pax/ir/prims.h"

namespace pax {

// Computes the output avals from the input avals, or throws pax::Error naming
// the primitive, the operands and what would be valid.
using ShapeRule = std::vector<AVal> (*)(std::span<const AVal> in, const Params& params);

struct PrimDef {
  ShapeRule shape_rule = nullptr;
  KernelFn cpu_kernel = nullptr;
  // >= 0 when output 0 has the same bytes as that input (reshape, squeeze,
  // expand_dims): eager execution then shares the buffer instead of copying.
  int output_aliases_input = -1;
};

using PrimTable = std::array<PrimDef, kNumPrims>;

const PrimDef& prim_def(Prim p);

// Checks the arity and runs the primitive's shape rule.
std::vector<AVal> infer_avals(Prim p, std::span<const AVal> in, const Params& params);

// Family registration functions, one per file under pax/prims/.
void register_elementwise_prims(PrimTable& table);
void register_reduce_prims(PrimTable& table);
void register_shape_prims(PrimTable& table);
void register_indexing_prims(PrimTable& table);
void register_dot_prims(PrimTable& table);
void register_conv_prims(PrimTable& table);
void register_sort_prims(PrimTable& table);
void register_random_prims(PrimTable& table);

}  // namespace pax
