// Batching rules of sort and top_k. sort: every operand carries the batch
// axis at one position (that of the first batched operand, so operands
// batched alike are not moved; unbatched ones are broadcast there) and the
// sorted dimension shifts past it. top_k works on the last axis, so a batch
// axis there is swapped with the axis before it.
#include "pax/interp/interpreter.h"
#include "pax/interp/vmap.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

Batched sort_batch(std::span<const Array> values, std::span<const int64_t> bdims, const Params& p,
                   const BatchInfo& info) {
  int64_t b = -1;
  for (int64_t d : bdims) {
    if (d >= 0) {
      b = d;
      break;
    }
  }
  std::vector<Array> operands;
  for (size_t i = 0; i < values.size(); ++i) {
    operands.push_back(move_batch_axis(values[i], bdims[i], b, info.axis_size));
  }
  const int64_t dim = p.i("dimension");
  Params q = p;
  q.set("dimension", dim + (dim >= b ? 1 : 0));
  std::vector<Array> out = bind(Prim::sort, operands, q);
  return {out, std::vector<int64_t>(out.size(), b)};
}

Batched top_k_batch(std::span<const Array> values, std::span<const int64_t> bdims, const Params& p,
                    const BatchInfo& info) {
  Array x = values[0];
  int64_t b = bdims[0];
  if (b == x.ndim() - 1) {
    x = move_batch_axis(x, b, b - 1, info.axis_size);
    b -= 1;
  }
  std::vector<Array> out = bind(Prim::top_k, {x}, p);
  return {out, {b, b}};
}

}  // namespace

void register_sort_batching(PrimTable& t) {
  t[size_t(Prim::sort)].batch = sort_batch;
  t[size_t(Prim::top_k)].batch = top_k_batch;
}

}  // namespace pax
