// Batching rule of conv_general_dilated (as jax.lax's
// _conv_general_dilated_batch_rule): the batch axis is folded, as the major
// part, into one axis of the unbatched convolution by a reshape, and split
// out of the output again.
//   lhs only:  into the lhs batch axis (with batch groups, into each group's
//              part of it, so that the groups stay outermost);
//   rhs only:  into the output-feature axis of the kernel (with feature or
//              batch groups, into each group's part of it);
//   both:      into the lhs feature axis and the kernel's output features,
//              with feature_group_count multiplied by the batch size (each
//              member is a separate group); with batch groups, into the lhs
//              batch axis with batch_group_count multiplied instead.
#include "pax/interp/interpreter.h"
#include "pax/interp/vmap.h"
#include "pax/ops/lax.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

// Moves axis `src` of x to position `dst` (numbered without src) and merges
// it, as the major part, with the axis that follows it there.
Array fold_into(const Array& x, int64_t src, int64_t dst) {
  Array y = move_batch_axis(x, src, dst, 0);
  Ints shape = y.shape().dims();
  shape[size_t(dst)] *= shape[size_t(dst) + 1];
  shape.erase(shape.begin() + dst + 1);
  return lax::reshape(y, shape);
}

// Splits `axis` of x into (major, minor).
Array split_axis(const Array& x, int64_t axis, int64_t major, int64_t minor) {
  Ints shape = x.shape().dims();
  shape[size_t(axis)] = minor;
  shape.insert(shape.begin() + axis, major);
  return lax::reshape(x, shape);
}

// Folds the batch axis `bdim` of x into the minor part of axis `axis`
// (unbatched numbering) split as (groups, size / groups): groups stay major.
Array fold_into_groups(const Array& x, int64_t bdim, int64_t axis, int64_t groups) {
  const int64_t size = x.dim(axis + (bdim <= axis ? 1 : 0));
  Array y = split_axis(x, axis + (bdim <= axis ? 1 : 0), groups, size / groups);
  y = fold_into(y, bdim + (axis < bdim ? 1 : 0), axis + 1);
  return fold_into(y, axis, axis);
}

Batched conv_batch(std::span<const Array> values, std::span<const int64_t> bdims, const Params& p,
                   const BatchInfo& info) {
  const AVal& out = info.out_avals[0];
  const int64_t size = info.axis_size;
  const Ints lhs_spec = p.ints("lhs_spec"), rhs_spec = p.ints("rhs_spec"), out_spec = p.ints("out_spec");
  const int64_t fgc = p.i("feature_group_count"), bgc = p.i("batch_group_count");
  const int64_t lb = bdims[0], rb = bdims[1];
  const int64_t out_n = out.shape[out_spec[0]], out_c = out.shape[out_spec[1]];
  // The batch goes into the output's batch axis when only lhs is batched,
  // into its features otherwise.
  const int64_t out_bdim = lb >= 0 && rb < 0 ? out_spec[0] : out_spec[1];
  if (size == 0) {
    // Zero groups are not a convolution; the result is empty anyway.
    Ints shape = out.shape.dims();
    shape.insert(shape.begin() + out_bdim, 0);
    return {{lax::broadcast_in_dim(scalar(0.0, out.dtype), shape, {})}, {out_bdim}};
  }
  Params q = p;
  auto conv = [&](const Array& lhs, const Array& rhs) { return bind1(Prim::conv_general_dilated, {lhs, rhs}, q); };
  if (lb >= 0 && rb >= 0) {
    Array lhs = values[0];
    if (bgc > 1) {
      lhs = fold_into(lhs, lb, lhs_spec[0]);
      q.set("batch_group_count", bgc * size);
    } else {
      lhs = fold_into(lhs, lb, lhs_spec[1]);
      q.set("feature_group_count", fgc * size);
    }
    Array y = conv(lhs, fold_into(values[1], rb, rhs_spec[0]));
    return {{split_axis(y, out_bdim, size, out_c)}, {out_bdim}};
  }
  if (lb >= 0) {
    Array lhs = bgc > 1 ? fold_into_groups(values[0], lb, lhs_spec[0], bgc) : fold_into(values[0], lb, lhs_spec[0]);
    return {{split_axis(conv(lhs, values[1]), out_bdim, size, out_n)}, {out_bdim}};
  }
  if (fgc == 1 && bgc == 1) {
    Array y = conv(values[0], fold_into(values[1], rb, rhs_spec[0]));
    return {{split_axis(y, out_bdim, size, out_c)}, {out_bdim}};
  }
  // Grouped kernel: output features come out as (groups, batch, features /
  // groups) and are reordered to (batch, groups, features / groups).
  const int64_t groups = fgc > 1 ? fgc : bgc;
  Array y = conv(values[0], fold_into_groups(values[1], rb, rhs_spec[0], groups));
  y = split_axis(y, out_bdim, groups, size * (out_c / groups));
  y = split_axis(y, out_bdim + 1, size, out_c / groups);
  return {{fold_into(y, out_bdim, out_bdim + 1)}, {out_bdim}};
}

}  // namespace

void register_conv_batching(PrimTable& t) { t[size_t(Prim::conv_general_dilated)].batch = conv_batch; }

}  // namespace pax
