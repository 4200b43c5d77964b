// VJP and JVP rules of gather and scatter_add. Both are linear in their array
// operands, and each is the other's transpose: the cotangent of a gather is a
// scatter_add of the output cotangent into zeros, the cotangent of scatter_add
// updates is a gather of the output cotangent (as jax.lax does). Indices get
// no cotangent.
#include <algorithm>
#include <limits>

#include "pax/interp/interpreter.h"
#include "pax/prims/ad_util.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

int64_t max_index(DType dtype) {
  switch (dtype) {
    case DType::u8: return std::numeric_limits<uint8_t>::max();
    case DType::u32: return std::numeric_limits<uint32_t>::max();
    case DType::i32: return std::numeric_limits<int32_t>::max();
    default: return std::numeric_limits<int64_t>::max();
  }
}

// Start indices clamped into [0, dim - slice_size] per component, as gather's
// "clip" mode reads them: scatter_add drops windows that leave the operand, so
// without this the gradient of a clamped read would be lost.
Array clamp_starts(const Array& indices, const Array& operand, const Ints& start_index_map, const Ints& slice_sizes) {
  const int64_t rank = indices.ndim();
  const DType dtype = indices.dtype();
  std::vector<int64_t> hi;
  for (int64_t axis : start_index_map) {
    hi.push_back(std::min(operand.dim(axis) - slice_sizes[size_t(axis)], max_index(dtype)));
  }
  if (hi.empty() || indices.size() == 0) return indices;
  Array bound = lax::convert_element_type(array<int64_t>(hi), dtype);
  Array clamped = lax::min(indices, lax::broadcast_in_dim(bound, indices.shape().dims(), {rank - 1}));
  return is_unsigned(dtype) ? clamped : lax::max(clamped, ad::zeros_like(indices));
}

std::vector<Array> gather_vjp(std::span<const Array> in, std::span<const Array>, std::span<const Array> ct,
                              const Params& p, const CotangentMask& needs) {
  if (!ct[0].defined()) return {Array(), Array()};
  const Array &operand = in[0], &indices = in[1];
  const Ints& start_index_map = p.ints("start_index_map");
  const bool clip = !p.has("mode") || p.s("mode") == "clip";
  // In "fill" mode, out-of-range windows read fill_value and have no
  // gradient, which is exactly what scatter_add's dropping gives.
  Array starts = clip ? clamp_starts(indices, operand, start_index_map, p.ints("slice_sizes")) : indices;
  lax::ScatterDimensionNumbers dn{p.ints("offset_dims"), p.ints("collapsed_slice_dims"), start_index_map};
  return {lax::scatter_add(ad::zeros_like(operand), starts, ct[0], dn), Array()};
}

std::vector<Array> gather_jvp(std::span<const Array> in, std::span<const Array> t, std::span<const Array>,
                              const Params& p) {
  if (!t[0].defined()) return {Array()};
  // Filled windows are constant: their tangent is zero, not fill_value.
  Params tangent_params = p;
  if (p.has("fill_value")) tangent_params.set("fill_value", 0.0);
  return bind(Prim::gather, {t[0], in[1]}, tangent_params);
}

std::vector<Array> scatter_add_vjp(std::span<const Array> in, std::span<const Array>, std::span<const Array> ct,
                                   const Params& p, const CotangentMask& needs) {
  if (!ct[0].defined()) return {Array(), Array(), Array()};
  const Array &operand = in[0], &updates = in[2];
  const Ints& window_dims = p.ints("update_window_dims");
  const Ints& inserted = p.ints("inserted_window_dims");
  // The gather reading back each update window: size 1 on inserted axes, the
  // updates' window extent on the others (in operand axis order).
  Ints slice_sizes;
  size_t next_window = 0;
  for (int64_t d = 0; d < operand.ndim(); ++d) {
    const bool is_inserted = std::find(inserted.begin(), inserted.end(), d) != inserted.end();
    slice_sizes.push_back(is_inserted ? 1 : updates.dim(window_dims[next_window++]));
  }
  lax::GatherDimensionNumbers dn{window_dims, inserted, p.ints("scatter_dims_to_operand_dims")};
  // Dropped windows contributed nothing, so they read zeros back.
  Array ct_updates = lax::gather(ct[0], in[1], dn, slice_sizes, lax::GatherMode::fill, 0.0);
  return {ct[0], Array(), ct_updates};
}

std::vector<Array> scatter_add_jvp(std::span<const Array> in, std::span<const Array> t, std::span<const Array>,
                                   const Params& p) {
  if (!t[2].defined()) return {t[0]};
  return bind(Prim::scatter_add, {ad::instantiate(t[0], in[0]), in[1], t[2]}, p);
}

}  // namespace

void register_indexing_ad(PrimTable& t) {
  set_ad_rules(t, Prim::gather, gather_vjp, gather_jvp);
  set_ad_rules(t, Prim::scatter_add, scatter_add_vjp, scatter_add_jvp);
}

}  // namespace pax
