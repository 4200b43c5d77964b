// numpy-level shape manipulation, indexing (take / take_along_axis) and sorting.
#include <algorithm>
#include <numeric>

#include "pax/core/error.h"
#include "pax/ops/numpy.h"

namespace pax {

Array reshape(const Array& x, const Ints& shape) {
  Ints out = shape;
  int64_t unknown = -1, known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      PAX_CHECK(unknown < 0, "reshape: only one dimension may be -1, got ", ints_str(shape));
      unknown = int64_t(i);
    } else {
      PAX_CHECK(out[i] >= 0, "reshape: invalid dimension ", out[i], " in ", ints_str(shape));
      known *= out[i];
    }
  }
  if (unknown >= 0) {
    PAX_CHECK(known != 0 && x.size() % known == 0, "reshape: cannot reshape ", x.aval().str(), " (", x.size(),
              " elements) into ", ints_str(shape));
    out[size_t(unknown)] = x.size() / known;
  }
  PAX_CHECK(Shape(out).numel() == x.size(), "reshape: cannot reshape ", x.aval().str(), " (", x.size(),
            " elements) into shape ", ints_str(shape), " (", Shape(out).numel(), " elements)");
  return lax::reshape(x, out);
}

Array ravel(const Array& x) { return lax::reshape(x, {x.size()}); }

Array transpose(const Array& x, std::optional<Ints> axes) {
  Ints perm;
  if (axes) {
    PAX_CHECK(int64_t(axes->size()) == x.ndim(), "transpose: axes ", ints_str(*axes), " must list all ", x.ndim(),
              " axes of ", x.aval().str());
    perm = normalize_axes(*axes, x.ndim(), "transpose");
  } else {
    for (int64_t i = x.ndim() - 1; i >= 0; --i) perm.push_back(i);
  }
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == int64_t(i);
  return identity ? x : lax::transpose(x, perm);
}

Array swapaxes(const Array& x, int64_t a, int64_t b) {
  a = normalize_axis(a, x.ndim(), "swapaxes");
  b = normalize_axis(b, x.ndim(), "swapaxes");
  Ints perm(size_t(x.ndim()));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[size_t(a)], perm[size_t(b)]);
  return transpose(x, perm);
}

Array moveaxis(const Array& x, int64_t source, int64_t destination) {
  source = normalize_axis(source, x.ndim(), "moveaxis");
  destination = normalize_axis(destination, x.ndim(), "moveaxis");
  Ints perm;
  for (int64_t i = 0; i < x.ndim(); ++i) {
    if (i != source) perm.push_back(i);
  }
  perm.insert(perm.begin() + destination, source);
  return transpose(x, perm);
}

Array expand_dims(const Array& x, const Ints& axes) {
  const int64_t out_rank = x.ndim() + int64_t(axes.size());
  return lax::expand_dims(x, normalize_axes(axes, out_rank, "expand_dims"));
}

Array squeeze(const Array& x, const Axes& axes) {
  Ints dims;
  if (!axes.axes) {
    for (int64_t i = 0; i < x.ndim(); ++i) {
      if (x.dim(i) == 1) dims.push_back(i);
    }
  } else {
    dims = axes.resolve(x.ndim(), "squeeze");
  }
  return dims.empty() ? x : lax::squeeze(x, dims);
}

Array concatenate(const std::vector<Array>& arrays, int64_t axis) {
  PAX_CHECK(!arrays.empty(), "concatenate: needs at least one array");
  PAX_CHECK(arrays[0].ndim() > 0, "concatenate: zero-dimensional arrays cannot be concatenated");
  std::vector<ArrayLike> like(arrays.begin(), arrays.end());
  const DType dtype = result_type(like);
  const int64_t a = normalize_axis(axis, arrays[0].ndim(), "concatenate");
  std::vector<Array> converted;
  for (const Array& x : arrays) converted.push_back(x.dtype() == dtype ? x : x.astype(dtype));
  return lax::concatenate(converted, a);
}

Array stack(const std::vector<Array>& arrays, int64_t axis) {
  PAX_CHECK(!arrays.empty(), "stack: needs at least one array");
  const int64_t a = normalize_axis(axis, arrays[0].ndim() + 1, "stack");
  std::vector<Array> expanded;
  for (const Array& x : arrays) {
    PAX_CHECK(x.shape() == arrays[0].shape(), "stack: all arrays must have the same shape, got ", x.aval().str(),
              " and ", arrays[0].aval().str());
    expanded.push_back(lax::expand_dims(x, {a}));
  }
  return concatenate(expanded, a);
}

std::vector<Array> split(const Array& x, const Ints& indices, int64_t axis) {
  const int64_t a = normalize_axis(axis, x.ndim(), "split");
  const int64_t n = x.dim(a);
  std::vector<Array> out;
  int64_t start = 0;
  Ints bounds = indices;
  bounds.push_back(n);
  for (int64_t stop : bounds) {
    int64_t s = std::clamp<int64_t>(start, 0, n), e = std::clamp<int64_t>(stop, 0, n);
    e = std::max(e, s);
    out.push_back(slice_along(x, a, s, e));
    start = stop;
  }
  return out;
}

std::vector<Array> split(const Array& x, int64_t sections, int64_t axis) {
  const int64_t a = normalize_axis(axis, x.ndim(), "split");
  PAX_CHECK(sections > 0 && x.dim(a) % sections == 0, "split: axis ", a, " of ", x.aval().str(), " (size ", x.dim(a),
            ") does not divide into ", sections, " equal sections");
  Ints indices;
  const int64_t step = x.dim(a) / sections;
  for (int64_t i = 1; i < sections; ++i) indices.push_back(i * step);
  return split(x, indices, a);
}

Array flip(const Array& x, const Axes& axes) { return lax::rev(x, axes.resolve(x.ndim(), "flip")); }

Array slice_along(const Array& x, int64_t axis, int64_t start, std::optional<int64_t> stop, int64_t step) {
  const int64_t a = normalize_axis(axis, x.ndim(), "slice_along");
  PAX_CHECK(step >= 1, "slice_along: step must be >= 1, got ", step, " (use flip for reversed slices)");
  const int64_t n = x.dim(a);
  auto wrap = [n](int64_t i) { return std::clamp<int64_t>(i < 0 ? i + n : i, 0, n); };
  const int64_t s = wrap(start);
  const int64_t e = std::max(s, stop ? wrap(*stop) : n);
  Ints lo(size_t(x.ndim()), 0), hi = x.shape().dims(), strides(size_t(x.ndim()), 1);
  lo[size_t(a)] = s;
  hi[size_t(a)] = e;
  strides[size_t(a)] = step;
  return lax::slice(x, lo, hi, strides);
}

Array pad(const Array& x, const std::vector<std::pair<int64_t, int64_t>>& pad_width, double value) {
  PAX_CHECK(int64_t(pad_width.size()) == x.ndim(), "pad: pad_width needs one (before, after) pair per axis of ",
            x.aval().str(), ", got ", pad_width.size());
  std::vector<lax::PadConfig> config;
  for (auto [lo, hi] : pad_width) {
    PAX_CHECK(lo >= 0 && hi >= 0, "pad: pad widths must be >= 0, got (", lo, ", ", hi, ")");
    config.push_back({lo, hi, 0});
  }
  return lax::pad(x, scalar(value, x.dtype()), config);
}

// ---------------------------------------------------------------------------
// indexing

namespace {
// Negative indices count from the end of an axis of size n.
Array wrap_negative(const Array& indices, int64_t n) {
  if (is_unsigned(indices.dtype())) return indices;
  Array zero = full(indices.shape(), 0, indices.dtype());
  return where(lax::lt(indices, zero), lax::add(indices, full(indices.shape(), double(n), indices.dtype())), indices);
}

void check_indices(const Array& indices, const char* op) {
  PAX_CHECK(is_integer(indices.dtype()), op, ": indices must have an integer dtype, got ", indices.aval().str());
}
}  // namespace

Array take(const Array& x, const Array& indices, std::optional<int64_t> axis) {
  check_indices(indices, "take");
  if (!axis) return take(ravel(x), indices, 0);
  const int64_t a = normalize_axis(*axis, x.ndim(), "take");
  const int64_t r = x.ndim(), k = indices.ndim();
  PAX_CHECK(x.dim(a) > 0 || indices.size() == 0, "take: cannot take from the empty axis ", a, " of ", x.aval().str());
  Array idx = lax::expand_dims(wrap_negative(indices, x.dim(a)), {k});  // [..., 1]
  lax::GatherDimensionNumbers dn;
  for (int64_t d = 0; d < a; ++d) dn.offset_dims.push_back(d);
  for (int64_t d = a + 1; d < r; ++d) dn.offset_dims.push_back(d - 1 + k);
  dn.collapsed_slice_dims = {a};
  dn.start_index_map = {a};
  Ints slice_sizes = x.shape().dims();
  slice_sizes[size_t(a)] = 1;
  return lax::gather(x, idx, dn, slice_sizes);
}

Array take_along_axis(const Array& x, const Array& indices, int64_t axis) {
  check_indices(indices, "take_along_axis");
  PAX_CHECK(indices.ndim() == x.ndim(), "take_along_axis: indices ", indices.aval().str(), " must have the rank of ",
            x.aval().str());
  const int64_t a = normalize_axis(axis, x.ndim(), "take_along_axis");
  // Indices broadcast against x on every other axis.
  Ints shape = indices.shape().dims();
  for (int64_t d = 0; d < x.ndim(); ++d) {
    if (d == a) continue;
    PAX_CHECK(indices.dim(d) == x.dim(d) || indices.dim(d) == 1, "take_along_axis: indices ", indices.aval().str(),
              " do not broadcast against ", x.aval().str(), " in axis ", d);
    shape[size_t(d)] = x.dim(d);
  }
  Array idx = broadcast_to(wrap_negative(indices, x.dim(a)).astype(DType::i32), Shape(shape));
  std::vector<Array> parts;
  for (int64_t d = 0; d < x.ndim(); ++d) {
    Array part = d == a ? idx : lax::iota(DType::i32, shape, d);
    parts.push_back(lax::expand_dims(part, {x.ndim()}));
  }
  Array full_idx = lax::concatenate(parts, x.ndim());  // shape + [rank]
  lax::GatherDimensionNumbers dn;
  for (int64_t d = 0; d < x.ndim(); ++d) {
    dn.collapsed_slice_dims.push_back(d);
    dn.start_index_map.push_back(d);
  }
  return lax::gather(x, full_idx, dn, Ints(size_t(x.ndim()), 1));
}

// ---------------------------------------------------------------------------
// sorting

Array sort(const Array& x, int64_t axis) {
  PAX_CHECK(x.ndim() > 0, "sort: needs an array of rank >= 1, got ", x.aval().str());
  return lax::sort({x}, normalize_axis(axis, x.ndim(), "sort"))[0];
}

Array argsort(const Array& x, int64_t axis, bool descending) {
  PAX_CHECK(x.ndim() > 0, "argsort: needs an array of rank >= 1, got ", x.aval().str());
  const int64_t a = normalize_axis(axis, x.ndim(), "argsort");
  Array iota = lax::iota(DType::i32, x.shape().dims(), a);
  if (!descending) return lax::sort({x, iota}, a, true, 1)[1];
  // Stable descending order: sort the reversed array, then map indices back.
  Array idx = lax::sort({lax::rev(x, {a}), iota}, a, true, 1)[1];
  Array last = full(x.shape(), double(x.dim(a) - 1), DType::i32);
  return lax::rev(lax::sub(last, idx), {a});
}

}  // namespace pax
