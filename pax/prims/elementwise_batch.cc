// Batching rules of the elementwise primitives: unary ops, conversions,
// integer_pow, binary arithmetic, comparisons, shifts and select_n. One rule
// serves them all: the operands are aligned on one batch axis — the one every
// batched operand already has when they agree (no transpose), else axis 0 —
// unbatched operands are broadcast along it, and the primitive is applied
// once. A selector of select_n that is a scalar per example stays a scalar
// when it is not batched, and is broadcast to the case shape when it is.
#include <algorithm>

#include "pax/interp/interpreter.h"
#include "pax/interp/vmap.h"
#include "pax/ops/lax.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

template <Prim P>
Batched elementwise_batch(std::span<const Array> values, std::span<const int64_t> bdims, const Params& p,
                          const BatchInfo& info) {
  if (values.size() == 1) return {{bind1(P, values, p)}, {bdims[0]}};
  const std::vector<AVal>& avals = info.in_avals;
  // The per-example shape of the result: select_n's selector may be the only
  // operand of lower rank.
  const Shape& shape = std::max_element(avals.begin(), avals.end(), [](const AVal& a, const AVal& b) {
                         return a.shape.rank() < b.shape.rank();
                       })->shape;
  int64_t to = -1;
  for (size_t i = 0; i < values.size(); ++i) {
    if (bdims[i] < 0 || avals[i].shape.rank() != shape.rank()) continue;
    if (to < 0) {
      to = bdims[i];
    } else if (to != bdims[i]) {
      to = 0;
      break;
    }
  }
  to = std::max<int64_t>(to, 0);
  Ints batched_shape = shape.dims();
  batched_shape.insert(batched_shape.begin() + to, info.axis_size);
  std::vector<Array> args;
  for (size_t i = 0; i < values.size(); ++i) {
    if (avals[i].shape.rank() < shape.rank()) {  // a scalar selector
      args.push_back(bdims[i] < 0 ? values[i] : lax::broadcast_in_dim(values[i], batched_shape, {to}));
    } else {
      args.push_back(move_batch_axis(values[i], bdims[i], to, info.axis_size));
    }
  }
  return {{bind1(P, args, p)}, {to}};
}

template <Prim P, PrimFamily F>
void set_elementwise_batch(PrimTable& t) {
  if constexpr (F == PrimFamily::unary || F == PrimFamily::binary) t[size_t(P)].batch = elementwise_batch<P>;
}

}  // namespace

void register_elementwise_batching(PrimTable& t) {
  // Every primitive of the unary and binary families of prims.def.
#define PAX_PRIM(id, name, arity, family, accepts, cost, kernel, recompute, wrapper) \
  set_elementwise_batch<Prim::id, PrimFamily::family>(t);
#include "pax/ir/prims.def"
#undef PAX_PRIM
}

}  // namespace pax
