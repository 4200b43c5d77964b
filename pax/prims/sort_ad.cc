// VJP and JVP rules of sort and top_k. Each output is a permutation (sort) or
// a selection (top_k) of its input along one axis, so the rules move tangents
// and cotangents with the same permutation or selection, never through the
// values: the JVP applies it to the tangent, the VJP applies its inverse (or
// scatters back) to the cotangent. Index outputs have no tangent.
#include <limits>

#include "pax/prims/ad_util.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

// ---------------------------------------------------------------------------
// sort

DType index_dtype(int64_t n) { return n <= std::numeric_limits<int32_t>::max() ? DType::i32 : DType::i64; }

// Sorting the tangents as extra non-key operands moves them exactly as the
// primal operands moved (the sort is stable and the keys are the same), which
// is take_along_axis of each tangent with the sorting permutation.
std::vector<Array> sort_jvp(std::span<const Array> in, std::span<const Array> t, std::span<const Array>,
                            const Params& p) {
  const int64_t dim = p.i("dimension"), num_keys = p.i("num_keys");
  std::vector<Array> operands(in.begin(), in.begin() + num_keys);
  std::vector<size_t> moved;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!t[i].defined() || !is_floating(in[i].dtype())) continue;
    moved.push_back(i);
    operands.push_back(t[i]);
  }
  std::vector<Array> out(in.size());
  if (moved.empty()) return out;
  std::vector<Array> sorted = lax::sort(operands, dim, true, num_keys);
  for (size_t j = 0; j < moved.size(); ++j) out[moved[j]] = sorted[size_t(num_keys) + j];
  return out;
}

// The output position j holds input position perm[j]; sorting the cotangents
// by perm sends each back to perm[j], the inverse permutation.
std::vector<Array> sort_vjp(std::span<const Array> in, std::span<const Array>, std::span<const Array> ct,
                            const Params& p, const CotangentMask& needs) {
  const int64_t dim = p.i("dimension"), num_keys = p.i("num_keys");
  std::vector<Array> out(in.size());
  std::vector<Array> operands{Array()};
  std::vector<size_t> moved;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!ct[i].defined() || !is_floating(in[i].dtype())) continue;
    moved.push_back(i);
    operands.push_back(ct[i]);
  }
  if (moved.empty()) return out;
  std::vector<Array> keys(in.begin(), in.begin() + num_keys);
  keys.push_back(lax::iota(index_dtype(in[0].dim(dim)), in[0].shape().dims(), dim));
  operands[0] = lax::sort(keys, dim, true, num_keys).back();
  std::vector<Array> restored = lax::sort(operands, dim, true, 1);
  for (size_t j = 0; j < moved.size(); ++j) out[moved[j]] = restored[1 + j];
  return out;
}

// ---------------------------------------------------------------------------
// top_k

// top_k's indices address the last axis; with the leading axes flattened to
// rows, (row, index) pairs address x viewed as (rows, n).
struct RowSelection {
  Ints flat_shape;  // (rows, n)
  Array pairs;      // (rows, k, 2)
};

RowSelection row_selection(const Array& x, const Array& indices) {
  const int64_t n = x.dim(x.ndim() - 1), k = indices.dim(indices.ndim() - 1);
  int64_t rows = 1;
  for (int64_t d = 0; d + 1 < x.ndim(); ++d) rows *= x.dim(d);
  const DType dtype = index_dtype(rows);
  Array cols = lax::reshape(indices, {rows, k});
  if (cols.dtype() != dtype) cols = lax::convert_element_type(cols, dtype);
  Array row_ids = lax::iota(dtype, {rows, k}, 0);
  Array pairs = lax::concatenate({lax::expand_dims(row_ids, {2}), lax::expand_dims(cols, {2})}, 2);
  return {{rows, n}, pairs};
}

std::vector<Array> top_k_jvp(std::span<const Array> in, std::span<const Array> t, std::span<const Array> out,
                             const Params&) {
  if (!t[0].defined()) return {Array(), Array()};
  const RowSelection s = row_selection(in[0], out[1]);
  lax::GatherDimensionNumbers dn{{}, {0, 1}, {0, 1}};
  Array picked = lax::gather(lax::reshape(t[0], s.flat_shape), s.pairs, dn, {1, 1});
  return {lax::reshape(picked, out[0].shape().dims()), Array()};
}

std::vector<Array> top_k_vjp(std::span<const Array> in, std::span<const Array> out, std::span<const Array> ct,
                             const Params&, const CotangentMask& needs) {
  if (!ct[0].defined()) return {Array()};
  const RowSelection s = row_selection(in[0], out[1]);
  lax::ScatterDimensionNumbers dn{{}, {0, 1}, {0, 1}};
  const int64_t k = out[1].dim(out[1].ndim() - 1);
  Array zeros = lax::broadcast_in_dim(scalar(0.0, ct[0].dtype()), s.flat_shape, {});
  Array scattered = lax::scatter_add(zeros, s.pairs, lax::reshape(ct[0], {s.flat_shape[0], k}), dn);
  return {lax::reshape(scattered, in[0].shape().dims())};
}

}  // namespace

void register_sort_ad(PrimTable& t) {
  set_ad_rules(t, Prim::sort, sort_vjp, sort_jvp);
  set_ad_rules(t, Prim::top_k, top_k_vjp, top_k_jvp);
}

}  // namespace pax
