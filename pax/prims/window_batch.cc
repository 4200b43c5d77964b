// Batching rules of the windowed reductions: the batch axis becomes one more
// axis of the window, of size 1 and stride 1, so windows never cross it.
#include "pax/interp/vmap.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

// The params with a window axis of size 1 inserted at `axis`.
Params with_batch_axis(const Params& p, int64_t axis) {
  Ints dims = p.ints("window_dimensions"), strides = p.ints("window_strides"), pad = p.ints("padding");
  dims.insert(dims.begin() + axis, 1);
  strides.insert(strides.begin() + axis, 1);
  pad.insert(pad.begin() + 2 * axis, {0, 0});
  Params q = p;
  q.set("window_dimensions", dims);
  q.set("window_strides", strides);
  q.set("padding", pad);
  return q;
}

Batched reduce_window_max_batch(std::span<const Array> values, std::span<const int64_t> bdims, const Params& p,
                                const BatchInfo&) {
  const int64_t d = bdims[0];
  return {{bind1(Prim::reduce_window_max, values, with_batch_axis(p, d))}, {d}};
}

// Both operands batched at axis 0 (an unbatched one broadcast).
template <Prim P>
Batched select_batch(std::span<const Array> values, std::span<const int64_t> bdims, const Params& p,
                     const BatchInfo& info) {
  const Array v = move_batch_axis(values[0], bdims[0], 0, info.axis_size);
  const Array x = move_batch_axis(values[1], bdims[1], 0, info.axis_size);
  return {{bind1(P, {v, x}, with_batch_axis(p, 0))}, {0}};
}

}  // namespace

void register_window_batching(PrimTable& t) {
  t[size_t(Prim::reduce_window_max)].batch = reduce_window_max_batch;
  t[size_t(Prim::select_and_scatter_add)].batch = select_batch<Prim::select_and_scatter_add>;
  t[size_t(Prim::select_and_gather_add)].batch = select_batch<Prim::select_and_gather_add>;
}

}  // namespace pax
