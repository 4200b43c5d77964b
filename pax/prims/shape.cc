// Shape primitives: reshape, squeeze, expand_dims (buffer-sharing), transpose,
// broadcast_in_dim, rev, slice, dynamic_slice, dynamic_update_slice,
// concatenate, pad and iota: shape/dtype rules. The CPU kernels are the
// backend's (kernels_shape.cc).
#include <algorithm>

#include "pax/core/error.h"
#include "pax/prims/registry.h"
#include "pax/prims/shape_params.h"

namespace pax {
namespace {

// ---------------------------------------------------------------------------
// reshape / squeeze / expand_dims: same bytes, new shape.

std::vector<AVal> reshape_rule(std::span<const AVal> in, const Params& p) {
  const Ints& sizes = p.ints("new_sizes");
  for (int64_t s : sizes) {
    PAX_CHECK(s >= 0, "reshape: new_sizes ", ints_str(sizes), " has a negative size (resolve -1 before the primitive)");
  }
  Shape out(sizes);
  PAX_CHECK(out.numel() == in[0].shape.numel(), "reshape: cannot reshape ", in[0].str(), " (", in[0].shape.numel(),
            " elements) into shape ", out, " (", out.numel(), " elements)");
  return {AVal{out, in[0].dtype, in[0].weak_type}};
}

std::vector<AVal> squeeze_rule(std::span<const AVal> in, const Params& p) {
  const Shape& s = in[0].shape;
  Ints dims = normalize_axes(p.ints("dimensions"), s.rank(), "squeeze");
  std::vector<int64_t> out;
  for (int64_t d = 0; d < s.rank(); ++d) {
    if (std::find(dims.begin(), dims.end(), d) != dims.end()) {
      PAX_CHECK(s[d] == 1, "squeeze: dimension ", d, " of ", in[0].str(), " has size ", s[d],
                "; only size-1 dimensions can be squeezed");
    } else {
      out.push_back(s[d]);
    }
  }
  return {AVal{Shape(out), in[0].dtype, in[0].weak_type}};
}

std::vector<AVal> expand_dims_rule(std::span<const AVal> in, const Params& p) {
  const Shape& s = in[0].shape;
  const int64_t out_rank = s.rank() + int64_t(p.ints("dimensions").size());
  Ints dims = normalize_axes(p.ints("dimensions"), out_rank, "expand_dims");
  std::vector<int64_t> out;
  int64_t k = 0;
  for (int64_t d = 0; d < out_rank; ++d) {
    if (std::find(dims.begin(), dims.end(), d) != dims.end()) out.push_back(1);
    else out.push_back(s[k++]);
  }
  return {AVal{Shape(out), in[0].dtype, in[0].weak_type}};
}

// ---------------------------------------------------------------------------
// transpose

std::vector<AVal> transpose_rule(std::span<const AVal> in, const Params& p) {
  const Shape& s = in[0].shape;
  const Ints& perm = p.ints("permutation");
  Ints sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  bool ok = int64_t(perm.size()) == s.rank();
  for (size_t i = 0; ok && i < sorted.size(); ++i) ok = sorted[i] == int64_t(i);
  PAX_CHECK(ok, "transpose: permutation ", ints_str(perm), " is not a permutation of the ", s.rank(), " axes of ",
            in[0].str());
  std::vector<int64_t> out;
  for (int64_t a : perm) out.push_back(s[a]);
  return {AVal{Shape(out), in[0].dtype, in[0].weak_type}};
}

// ---------------------------------------------------------------------------
// broadcast_in_dim

std::vector<AVal> broadcast_in_dim_rule(std::span<const AVal> in, const Params& p) {
  const Shape& s = in[0].shape;
  Shape out(p.ints("shape"));
  const Ints& bdims = p.ints("broadcast_dimensions");
  PAX_CHECK(int64_t(bdims.size()) == s.rank(), "broadcast_in_dim: operand ", in[0].str(), " has rank ", s.rank(),
            " but broadcast_dimensions ", ints_str(bdims), " has ", bdims.size(), " entries");
  for (size_t i = 0; i < bdims.size(); ++i) {
    PAX_CHECK(bdims[i] >= 0 && bdims[i] < out.rank(), "broadcast_in_dim: broadcast_dimensions ", ints_str(bdims),
              " out of range for target shape ", out);
    PAX_CHECK(i == 0 || bdims[i] > bdims[i - 1], "broadcast_in_dim: broadcast_dimensions ", ints_str(bdims),
              " must be strictly increasing");
    PAX_CHECK(s[int64_t(i)] == 1 || s[int64_t(i)] == out[bdims[i]], "broadcast_in_dim: cannot broadcast ", in[0].str(),
              " to shape ", out, ": operand dimension ", i, " has size ", s[int64_t(i)], " but target dimension ",
              bdims[i], " has size ", out[bdims[i]], " (must be equal or 1)");
  }
  for (int64_t d : out) PAX_CHECK(d >= 0, "broadcast_in_dim: negative dimension in target shape ", out);
  return {AVal{out, in[0].dtype, in[0].weak_type}};
}

// ---------------------------------------------------------------------------
// rev

std::vector<AVal> rev_rule(std::span<const AVal> in, const Params& p) {
  normalize_axes(p.ints("dimensions"), in[0].shape.rank(), "rev");
  return {in[0]};
}

// ---------------------------------------------------------------------------
// slice

std::vector<AVal> slice_rule(std::span<const AVal> in, const Params& p) {
  const Shape& s = in[0].shape;
  const Ints& start = p.ints("start_indices");
  const Ints& limit = p.ints("limit_indices");
  Ints strides = slice_strides(p, size_t(s.rank()));
  PAX_CHECK(
      int64_t(start.size()) == s.rank() && int64_t(limit.size()) == s.rank() && int64_t(strides.size()) == s.rank(),
      "slice: start_indices ", ints_str(start), ", limit_indices ", ints_str(limit), " and strides ", ints_str(strides),
      " must each have one entry per dimension of ", in[0].str());
  std::vector<int64_t> out;
  for (int64_t d = 0; d < s.rank(); ++d) {
    const size_t i = size_t(d);
    PAX_CHECK(0 <= start[i] && start[i] <= limit[i] && limit[i] <= s[d], "slice: dimension ", d, " of ", in[0].str(),
              ": need 0 <= start <= limit <= ", s[d], ", got start ", start[i], ", limit ", limit[i]);
    PAX_CHECK(strides[i] >= 1, "slice: strides must be positive, got ", ints_str(strides));
    out.push_back((limit[i] - start[i] + strides[i] - 1) / strides[i]);
  }
  return {AVal{Shape(out), in[0].dtype, in[0].weak_type}};
}

// ---------------------------------------------------------------------------
// dynamic_slice / dynamic_update_slice. Start indices are clamped so that the
// slice lies inside the operand, as in XLA.

void check_start_indices(const char* op, std::span<const AVal> starts, const AVal& operand) {
  PAX_CHECK(int64_t(starts.size()) == operand.shape.rank(), op, ": needs ", operand.shape.rank(),
            " scalar start indices for operand ", operand.str(), ", got ", starts.size());
  for (const AVal& a : starts) {
    PAX_CHECK(a.shape.rank() == 0 && is_integer(a.dtype), op, ": start indices must be integer scalars, got ", a.str());
  }
}

std::vector<AVal> dynamic_slice_rule(std::span<const AVal> in, const Params& p) {
  PAX_CHECK(!in.empty(), "dynamic_slice: needs an operand");
  const AVal& x = in[0];
  check_start_indices("dynamic_slice", in.subspan(1), x);
  const Ints& sizes = p.ints("slice_sizes");
  PAX_CHECK(int64_t(sizes.size()) == x.shape.rank(), "dynamic_slice: slice_sizes ", ints_str(sizes),
            " needs one entry per dimension of ", x.str());
  for (int64_t d = 0; d < x.shape.rank(); ++d) {
    PAX_CHECK(sizes[size_t(d)] >= 0 && sizes[size_t(d)] <= x.shape[d], "dynamic_slice: slice_sizes ", ints_str(sizes),
              " exceed operand ", x.str(), " in dimension ", d);
  }
  return {AVal{Shape(sizes), x.dtype, x.weak_type}};
}

std::vector<AVal> dynamic_update_slice_rule(std::span<const AVal> in, const Params&) {
  PAX_CHECK(in.size() >= 2, "dynamic_update_slice: needs an operand and an update");
  const AVal& x = in[0];
  const AVal& u = in[1];
  check_start_indices("dynamic_update_slice", in.subspan(2), x);
  PAX_CHECK(u.dtype == x.dtype && u.shape.rank() == x.shape.rank(), "dynamic_update_slice: update ", u.str(),
            " must have the dtype and rank of operand ", x.str());
  for (int64_t d = 0; d < x.shape.rank(); ++d) {
    PAX_CHECK(u.shape[d] <= x.shape[d], "dynamic_update_slice: update ", u.str(), " is larger than operand ", x.str(),
              " in dimension ", d);
  }
  return {x};
}

// ---------------------------------------------------------------------------
// concatenate

std::vector<AVal> concatenate_rule(std::span<const AVal> in, const Params& p) {
  PAX_CHECK(!in.empty(), "concatenate: needs at least one operand");
  const AVal& first = in[0];
  const int64_t dim = p.i("dimension");
  PAX_CHECK(first.shape.rank() > 0, "concatenate: operands must have rank >= 1, got ", first.str());
  PAX_CHECK(dim >= 0 && dim < first.shape.rank(), "concatenate: dimension ", dim, " is out of range for ", first.str());
  Shape out = first.shape;
  bool weak = first.weak_type;
  for (size_t i = 1; i < in.size(); ++i) {
    const AVal& a = in[i];
    PAX_CHECK(a.dtype == first.dtype, "concatenate: operand ", i, " is ", a.str(), " but operand 0 is ", first.str(),
              "; dtypes must match");
    PAX_CHECK(a.shape.rank() == first.shape.rank(), "concatenate: operand ", i, " is ", a.str(), " but operand 0 is ",
              first.str(), "; ranks must match");
    for (int64_t d = 0; d < out.rank(); ++d) {
      PAX_CHECK(d == dim || a.shape[d] == first.shape[d], "concatenate: operand ", i, " is ", a.str(),
                " but operand 0 is ", first.str(), "; shapes may differ only in dimension ", dim);
    }
    out[dim] += a.shape[dim];
    weak = weak && a.weak_type;
  }
  return {AVal{out, first.dtype, weak}};
}

// ---------------------------------------------------------------------------
// pad: padding_config is [lo, hi, interior] per dimension, flattened. lo / hi
// may be negative (cropping); interior must be >= 0.

std::vector<AVal> pad_rule(std::span<const AVal> in, const Params& p) {
  const AVal& x = in[0];
  const AVal& v = in[1];
  const Ints& cfg = p.ints("padding_config");
  PAX_CHECK(v.shape.rank() == 0 && v.dtype == x.dtype, "pad: padding value must be a scalar of the operand dtype ",
            dtype_name(x.dtype), ", got ", v.str());
  PAX_CHECK(int64_t(cfg.size()) == 3 * x.shape.rank(), "pad: padding_config ", ints_str(cfg),
            " needs (lo, hi, interior) for each of the ", x.shape.rank(), " dimensions of ", x.str());
  std::vector<int64_t> out;
  for (int64_t d = 0; d < x.shape.rank(); ++d) {
    const int64_t lo = cfg[size_t(3 * d)], hi = cfg[size_t(3 * d + 1)], interior = cfg[size_t(3 * d + 2)];
    PAX_CHECK(interior >= 0, "pad: interior padding must be >= 0, got ", interior, " in dimension ", d);
    const int64_t n = x.shape[d];
    const int64_t size = lo + hi + n + std::max<int64_t>(n - 1, 0) * interior;
    PAX_CHECK(size >= 0, "pad: dimension ", d, " of ", x.str(), " would have negative size ", size, " with lo=", lo,
              ", hi=", hi, ", interior=", interior);
    out.push_back(size);
  }
  return {AVal{Shape(out), x.dtype, x.weak_type}};
}

// ---------------------------------------------------------------------------
// iota: out[..., i, ...] = i along `dimension`.

std::vector<AVal> iota_rule(std::span<const AVal>, const Params& p) {
  Shape s(p.ints("shape"));
  const DType dt = p.dtype("dtype");
  const int64_t dim = p.i("dimension");
  PAX_CHECK(dim >= 0 && dim < s.rank(), "iota: dimension ", dim, " is out of range for shape ", s);
  PAX_CHECK(dt != DType::bool_, "iota: dtype must be numeric, got bool");
  for (int64_t d : s) PAX_CHECK(d >= 0, "iota: negative dimension in shape ", s);
  return {AVal{s, dt, false}};
}

}  // namespace

void register_shape_prims(PrimTable& t) {
  t[size_t(Prim::reshape)] = PrimDef{.shape_rule = reshape_rule, .output_aliases_input = 0};
  t[size_t(Prim::squeeze)] = PrimDef{.shape_rule = squeeze_rule, .output_aliases_input = 0};
  t[size_t(Prim::expand_dims)] = PrimDef{.shape_rule = expand_dims_rule, .output_aliases_input = 0};
  t[size_t(Prim::transpose)] = PrimDef{transpose_rule};
  t[size_t(Prim::broadcast_in_dim)] = PrimDef{broadcast_in_dim_rule};
  t[size_t(Prim::rev)] = PrimDef{rev_rule};
  t[size_t(Prim::slice)] = PrimDef{slice_rule};
  t[size_t(Prim::dynamic_slice)] = PrimDef{dynamic_slice_rule};
  t[size_t(Prim::dynamic_update_slice)] = PrimDef{dynamic_update_slice_rule};
  t[size_t(Prim::concatenate)] = PrimDef{concatenate_rule};
  t[size_t(Prim::pad)] = PrimDef{pad_rule};
  t[size_t(Prim::iota)] = PrimDef{iota_rule};
}

}  // namespace pax
