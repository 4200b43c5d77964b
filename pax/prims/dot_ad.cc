// VJP and JVP rules of dot_general. The cotangent of each operand is another
// dot_general of the output cotangent with the other operand, followed by a
// transpose back to the operand's axis order (as jax.lax does), or with the
// operands the other way round when that order needs no transpose.
#include <algorithm>
#include <numeric>
#include <optional>

#include "pax/prims/ad_util.h"
#include "pax/prims/dot_params.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

struct Dims {
  Ints lhs_contracting, rhs_contracting, lhs_batch, rhs_batch;
};

Dims dims_of(const Params& p) {
  return {p.ints("lhs_contracting_dims"), p.ints("rhs_contracting_dims"), p.ints("lhs_batch_dims"),
          p.ints("rhs_batch_dims")};
}

// Axes [0, n) without those in a and b, in order.
Ints remaining(int64_t n, const Ints& a, const Ints& b) {
  Ints out;
  for (int64_t i = 0; i < n; ++i) {
    if (std::find(a.begin(), a.end(), i) == a.end() && std::find(b.begin(), b.end(), i) == b.end()) out.push_back(i);
  }
  return out;
}

Ints range(int64_t start, size_t n) {
  Ints out(n);
  std::iota(out.begin(), out.end(), start);
  return out;
}

Ints argsort(const Ints& v) {
  Ints idx(v.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int64_t a, int64_t b) { return v[size_t(a)] < v[size_t(b)]; });
  return idx;
}

// The cotangent of x in dot_general(x, y) (or of y when swap_ans: the output
// then holds y's free axes before x's).
Array transpose_operand(const Array& g, const Array& x, const Array& y, const Ints& xc, const Ints& yc, const Ints& xb,
                        const Ints& yb, bool swap_ans) {
  const Ints x_kept = remaining(x.ndim(), xc, xb);
  const Ints y_kept = remaining(y.ndim(), yc, yb);
  const size_t nb = xb.size();
  const Ints ans_batch = range(0, nb);
  const Ints ans_y = swap_ans ? range(int64_t(nb), y_kept.size()) : range(int64_t(nb + x_kept.size()), y_kept.size());
  // Compute in the cotangent's dtype (f32 for bf16 operands with f32 output).
  Array yy = y.dtype() == g.dtype() ? y : lax::convert_element_type(y, g.dtype());
  Ints x_contract_sorted_by_y;
  for (int64_t i : argsort(yc)) x_contract_sorted_by_y.push_back(xc[size_t(i)]);
  // x's axes in the order the product yields them: with g as the left operand
  // x's kept axes come first, with y on the left its contracted ones do.
  auto joined = [&](const Ints& first, const Ints& second) {
    Ints order = xb;
    order.insert(order.end(), first.begin(), first.end());
    order.insert(order.end(), second.begin(), second.end());
    return order;
  };
  const Ints kept_first = joined(x_kept, x_contract_sorted_by_y);
  const Ints contracted_first = joined(x_contract_sorted_by_y, x_kept);
  // jax.lax's order, unless only the other gives x's own layout (a weight's
  // gradient, y^T g): then no transpose is left to run.
  const bool y_left = !std::is_sorted(kept_first.begin(), kept_first.end()) &&
                      std::is_sorted(contracted_first.begin(), contracted_first.end());
  const Array r = y_left ? lax::dot_general(yy, g, {y_kept, ans_y, yb, ans_batch})
                         : lax::dot_general(g, yy, {ans_y, y_kept, ans_batch, yb});
  const Ints& order = y_left ? contracted_first : kept_first;
  Array xbar = std::is_sorted(order.begin(), order.end()) ? r : lax::transpose(r, argsort(order));
  return xbar.dtype() == x.dtype() ? xbar : lax::convert_element_type(xbar, x.dtype());
}

// Bias and multiplier operands and ReLUs are written by the compiler's
// epilogue passes after differentiation; no derivative rule sees them.
void check_plain_product(const Params& p) {
  PAX_CHECK(!dot_has_bias(p) && !dot_has_multiplier(p) && !dot_has_relu(p),
            "dot_general: a product with a bias or multiplier operand or a ReLU (a compiled epilogue) is not "
            "differentiated");
}

std::vector<Array> dot_vjp(std::span<const Array> in, std::span<const Array>, std::span<const Array> ct,
                           const Params& p, const CotangentMask& needs) {
  check_plain_product(p);
  if (!ct[0].defined()) return {Array(), Array()};
  const Dims d = dims_of(p);
  const Array &x = in[0], &y = in[1];
  std::vector<Array> out(2);
  if (is_floating(x.dtype()) && needs_cotangent(needs, 0)) {
    out[0] = transpose_operand(ct[0], x, y, d.lhs_contracting, d.rhs_contracting, d.lhs_batch, d.rhs_batch, false);
  }
  if (is_floating(y.dtype()) && needs_cotangent(needs, 1)) {
    out[1] = transpose_operand(ct[0], y, x, d.rhs_contracting, d.lhs_contracting, d.rhs_batch, d.lhs_batch, true);
  }
  return out;
}

std::vector<Array> dot_jvp(std::span<const Array> in, std::span<const Array> t, std::span<const Array> out,
                           const Params& p) {
  check_plain_product(p);
  const Dims d = dims_of(p);
  const std::optional<DType> preferred =
      p.has("preferred_element_type") ? std::optional<DType>(p.dtype("preferred_element_type")) : std::nullopt;
  lax::DotDimensionNumbers dn{d.lhs_contracting, d.rhs_contracting, d.lhs_batch, d.rhs_batch};
  Array result;
  if (t[0].defined()) result = lax::dot_general(t[0], in[1], dn, preferred);
  if (t[1].defined()) result = ad::add(result, lax::dot_general(in[0], t[1], dn, preferred));
  return {result};
}

}  // namespace

void register_dot_ad(PrimTable& t) { set_ad_rules(t, Prim::dot_general, dot_vjp, dot_jvp); }

}  // namespace pax
