// Reduction primitives: reduce_sum / max / min / prod / and / or over a set of
// axes (removed from the result), argmax / argmin along one axis, and cumsum:
// shape/dtype rules. The CPU kernels are the backend's (kernels_reduce.cc).
#include <algorithm>
#include <string>
#include <vector>

#include "pax/core/error.h"
#include "pax/prims/dtype_rules.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

// "reduce_sum of f32[2,3]": the context of axis errors.
std::string context(Prim p, const AVal& x) { return std::string(prim_name(p)) + " of " + x.str(); }

template <Prim P>
constexpr Accepts kReduceAccepts = P == Prim::reduce_sum || P == Prim::reduce_prod  ? Accepts::numeric
                                   : P == Prim::reduce_max || P == Prim::reduce_min ? Accepts::any
                                                                                    : Accepts::int_or_bool;

// ---------------------------------------------------------------------------
// shape rules

template <Prim P>
std::vector<AVal> reduce_rule(std::span<const AVal> in, const Params& p) {
  const AVal& x = in[0];
  check_accepts(P, kReduceAccepts<P>, x);
  const std::vector<int64_t> axes = normalize_axes(p.ints("axes"), x.shape.rank(), context(P, x).c_str());
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < x.shape.rank(); ++d) {
    if (std::find(axes.begin(), axes.end(), d) == axes.end()) dims.push_back(x.shape[d]);
  }
  return {AVal{Shape(std::move(dims)), x.dtype, x.weak_type}};
}

// The one axis of argmax / argmin / cumsum, normalised.
int64_t single_axis(Prim p, const AVal& x, const Params& params) {
  PAX_CHECK(x.shape.rank() > 0, prim_name(p), ": operand ", x.str(), " is a scalar; it needs an array with an axis");
  return normalize_axis(params.i("axis"), x.shape.rank(), context(p, x).c_str());
}

template <Prim P>
std::vector<AVal> arg_rule(std::span<const AVal> in, const Params& p) {
  const AVal& x = in[0];
  const int64_t axis = single_axis(P, x, p);
  const DType index_dtype = p.dtype("index_dtype");
  PAX_CHECK(index_dtype == DType::i32 || index_dtype == DType::i64, prim_name(P), " of ", x.str(),
            ": index_dtype must be int32 or int64, got ", dtype_name(index_dtype));
  const int64_t n = x.shape[axis];
  PAX_CHECK(n > 0, prim_name(P), " of ", x.str(), ": axis ", axis,
            " has size 0; the reduced axis must have at least one element");
  PAX_CHECK(index_dtype == DType::i64 || n - 1 <= int64_t(INT32_MAX), prim_name(P), " of ", x.str(), ": axis ", axis,
            " of size ", n, " does not fit index_dtype int32; use int64");
  std::vector<int64_t> dims = x.shape.dims();
  dims.erase(dims.begin() + axis);
  return {AVal{Shape(std::move(dims)), index_dtype, false}};
}

std::vector<AVal> cumsum_rule(std::span<const AVal> in, const Params& p) {
  const AVal& x = in[0];
  check_accepts(Prim::cumsum, Accepts::numeric, x);
  single_axis(Prim::cumsum, x, p);
  p.b("reverse");
  return {x};
}

template <Prim... Ps>
void set_reduce_rules(PrimTable& t) {
  ((t[size_t(Ps)] = PrimDef{reduce_rule<Ps>}), ...);
}

}  // namespace

void register_reduce_prims(PrimTable& t) {
  set_reduce_rules<Prim::reduce_sum, Prim::reduce_max, Prim::reduce_min, Prim::reduce_prod, Prim::reduce_and,
                   Prim::reduce_or>(t);
  t[size_t(Prim::argmax)] = PrimDef{arg_rule<Prim::argmax>};
  t[size_t(Prim::argmin)] = PrimDef{arg_rule<Prim::argmin>};
  t[size_t(Prim::cumsum)] = PrimDef{cumsum_rule};
}

}  // namespace pax
