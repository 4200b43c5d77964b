// VJP and JVP rules of the reductions. reduce_sum and cumsum are linear;
// max / min send the gradient to the extreme elements (shared evenly between
// ties, as JAX does); prod handles zeros exactly. Logical reductions and
// arg-reductions have no gradient (their outputs are not floating).
#include <algorithm>

#include "pax/core/error.h"
#include "pax/prims/ad_util.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

Ints reduced_axes(const Array& x, const Params& p) { return normalize_axes(p.ints("axes"), x.ndim(), "reduce"); }

// The axes of x that a reduction keeps (for broadcasting results back).
Ints kept_axes(int64_t rank, const Ints& axes) {
  Ints kept;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::find(axes.begin(), axes.end(), d) == axes.end()) kept.push_back(d);
  }
  return kept;
}

Array broadcast_back(const Array& r, const Array& x, const Ints& axes) {
  return lax::broadcast_in_dim(r, x.shape().dims(), kept_axes(x.ndim(), axes));
}

// reduce_sum
std::vector<Array> sum_vjp(std::span<const Array> in, std::span<const Array>, std::span<const Array> ct,
                           const Params& p, const CotangentMask& needs) {
  if (!ct[0].defined()) return {Array()};
  return {broadcast_back(ct[0], in[0], reduced_axes(in[0], p))};
}
std::vector<Array> sum_jvp(std::span<const Array> in, std::span<const Array> t, std::span<const Array>,
                           const Params& p) {
  if (!t[0].defined()) return {Array()};
  return {lax::reduce_sum(t[0], reduced_axes(in[0], p))};
}

// reduce_max / reduce_min: the share of each element in the result.
Array extreme_share(const Array& x, const Array& out, const Ints& axes) {
  Array hit = lax::convert_element_type(lax::eq(x, broadcast_back(out, x, axes)), x.dtype());
  Array count = lax::reduce_sum(hit, axes);
  return lax::div(hit, broadcast_back(count, x, axes));
}
std::vector<Array> extreme_vjp(std::span<const Array> in, std::span<const Array> out, std::span<const Array> ct,
                               const Params& p, const CotangentMask& needs) {
  if (!ct[0].defined()) return {Array()};
  Ints axes = reduced_axes(in[0], p);
  return {lax::mul(broadcast_back(ct[0], in[0], axes), extreme_share(in[0], out[0], axes))};
}
std::vector<Array> extreme_jvp(std::span<const Array> in, std::span<const Array> t, std::span<const Array> out,
                               const Params& p) {
  if (!t[0].defined()) return {Array()};
  Ints axes = reduced_axes(in[0], p);
  return {lax::reduce_sum(lax::mul(t[0], extreme_share(in[0], out[0], axes)), axes)};
}

// reduce_prod: d out / d x_i = product of the other elements, computed
// without dividing by zero: out / x_i where x_i != 0; for the single zero
// of a group, the product of the nonzero elements; 0 with several zeros.
Array prod_partials(const Array& x, const Array& out, const Ints& axes) {
  Array zero = ad::zeros_like(x);
  Array is_zero = lax::eq(x, zero);
  Array zeros = lax::reduce_sum(lax::convert_element_type(is_zero, x.dtype()), axes);
  Array nonzero_prod = lax::reduce_prod(lax::select_n(is_zero, {x, ad::full_like(x, 1.0)}), axes);
  Array safe_x = lax::select_n(is_zero, {x, ad::full_like(x, 1.0)});
  Array regular = lax::div(broadcast_back(out, x, axes), safe_x);
  Array single_zero = lax::eq(broadcast_back(zeros, x, axes), ad::full_like(x, 1.0));
  Array at_zero = lax::select_n(single_zero, {zero, broadcast_back(nonzero_prod, x, axes)});
  return lax::select_n(is_zero, {regular, at_zero});
}
std::vector<Array> prod_vjp(std::span<const Array> in, std::span<const Array> out, std::span<const Array> ct,
                            const Params& p, const CotangentMask& needs) {
  if (!ct[0].defined()) return {Array()};
  Ints axes = reduced_axes(in[0], p);
  return {lax::mul(broadcast_back(ct[0], in[0], axes), prod_partials(in[0], out[0], axes))};
}
std::vector<Array> prod_jvp(std::span<const Array> in, std::span<const Array> t, std::span<const Array> out,
                            const Params& p) {
  if (!t[0].defined()) return {Array()};
  Ints axes = reduced_axes(in[0], p);
  return {lax::reduce_sum(lax::mul(t[0], prod_partials(in[0], out[0], axes)), axes)};
}

// cumsum: the transpose of a prefix sum is the suffix sum.
std::vector<Array> cumsum_vjp(std::span<const Array> in, std::span<const Array>, std::span<const Array> ct,
                              const Params& p, const CotangentMask& needs) {
  if (!ct[0].defined()) return {Array()};
  return {lax::cumsum(ct[0], p.i("axis"), !p.b("reverse"))};
}
std::vector<Array> cumsum_jvp(std::span<const Array>, std::span<const Array> t, std::span<const Array>,
                              const Params& p) {
  if (!t[0].defined()) return {Array()};
  return {lax::cumsum(t[0], p.i("axis"), p.b("reverse"))};
}

}  // namespace

void register_reduce_ad(PrimTable& t) {
  set_ad_rules(t, Prim::reduce_sum, sum_vjp, sum_jvp);
  set_ad_rules(t, Prim::reduce_max, extreme_vjp, extreme_jvp);
  set_ad_rules(t, Prim::reduce_min, extreme_vjp, extreme_jvp);
  set_ad_rules(t, Prim::reduce_prod, prod_vjp, prod_jvp);
  set_ad_rules(t, Prim::cumsum, cumsum_vjp, cumsum_jvp);
}

}  // namespace pax
