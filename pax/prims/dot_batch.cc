// Batching rule of dot_general (as jax.lax's _dot_general_batch_rule). When
// both operands are batched their batch axes become one more dot_general
// batch dimension (the first, so the output carries it at axis 0). When only
// one is, its batch axis is just another free axis of that operand: no copy,
// and the output batch axis is where that free axis lands (batch dims, then
// lhs free axes, then rhs free axes, each in axis order).
#include <algorithm>

#include "pax/interp/interpreter.h"
#include "pax/prims/dot_params.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

// Unbatched axis numbers -> axis numbers of the array batched at `bdim`.
Ints bump(Ints axes, int64_t bdim) {
  for (int64_t& a : axes) a += a >= bdim ? 1 : 0;
  return axes;
}

bool contains(const Ints& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Free (neither contracting nor batch) axes of an unbatched operand of `rank`
// that come before the batch axis `bdim` of its batched form.
int64_t free_axes_before(int64_t rank, const Ints& contracting, const Ints& batch, int64_t bdim) {
  int64_t n = 0;
  for (int64_t a = 0; a < std::min(rank, bdim); ++a) n += contains(contracting, a) || contains(batch, a) ? 0 : 1;
  return n;
}

Batched dot_general_batch(std::span<const Array> values, std::span<const int64_t> bdims, const Params& p,
                          const BatchInfo&) {
  PAX_CHECK(!dot_has_bias(p) && !dot_has_multiplier(p) && !dot_has_relu(p),
            "dot_general: a product with a bias or multiplier operand or a ReLU (a compiled epilogue) is not "
            "batched");
  const int64_t lb = bdims[0], rb = bdims[1];
  Ints lc = p.ints("lhs_contracting_dims"), rc = p.ints("rhs_contracting_dims");
  Ints lbatch = p.ints("lhs_batch_dims"), rbatch = p.ints("rhs_batch_dims");
  const int64_t lhs_rank = values[0].ndim() - (lb >= 0 ? 1 : 0);
  const int64_t rhs_rank = values[1].ndim() - (rb >= 0 ? 1 : 0);
  const int64_t nbatch = int64_t(lbatch.size());
  int64_t out_bdim;
  if (lb >= 0 && rb >= 0) {
    lc = bump(lc, lb);
    rc = bump(rc, rb);
    lbatch = bump(lbatch, lb);
    rbatch = bump(rbatch, rb);
    lbatch.insert(lbatch.begin(), lb);
    rbatch.insert(rbatch.begin(), rb);
    out_bdim = 0;
  } else if (lb >= 0) {
    out_bdim = nbatch + free_axes_before(lhs_rank, lc, lbatch, lb);
    lc = bump(lc, lb);
    lbatch = bump(lbatch, lb);
  } else {
    const int64_t lhs_free = lhs_rank - int64_t(lc.size()) - nbatch;
    out_bdim = nbatch + lhs_free + free_axes_before(rhs_rank, rc, rbatch, rb);
    rc = bump(rc, rb);
    rbatch = bump(rbatch, rb);
  }
  Params q = p;
  q.set("lhs_contracting_dims", lc);
  q.set("rhs_contracting_dims", rc);
  q.set("lhs_batch_dims", lbatch);
  q.set("rhs_batch_dims", rbatch);
  return {{bind1(Prim::dot_general, {values[0], values[1]}, q)}, {out_bdim}};
}

}  // namespace

void register_dot_batching(PrimTable& t) { t[size_t(Prim::dot_general)].batch = dot_general_batch; }

}  // namespace pax
