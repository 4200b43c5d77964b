// Builds the primitive table once from the family registration functions.
#include "pax/prims/registry.h"

#include "pax/core/error.h"

namespace pax {
namespace {

PrimTable build_table() {
  PrimTable table{};
  register_elementwise_prims(table);
  register_elementwise_ad(table);
  register_elementwise_batching(table);
  register_reduce_prims(table);
  register_reduce_ad(table);
  register_reduce_batching(table);
  register_shape_prims(table);
  register_shape_ad(table);
  register_shape_batching(table);
  register_indexing_prims(table);
  register_indexing_ad(table);
  register_indexing_batching(table);
  register_dot_prims(table);
  register_dot_ad(table);
  register_dot_batching(table);
  register_conv_prims(table);
  register_conv_ad(table);
  register_conv_batching(table);
  register_attention_prims(table);
  register_attention_ad(table);
  register_attention_batching(table);
  register_window_prims(table);
  register_window_ad(table);
  register_window_batching(table);
  register_sort_prims(table);
  register_sort_ad(table);
  register_sort_batching(table);
  register_random_prims(table);
  register_random_batching(table);
  register_control_prims(table);
  register_control_flow_prims(table);
  register_collective_prims(table);
  return table;
}

}  // namespace

const PrimDef& prim_def(Prim p) {
  static const PrimTable table = build_table();
  return table[size_t(p)];
}

std::vector<AVal> infer_avals(Prim p, std::span<const AVal> in, const Params& params) {
  int arity = prim_arity(p);
  PAX_CHECK(arity < 0 || int(in.size()) == arity, prim_name(p), ": takes ", arity, " operand(s), got ", in.size());
  const PrimDef& def = prim_def(p);
  PAX_CHECK(def.shape_rule, prim_name(p), ": primitive has no shape rule registered");
  return def.shape_rule(in, params);
}

}  // namespace pax
