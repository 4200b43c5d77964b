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

}  // namespace

void register_elementwise_batching(PrimTable& t) {
#define PAX_ELEMENTWISE_BATCH(P) t[size_t(Prim::P)].batch = elementwise_batch<Prim::P>;
  PAX_ELEMENTWISE_BATCH(neg)
  PAX_ELEMENTWISE_BATCH(abs)
  PAX_ELEMENTWISE_BATCH(sign)
  PAX_ELEMENTWISE_BATCH(exp)
  PAX_ELEMENTWISE_BATCH(expm1)
  PAX_ELEMENTWISE_BATCH(log)
  PAX_ELEMENTWISE_BATCH(log1p)
  PAX_ELEMENTWISE_BATCH(sqrt)
  PAX_ELEMENTWISE_BATCH(rsqrt)
  PAX_ELEMENTWISE_BATCH(tanh)
  PAX_ELEMENTWISE_BATCH(logistic)
  PAX_ELEMENTWISE_BATCH(erf)
  PAX_ELEMENTWISE_BATCH(erf_inv)
  PAX_ELEMENTWISE_BATCH(sin)
  PAX_ELEMENTWISE_BATCH(cos)
  PAX_ELEMENTWISE_BATCH(floor)
  PAX_ELEMENTWISE_BATCH(ceil)
  PAX_ELEMENTWISE_BATCH(round)
  PAX_ELEMENTWISE_BATCH(is_finite)
  PAX_ELEMENTWISE_BATCH(not_)
  PAX_ELEMENTWISE_BATCH(integer_pow)
  PAX_ELEMENTWISE_BATCH(convert_element_type)
  PAX_ELEMENTWISE_BATCH(bitcast_convert_type)
  PAX_ELEMENTWISE_BATCH(add)
  PAX_ELEMENTWISE_BATCH(sub)
  PAX_ELEMENTWISE_BATCH(mul)
  PAX_ELEMENTWISE_BATCH(div)
  PAX_ELEMENTWISE_BATCH(rem)
  PAX_ELEMENTWISE_BATCH(pow)
  PAX_ELEMENTWISE_BATCH(max)
  PAX_ELEMENTWISE_BATCH(min)
  PAX_ELEMENTWISE_BATCH(and_)
  PAX_ELEMENTWISE_BATCH(or_)
  PAX_ELEMENTWISE_BATCH(xor_)
  PAX_ELEMENTWISE_BATCH(eq)
  PAX_ELEMENTWISE_BATCH(ne)
  PAX_ELEMENTWISE_BATCH(lt)
  PAX_ELEMENTWISE_BATCH(le)
  PAX_ELEMENTWISE_BATCH(gt)
  PAX_ELEMENTWISE_BATCH(ge)
  PAX_ELEMENTWISE_BATCH(shift_left)
  PAX_ELEMENTWISE_BATCH(shift_right_logical)
  PAX_ELEMENTWISE_BATCH(shift_right_arithmetic)
  PAX_ELEMENTWISE_BATCH(select_n)
#undef PAX_ELEMENTWISE_BATCH
}

}  // namespace pax
