// Batching rules of the shape primitives. Most keep the batch axis where it
// is and translate their per-example parameters past it (transpose,
// broadcast_in_dim, squeeze, expand_dims, rev, slice, pad); reshape moves it
// to the front unless the reshape leaves the axes before it alone.
// Dynamic slices with batched start indices become one gather (or
// scatter-add plus select for updates) over the whole batch.
#include <algorithm>
#include <numeric>

#include "pax/core/error.h"
#include "pax/interp/interpreter.h"
#include "pax/interp/vmap.h"
#include "pax/ops/lax.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

using Values = std::span<const Array>;
using Bdims = std::span<const int64_t>;

// The axis of the batched operand that holds per-example axis `axis`.
int64_t past_batch(int64_t axis, int64_t bdim) { return axis < bdim ? axis : axis + 1; }

Ints range(int64_t begin, int64_t end) {
  Ints r(size_t(std::max<int64_t>(end - begin, 0)));
  std::iota(r.begin(), r.end(), begin);
  return r;
}

// Shared batch axis of the batched operands, or 0 when they disagree.
int64_t common_bdim(Bdims bdims) {
  int64_t to = -1;
  for (int64_t d : bdims) {
    if (d < 0) continue;
    if (to >= 0 && d != to) return 0;
    to = d;
  }
  return std::max<int64_t>(to, 0);
}

Params with(const Params& p, const char* name, ParamValue value) {
  Params q = p;
  q.set(name, std::move(value));
  return q;
}

// ---------------------------------------------------------------------------
// reshape: row-major order lets the batch axis stay at d when the reshape
// keeps the first d axes; otherwise it moves to the front.

Batched reshape_batch(Values values, Bdims bdims, const Params& p, const BatchInfo& info) {
  const AVal& a = info.in_avals[0];
  Ints sizes = p.ints("new_sizes");
  const int64_t d = bdims[0];
  const bool keeps_prefix = int64_t(sizes.size()) >= d &&
                            std::equal(sizes.begin(), sizes.begin() + d, a.shape.dims().begin());
  const int64_t to = keeps_prefix ? d : 0;
  sizes.insert(sizes.begin() + to, info.axis_size);
  return {{lax::reshape(move_batch_axis(values[0], d, to, info.axis_size), sizes)}, {to}};
}

// transpose: the batch axis stays at d.
Batched transpose_batch(Values values, Bdims bdims, const Params& p, const BatchInfo&) {
  const int64_t d = bdims[0];
  Ints perm;
  for (int64_t a : p.ints("permutation")) perm.push_back(past_batch(a, d));
  perm.insert(perm.begin() + d, d);
  return {{lax::transpose(values[0], perm)}, {d}};
}

// broadcast_in_dim: the batch axis goes right after the output axis of the
// operand axis before it, which keeps broadcast_dimensions increasing.
Batched broadcast_in_dim_batch(Values values, Bdims bdims, const Params& p, const BatchInfo& info) {
  const int64_t d = bdims[0];
  Ints shape = p.ints("shape");
  Ints dims = p.ints("broadcast_dimensions");
  const int64_t to = d == 0 ? 0 : dims[size_t(d - 1)] + 1;
  for (int64_t& b : dims) b = past_batch(b, to);
  dims.insert(dims.begin() + d, to);
  shape.insert(shape.begin() + to, info.axis_size);
  return {{lax::broadcast_in_dim(values[0], shape, dims)}, {to}};
}

Batched squeeze_batch(Values values, Bdims bdims, const Params& p, const BatchInfo& info) {
  const AVal& a = info.in_avals[0];
  const int64_t d = bdims[0];
  Ints dims = normalize_axes(p.ints("dimensions"), a.shape.rank(), "squeeze");
  int64_t to = d;
  for (int64_t& x : dims) {
    if (x < d) --to;
    x = past_batch(x, d);
  }
  return {{lax::squeeze(values[0], dims)}, {to}};
}

// expand_dims: the batch axis goes just before the output axis of the
// operand axis that followed it (or last).
Batched expand_dims_batch(Values values, Bdims bdims, const Params& p, const BatchInfo& info) {
  const AVal& a = info.in_avals[0];
  const int64_t d = bdims[0];
  const int64_t out_rank = a.shape.rank() + int64_t(p.ints("dimensions").size());
  Ints dims = normalize_axes(p.ints("dimensions"), out_rank, "expand_dims");
  int64_t to = out_rank;
  for (int64_t j = 0, k = 0; j < out_rank; ++j) {
    if (std::find(dims.begin(), dims.end(), j) != dims.end()) continue;
    if (k++ == d) {
      to = j;
      break;
    }
  }
  for (int64_t& x : dims) x = past_batch(x, to);
  return {{lax::expand_dims(values[0], dims)}, {to}};
}

Batched rev_batch(Values values, Bdims bdims, const Params& p, const BatchInfo& info) {
  const AVal& a = info.in_avals[0];
  const int64_t d = bdims[0];
  Ints dims = normalize_axes(p.ints("dimensions"), a.shape.rank(), "rev");
  for (int64_t& x : dims) x = past_batch(x, d);
  return {{lax::rev(values[0], dims)}, {d}};
}

// slice: the whole batch axis.
Batched slice_batch(Values values, Bdims bdims, const Params& p, const BatchInfo& info) {
  const int64_t d = bdims[0];
  Ints start = p.ints("start_indices"), limit = p.ints("limit_indices");
  Ints strides = p.has("strides") ? p.ints("strides") : Ints{};
  start.insert(start.begin() + d, 0);
  limit.insert(limit.begin() + d, info.axis_size);
  if (!strides.empty()) strides.insert(strides.begin() + d, 1);
  return {{lax::slice(values[0], start, limit, strides)}, {d}};
}

// concatenate: operands aligned on one batch axis (unbatched ones broadcast).
Batched concatenate_batch(Values values, Bdims bdims, const Params& p, const BatchInfo& info) {
  const int64_t to = common_bdim(bdims);
  std::vector<Array> parts;
  for (size_t i = 0; i < values.size(); ++i) parts.push_back(move_batch_axis(values[i], bdims[i], to, info.axis_size));
  return {{lax::concatenate(parts, past_batch(p.i("dimension"), to))}, {to}};
}

// pad: with a shared padding value, the batch axis is simply not padded. A
// batched padding value (a scalar per example) is written over the padding
// afterwards, found by padding a mask of the operand.
Batched pad_batch(Values values, Bdims bdims, const Params& p, const BatchInfo& info) {
  const AVal& a = info.in_avals[0];
  const Array& x = values[0];
  const int64_t dx = bdims[0];
  Ints cfg = p.ints("padding_config");
  if (bdims[1] < 0) {
    cfg.insert(cfg.begin() + 3 * dx, {0, 0, 0});
    return {{bind1(Prim::pad, values, with(p, "padding_config", cfg))}, {dx}};
  }
  // The operand is padded before an unbatched one is broadcast.
  const int64_t to = std::max<int64_t>(dx, 0);
  if (dx >= 0) cfg.insert(cfg.begin() + 3 * dx, {0, 0, 0});
  Array padded = bind1(Prim::pad, {x, scalar(0.0, x.dtype())}, with(p, "padding_config", cfg));
  padded = move_batch_axis(padded, dx, to, info.axis_size);
  const Ints& shape = padded.shape().dims();
  // (per-example shape) true where the operand landed
  Array inside = bind1(Prim::pad, {lax::broadcast_in_dim(scalar(true), a.shape.dims(), {}), scalar(false)}, p);
  Ints kept = range(0, int64_t(shape.size()) - 1);
  for (int64_t& k : kept) k = past_batch(k, to);
  inside = lax::broadcast_in_dim(inside, shape, kept);
  Array fill = lax::broadcast_in_dim(values[1], shape, {to});
  return {{lax::select_n(inside, {fill, padded})}, {to}};
}

[[noreturn]] Batched iota_batch(Values, Bdims, const Params& p, const BatchInfo&) {
  PAX_FAIL("iota: has no operands, so no vmap level can batch it (shape ", ints_str(p.ints("shape")),
           "); reaching its batching rule means a level received an iota it does not own");
}

// ---------------------------------------------------------------------------
// dynamic_slice / dynamic_update_slice

// A start index (a scalar per example) as i64[n].
Array start_column(const Array& s, int64_t bdim, int64_t n) {
  return lax::broadcast_in_dim(lax::convert_element_type(s, DType::i64), {n}, bdim < 0 ? Ints{} : Ints{0});
}

// i64[n] columns side by side: the index matrix i64[n, k] of gather / scatter.
Array index_matrix(const std::vector<Array>& cols) {
  std::vector<Array> parts;
  for (const Array& c : cols) parts.push_back(lax::broadcast_in_dim(c, {c.dim(0), 1}, {0}));
  return lax::concatenate(parts, 1);
}

Batched dynamic_slice_batch(Values values, Bdims bdims, const Params& p, const BatchInfo& info) {
  const int64_t n = info.axis_size;
  const int64_t dx = bdims[0];
  Ints sizes = p.ints("slice_sizes");
  const int64_t rank = int64_t(sizes.size());
  if (std::all_of(bdims.begin() + 1, bdims.end(), [](int64_t d) { return d < 0; })) {
    std::vector<Array> starts(values.begin() + 1, values.end());
    starts.insert(starts.begin() + dx, scalar(int32_t(0)));
    sizes.insert(sizes.begin() + dx, n);
    return {{lax::dynamic_slice(values[0], starts, sizes)}, {dx}};
  }
  // One window per example; gather clamps the starts as dynamic_slice does.
  // A batched operand is indexed by the example number as well.
  std::vector<Array> cols;
  if (dx >= 0) cols.push_back(lax::iota(DType::i64, {n}, 0));
  for (size_t i = 1; i < values.size(); ++i) cols.push_back(start_column(values[i], bdims[i], n));
  lax::GatherDimensionNumbers dims{range(1, rank + 1), {}, range(0, rank)};
  if (dx >= 0) {
    dims = {range(1, rank + 1), {0}, range(0, rank + 1)};
    sizes.insert(sizes.begin(), 1);
  }
  Array operand = dx >= 0 ? move_batch_axis(values[0], dx, 0, n) : values[0];
  return {{lax::gather(operand, index_matrix(cols), dims, sizes)}, {0}};
}

// dynamic_update_slice with batched starts: the update is scatter-added into
// a neutral array (-0.0 + u == u bit for bit, so floats come through exactly)
// and selected over the operand where the windows land. The starts are
// clamped first, as dynamic_update_slice does, since scatter_add drops
// windows that stick out.
Batched dus_batched_starts(Values values, Bdims bdims, const BatchInfo& info) {
  const int64_t n = info.axis_size;
  Array operand = move_batch_axis(values[0], bdims[0], 0, n);
  Array update = move_batch_axis(values[1], bdims[1], 0, n);
  const int64_t rank = operand.ndim() - 1;
  auto filled = [](double v, DType t, const Ints& s) { return lax::broadcast_in_dim(scalar(v, t), s, {}); };
  std::vector<Array> cols{lax::iota(DType::i64, {n}, 0)};
  for (int64_t k = 0; k < rank; ++k) {
    const size_t i = size_t(k) + 2;
    const int64_t hi = operand.dim(k + 1) - update.dim(k + 1);
    Array s = lax::min(start_column(values[i], bdims[i], n), filled(double(hi), DType::i64, {n}));
    cols.push_back(lax::max(s, filled(0, DType::i64, {n})));
  }
  const Array indices = index_matrix(cols);
  const lax::ScatterDimensionNumbers dims{range(1, rank + 1), {0}, range(0, rank + 1)};
  const DType dtype = operand.dtype();
  const DType work = dtype == DType::bool_ ? DType::u8 : dtype;
  const Ints& shape = operand.shape().dims();
  Array placed = lax::scatter_add(filled(is_floating(work) ? -0.0 : 0.0, work, shape), indices,
                                  lax::convert_element_type(update, work), dims);
  placed = lax::convert_element_type(placed, dtype);
  Array covered =
      lax::scatter_add(filled(0, DType::u8, shape), indices, filled(1, DType::u8, update.shape().dims()), dims);
  covered = lax::ne(covered, filled(0, DType::u8, shape));
  return {{lax::select_n(covered, {operand, placed})}, {0}};
}

Batched dynamic_update_slice_batch(Values values, Bdims bdims, const Params& p, const BatchInfo& info) {
  Bdims start_bdims = bdims.subspan(2);
  if (std::any_of(start_bdims.begin(), start_bdims.end(), [](int64_t d) { return d >= 0; })) {
    return dus_batched_starts(values, bdims, info);
  }
  const int64_t to = common_bdim(bdims.first(2));
  Array operand = move_batch_axis(values[0], bdims[0], to, info.axis_size);
  Array update = move_batch_axis(values[1], bdims[1], to, info.axis_size);
  std::vector<Array> starts(values.begin() + 2, values.end());
  starts.insert(starts.begin() + to, scalar(int32_t(0)));
  return {{lax::dynamic_update_slice(operand, update, starts)}, {to}};
}

}  // namespace

void register_shape_batching(PrimTable& t) {
  t[size_t(Prim::reshape)].batch = reshape_batch;
  t[size_t(Prim::transpose)].batch = transpose_batch;
  t[size_t(Prim::broadcast_in_dim)].batch = broadcast_in_dim_batch;
  t[size_t(Prim::squeeze)].batch = squeeze_batch;
  t[size_t(Prim::expand_dims)].batch = expand_dims_batch;
  t[size_t(Prim::rev)].batch = rev_batch;
  t[size_t(Prim::slice)].batch = slice_batch;
  t[size_t(Prim::concatenate)].batch = concatenate_batch;
  t[size_t(Prim::pad)].batch = pad_batch;
  t[size_t(Prim::iota)].batch = iota_batch;
  t[size_t(Prim::dynamic_slice)].batch = dynamic_slice_batch;
  t[size_t(Prim::dynamic_update_slice)].batch = dynamic_update_slice_batch;
}

}  // namespace pax
