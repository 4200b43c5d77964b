// Batching rules of the reductions: the axes an example reduces are shifted
// past the batch axis, and the batch axis of the result is where it lands once
// the reduced axes are removed. Nothing is transposed.
#include "pax/interp/interpreter.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

// The axis of the batched operand that holds per-example axis `axis`.
int64_t past_batch(int64_t axis, int64_t bdim) { return axis < bdim ? axis : axis + 1; }

// reduce_sum / max / min / prod / and / or
template <Prim P>
Batched reduce_batch(std::span<const Array> values, std::span<const int64_t> bdims, const Params& p,
                     const BatchInfo& info) {
  const int64_t d = bdims[0];
  const AVal& a = info.in_avals[0];
  Ints axes = normalize_axes(p.ints("axes"), a.shape.rank(), prim_name(P));
  int64_t out_bdim = d;
  for (int64_t& axis : axes) {
    if (axis < d) --out_bdim;
    axis = past_batch(axis, d);
  }
  Params q = p;
  q.set("axes", axes);
  return {{bind1(P, values, q)}, {out_bdim}};
}

// argmax / argmin remove their axis; cumsum keeps it.
template <Prim P>
Batched axis_batch(std::span<const Array> values, std::span<const int64_t> bdims, const Params& p,
                   const BatchInfo& info) {
  const int64_t d = bdims[0];
  const AVal& a = info.in_avals[0];
  const int64_t axis = normalize_axis(p.i("axis"), a.shape.rank(), prim_name(P));
  Params q = p;
  q.set("axis", past_batch(axis, d));
  const int64_t out_bdim = P != Prim::cumsum && axis < d ? d - 1 : d;
  return {{bind1(P, values, q)}, {out_bdim}};
}

}  // namespace

void register_reduce_batching(PrimTable& t) {
  t[size_t(Prim::reduce_sum)].batch = reduce_batch<Prim::reduce_sum>;
  t[size_t(Prim::reduce_max)].batch = reduce_batch<Prim::reduce_max>;
  t[size_t(Prim::reduce_min)].batch = reduce_batch<Prim::reduce_min>;
  t[size_t(Prim::reduce_prod)].batch = reduce_batch<Prim::reduce_prod>;
  t[size_t(Prim::reduce_and)].batch = reduce_batch<Prim::reduce_and>;
  t[size_t(Prim::reduce_or)].batch = reduce_batch<Prim::reduce_or>;
  t[size_t(Prim::argmax)].batch = axis_batch<Prim::argmax>;
  t[size_t(Prim::argmin)].batch = axis_batch<Prim::argmin>;
  t[size_t(Prim::cumsum)].batch = axis_batch<Prim::cumsum>;
}

}  // namespace pax
