// VJP and JVP rules of the windowed reductions. reduce_window_max is linear
// in each element it selects: its VJP scatters the cotangent to the windows'
// maxima (select_and_scatter_add) and its JVP gathers the tangent from them
// (select_and_gather_add). Those two are linear in their first operand and
// each other's transpose; the operand only chooses positions, so it gets no
// cotangent and its tangent does not matter.
#include "pax/ops/lax.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

lax::Window window_params(const Params& p) {
  return {p.ints("window_dimensions"), p.ints("window_strides"), p.ints("padding")};
}

std::vector<Array> reduce_window_max_vjp(std::span<const Array> in, std::span<const Array>, std::span<const Array> ct,
                                         const Params& p, const CotangentMask& needs) {
  if (!ct[0].defined()) return {Array()};
  return {lax::select_and_scatter_add(ct[0], in[0], window_params(p))};
}

std::vector<Array> reduce_window_max_jvp(std::span<const Array> in, std::span<const Array> t, std::span<const Array>,
                                         const Params& p) {
  if (!t[0].defined()) return {Array()};
  return {lax::select_and_gather_add(t[0], in[0], window_params(p))};
}

std::vector<Array> scatter_vjp(std::span<const Array> in, std::span<const Array>, std::span<const Array> ct,
                               const Params& p, const CotangentMask& needs) {
  if (!ct[0].defined()) return {Array(), Array()};
  return {lax::select_and_gather_add(ct[0], in[1], window_params(p)), Array()};
}

std::vector<Array> scatter_jvp(std::span<const Array> in, std::span<const Array> t, std::span<const Array>,
                               const Params& p) {
  if (!t[0].defined()) return {Array()};
  return {lax::select_and_scatter_add(t[0], in[1], window_params(p))};
}

std::vector<Array> gather_vjp(std::span<const Array> in, std::span<const Array>, std::span<const Array> ct,
                              const Params& p, const CotangentMask& needs) {
  if (!ct[0].defined()) return {Array(), Array()};
  return {lax::select_and_scatter_add(ct[0], in[1], window_params(p)), Array()};
}

std::vector<Array> gather_jvp(std::span<const Array> in, std::span<const Array> t, std::span<const Array>,
                              const Params& p) {
  if (!t[0].defined()) return {Array()};
  return {lax::select_and_gather_add(t[0], in[1], window_params(p))};
}

}  // namespace

void register_window_ad(PrimTable& t) {
  set_ad_rules(t, Prim::reduce_window_max, reduce_window_max_vjp, reduce_window_max_jvp);
  set_ad_rules(t, Prim::select_and_scatter_add, scatter_vjp, scatter_jvp);
  set_ad_rules(t, Prim::select_and_gather_add, gather_vjp, gather_jvp);
}

}  // namespace pax
