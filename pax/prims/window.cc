// Windowed reductions: reduce_window_max (max pooling) and the two linear maps
// its derivatives need, as XLA has them: select_and_scatter_add adds each
// window's source value at the window's maximum (the VJP), and
// select_and_gather_add reads a tangent at each window's maximum (the JVP).
// A window's maximum is its first NaN if it has one, else its first largest
// element in row-major window order; padding takes no part (an all-padding
// window gives -inf, nothing scattered, and a gathered 0). Shape/dtype rules;
// the CPU kernels are the backend's (kernels_window.cc).
#include <vector>

#include "pax/core/error.h"
#include "pax/prims/dtype_rules.h"
#include "pax/prims/registry.h"
#include "pax/prims/window_params.h"

namespace pax {
namespace {

Shape windowed_shape(const Shape& in, const Window& w) {
  Ints out;
  for (int64_t d = 0; d < in.rank(); ++d) {
    const int64_t padded = in[d] + w.lo[size_t(d)] + w.hi[size_t(d)], k = w.dims[size_t(d)];
    out.push_back(padded < k ? 0 : (padded - k) / w.strides[size_t(d)] + 1);
  }
  return Shape(std::move(out));
}

std::vector<AVal> reduce_window_max_rule(std::span<const AVal> in, const Params& p) {
  const AVal& x = in[0];
  check_accepts(Prim::reduce_window_max, Accepts::floating, x);
  return {AVal{windowed_shape(x.shape, window_of(Prim::reduce_window_max, x, p)), x.dtype, x.weak_type}};
}

// (values, operand): values of the windowed shape (scatter) or of the
// operand's (gather), with the operand's dtype.
template <Prim P>
std::vector<AVal> select_rule(std::span<const AVal> in, const Params& p) {
  const AVal &v = in[0], &x = in[1];
  check_accepts(P, Accepts::floating, x);
  const Shape windowed = windowed_shape(x.shape, window_of(P, x, p));
  const Shape& want = P == Prim::select_and_scatter_add ? windowed : x.shape;
  PAX_CHECK(v.dtype == x.dtype && v.shape == want, prim_name(P), ": ",
            P == Prim::select_and_scatter_add ? "source " : "tangent ", v.str(), " must be ",
            AVal{want, x.dtype, false}.str(), " for operand ", x.str());
  return {AVal{P == Prim::select_and_scatter_add ? x.shape : windowed, x.dtype, v.weak_type}};
}

}  // namespace

Window window_of(Prim prim, const AVal& x, const Params& p) {
  Window w{p.ints("window_dimensions"), p.ints("window_strides"), {}, {}};
  const Ints& pad = p.ints("padding");
  const int64_t r = x.shape.rank();
  PAX_CHECK(int64_t(w.dims.size()) == r && int64_t(w.strides.size()) == r && int64_t(pad.size()) == 2 * r,
            prim_name(prim), " of ", x.str(), ": window_dimensions ", ints_str(w.dims), ", window_strides ",
            ints_str(w.strides), " and padding ", ints_str(pad), " need ", r, ", ", r, " and ", 2 * r,
            " entries (one per axis, (lo, hi) pairs for the padding)");
  for (int64_t d = 0; d < r; ++d) {
    w.lo.push_back(pad[size_t(2 * d)]);
    w.hi.push_back(pad[size_t(2 * d + 1)]);
    PAX_CHECK(w.dims[size_t(d)] >= 1 && w.strides[size_t(d)] >= 1 && w.lo.back() >= 0 && w.hi.back() >= 0,
              prim_name(prim), " of ", x.str(),
              ": window_dimensions and window_strides must be >= 1 and padding "
              ">= 0, got ",
              ints_str(w.dims), ", ", ints_str(w.strides), ", ", ints_str(pad));
  }
  return w;
}

void register_window_prims(PrimTable& t) {
  t[size_t(Prim::reduce_window_max)] = PrimDef{reduce_window_max_rule};
  t[size_t(Prim::select_and_scatter_add)] = PrimDef{select_rule<Prim::select_and_scatter_add>};
  t[size_t(Prim::select_and_gather_add)] = PrimDef{select_rule<Prim::select_and_gather_add>};
}

}  // namespace pax
