// Batching rules of gather and scatter_add (as jax.lax's). A batched operand
// alone: its batch axis is one more full-size slice (window) axis. Batched
// indices alone: their batch axis is one more batch axis of the indices. Both:
// an iota column counting along the batch is appended to every index vector
// and addresses the operand's batch axis, which becomes a collapsed (inserted)
// axis of slice size 1; the iota is always in range, so the clip / fill
// semantics of the user's indices are unchanged.
// Batch axes stay where they are whenever the dimension numbers can express
// that position, so most batched calls copy nothing.
#include <algorithm>
#include <limits>

#include "pax/interp/interpreter.h"
#include "pax/interp/vmap.h"
#include "pax/ops/lax.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

// Unbatched axis numbers -> axis numbers once an axis is inserted at `pos`.
Ints bump(Ints axes, int64_t pos) {
  for (int64_t& a : axes) a += a >= pos ? 1 : 0;
  return axes;
}

// The sorted axes `sorted` with a new axis inserted at `pos`.
Ints with_axis(const Ints& sorted, int64_t pos) {
  Ints out = bump(sorted, pos);
  out.insert(std::lower_bound(out.begin(), out.end(), pos), pos);
  return out;
}

// Axes [0, rank) not in `dims`, in order.
Ints complement(int64_t rank, const Ints& dims) {
  Ints out;
  for (int64_t a = 0; a < rank; ++a) {
    if (std::find(dims.begin(), dims.end(), a) == dims.end()) out.push_back(a);
  }
  return out;
}

// How many of `sorted` lie before the new axis `pos`: its rank among them
// once inserted.
int64_t rank_among(const Ints& sorted, int64_t pos) {
  return std::lower_bound(sorted.begin(), sorted.end(), pos) - sorted.begin();
}

// A position for a new axis that makes it element j of `sorted` once inserted.
int64_t slot(const Ints& sorted, int64_t j) {
  if (j < int64_t(sorted.size())) return sorted[size_t(j)];
  return sorted.empty() ? 0 : sorted.back() + 1;
}

// Appends to each index vector of `indices` (batch axis at `bdim`) its
// position along the batch. Narrow index dtypes are widened when the batch
// is too long for them.
Array append_batch_index(const Array& indices, int64_t bdim, int64_t size) {
  Array idx = indices;
  const bool fits = idx.dtype() == DType::i64 ||
                    (idx.dtype() == DType::u8 && size - 1 <= std::numeric_limits<uint8_t>::max()) ||
                    (idx.dtype() == DType::i32 && size - 1 <= std::numeric_limits<int32_t>::max()) ||
                    (idx.dtype() == DType::u32 && size - 1 <= std::numeric_limits<uint32_t>::max());
  if (!fits) idx = lax::convert_element_type(idx, DType::i64);
  Ints shape = idx.shape().dims();
  shape.back() = 1;
  return lax::concatenate({idx, lax::iota(idx.dtype(), shape, bdim)}, idx.ndim() - 1);
}

// Where batched indices keep their batch axis: not on the index vector (the
// last axis), which it is swapped with the axis before.
int64_t index_batch_axis(const Array& indices, int64_t bdim) { return bdim == indices.ndim() - 1 ? bdim - 1 : bdim; }

Batched gather_batch(std::span<const Array> values, std::span<const int64_t> bdims, const Params& p,
                     const BatchInfo& info) {
  const std::vector<AVal>& out = info.out_avals;
  const int64_t size = info.axis_size;
  Array x = values[0], idx = values[1];
  const int64_t xb = bdims[0];
  const Ints offset = p.ints("offset_dims"), collapsed = p.ints("collapsed_slice_dims");
  const Ints start_map = p.ints("start_index_map");
  Ints slice_sizes = p.ints("slice_sizes");
  Params q = p;
  if (bdims[1] < 0) {
    // The j-th kept operand axis fills the j-th offset axis of the output.
    const int64_t j = rank_among(complement(x.ndim() - 1, collapsed), xb);
    const int64_t out_bdim = slot(offset, j);
    slice_sizes.insert(slice_sizes.begin() + xb, size);
    q.set("offset_dims", with_axis(offset, out_bdim));
    q.set("collapsed_slice_dims", bump(collapsed, xb));
    q.set("start_index_map", bump(start_map, xb));
    q.set("slice_sizes", slice_sizes);
    return {{bind1(Prim::gather, {x, idx}, q)}, {out_bdim}};
  }
  const int64_t ib = index_batch_axis(idx, bdims[1]);
  idx = move_batch_axis(idx, bdims[1], ib, size);
  // The i-th batch axis of the indices is the i-th non-offset output axis.
  const int64_t out_bdim = slot(complement(out[0].shape.rank(), offset), ib);
  q.set("offset_dims", bump(offset, out_bdim));
  if (xb < 0) return {{bind1(Prim::gather, {x, idx}, q)}, {out_bdim}};
  if (size == 0) {
    // A slice of size 1 cannot be taken from the empty batch axis.
    Ints shape = out[0].shape.dims();
    shape.insert(shape.begin() + out_bdim, 0);
    return {{lax::broadcast_in_dim(scalar(0.0, x.dtype()), shape, {})}, {out_bdim}};
  }
  idx = append_batch_index(idx, ib, size);
  Ints map = bump(start_map, xb);
  map.push_back(xb);
  slice_sizes.insert(slice_sizes.begin() + xb, 1);
  q.set("collapsed_slice_dims", with_axis(collapsed, xb));
  q.set("start_index_map", map);
  q.set("slice_sizes", slice_sizes);
  return {{bind1(Prim::gather, {x, idx}, q)}, {out_bdim}};
}

Batched scatter_add_batch(std::span<const Array> values, std::span<const int64_t> bdims, const Params& p,
                          const BatchInfo& info) {
  const int64_t size = info.axis_size;
  Array x = values[0], idx = values[1], upd = values[2];
  int64_t xb = bdims[0], ub = bdims[2];
  const int64_t rank = x.ndim() - (xb >= 0 ? 1 : 0), upd_rank = upd.ndim() - (ub >= 0 ? 1 : 0);
  const Ints window_dims = p.ints("update_window_dims"), inserted = p.ints("inserted_window_dims");
  const Ints to_operand = p.ints("scatter_dims_to_operand_dims");
  Params q = p;
  if (bdims[1] < 0) {
    if (ub < 0) {
      // Every member adds the same updates: scatter them once and broadcast.
      Ints shape = x.shape().dims();
      shape.erase(shape.begin() + xb);
      Array zeros = lax::broadcast_in_dim(scalar(0.0, x.dtype()), shape, {});
      Array delta = bind1(Prim::scatter_add, {zeros, idx, upd}, p);
      return {{lax::add(x, move_batch_axis(delta, -1, xb, size))}, {xb}};
    }
    // The batch axis is a window axis of the updates: the j-th window axis
    // of the updates covers the j-th non-inserted operand axis.
    const Ints operand_windows = complement(rank, inserted);
    if (xb < 0) {
      xb = slot(operand_windows, rank_among(window_dims, ub));
      x = move_batch_axis(x, -1, xb, size);
    } else if (rank_among(window_dims, ub) != rank_among(operand_windows, xb)) {
      ub = slot(window_dims, rank_among(operand_windows, xb));
      upd = move_batch_axis(upd, bdims[2], ub, size);
    }
    q.set("update_window_dims", with_axis(window_dims, ub));
    q.set("inserted_window_dims", bump(inserted, xb));
    q.set("scatter_dims_to_operand_dims", bump(to_operand, xb));
    return {{bind1(Prim::scatter_add, {x, idx, upd}, q)}, {xb}};
  }
  // Batched indices: the batch axis is a scatter (non-window) axis of the
  // updates, the i-th of them matching the i-th batch axis of the indices.
  const Ints scatter_axes = complement(upd_rank, window_dims);
  int64_t ib = index_batch_axis(idx, bdims[1]);
  if (ub < 0) {
    ub = slot(scatter_axes, ib);
    upd = move_batch_axis(upd, -1, ub, size);
  } else {
    ib = rank_among(scatter_axes, ub);
  }
  idx = move_batch_axis(idx, bdims[1], ib, size);
  if (xb < 0) {
    xb = 0;
    x = move_batch_axis(x, -1, xb, size);
  }
  idx = append_batch_index(idx, ib, size);
  Ints map = bump(to_operand, xb);
  map.push_back(xb);
  q.set("update_window_dims", bump(window_dims, ub));
  q.set("inserted_window_dims", with_axis(inserted, xb));
  q.set("scatter_dims_to_operand_dims", map);
  return {{bind1(Prim::scatter_add, {x, idx, upd}, q)}, {xb}};
}

}  // namespace

void register_indexing_batching(PrimTable& t) {
  t[size_t(Prim::gather)].batch = gather_batch;
  t[size_t(Prim::scatter_add)].batch = scatter_add_batch;
}

}  // namespace pax
