// MaxPool (one windowed max, lax::reduce_window_max) and AvgPool (window sums
// by reshapes or strided slices).
#include "pax/nn/poolings.h"

#include "pax/nn/convolutions.h"
#include "pax/ops/numpy.h"

namespace pax::nn {

namespace {

void check_hparams(const Layer& l, const PoolingHParams& hp) {
  const std::string who = std::string(l.type_name()) + " '" + l.path() + "'";
  auto check_pair = [&](const Ints& v, const char* name) {
    PAX_CHECK(v.size() == 2 && v[0] >= 1 && v[1] >= 1, who, ": ", name, " ", ints_str(v),
              " must be 2 positive integers");
  };
  check_pair(hp.window_shape, "window_shape");
  check_pair(hp.strides, "strides");
  spatial_padding(who, hp.padding, hp.explicit_padding, hp.window_shape, hp.window_shape, {1, 1}, {1, 1});
  // A window made only of padding would pool nothing (-inf, or 0 / 0).
  for (size_t i = 0; i < hp.explicit_padding.size(); ++i) {
    PAX_CHECK(hp.explicit_padding[i] < hp.window_shape[i / 2], who, ": explicit_padding ",
              ints_str(hp.explicit_padding), " must be smaller than window_shape ", ints_str(hp.window_shape),
              " on each side");
  }
}

// Sums the windows of k elements, stride s, along `axis` of x (already
// padded, so that every window lies inside it).
Array sum_windows(const Array& x, int64_t axis, int64_t k, int64_t s) {
  const int64_t n = x.dim(axis);
  const int64_t out = (n - k) / s + 1;
  if (k == 1 && s == 1) return x;
  if (k == s) {
    // Non-overlapping windows: one reshape and one reduction.
    Ints dims = x.shape().dims();
    dims[size_t(axis)] = out;
    dims.insert(dims.begin() + axis + 1, k);
    Array windows = reshape(out * k == n ? x : slice_along(x, axis, 0, out * k), dims);  // (..., out, k, ...)
    return sum(windows, axis + 1);
  }
  Array acc;
  for (int64_t i = 0; i < k; ++i) {
    Array part = slice_along(x, axis, i, i + (out - 1) * s + 1, s);  // (..., out, ...)
    acc = i == 0 ? part : acc + part;
  }
  return acc;
}

struct Pooled {
  Array value;                                    // (..., H', W', C)
  std::vector<std::pair<int64_t, int64_t>> pads;  // (lo, hi) per spatial axis
};

Pooled sum_pool(const Layer& l, const PoolingHParams& hp, const Array& x) {
  const std::string who = std::string(l.type_name()) + " '" + l.path() + "'";
  PAX_CHECK(x.ndim() >= 3, who, ": input ", x.aval().str(), " must be (..., H, W, C)");
  PAX_CHECK(is_floating(x.dtype()), who, ": input ", x.aval().str(), " must be floating");
  const int64_t r = x.ndim();
  auto pads = spatial_padding(who, hp.padding, hp.explicit_padding, {x.dim(r - 3), x.dim(r - 2)}, hp.window_shape,
                              hp.strides, {1, 1});
  Array xp = x;
  if (pads[0] != std::pair<int64_t, int64_t>{0, 0} || pads[1] != std::pair<int64_t, int64_t>{0, 0}) {
    std::vector<std::pair<int64_t, int64_t>> width(size_t(r), {0, 0});
    width[size_t(r - 3)] = pads[0];
    width[size_t(r - 2)] = pads[1];
    xp = pad(x, width, 0.0);
  }
  Array y = sum_windows(xp, r - 3, hp.window_shape[0], hp.strides[0]);
  return {sum_windows(y, r - 2, hp.window_shape[1], hp.strides[1]), pads};
}

// How many real (unpadded) elements each output window covers along one axis.
std::vector<double> window_counts(int64_t size, int64_t out, int64_t k, int64_t s, int64_t lo) {
  std::vector<double> counts(static_cast<size_t>(out));
  for (int64_t i = 0; i < out; ++i) {
    const int64_t begin = i * s - lo;
    counts[size_t(i)] = double(std::min(begin + k, size) - std::max<int64_t>(begin, 0));
  }
  return counts;
}

}  // namespace

void MaxPool::setup() { check_hparams(*this, hparams<HParams>()); }

// One windowed max over the spatial axes (its VJP routes each gradient to
// its window's first maximum, as jax.lax.reduce_window's and PyTorch's do).
Array MaxPool::fprop(const Array& x) const {
  const auto& hp = hparams<HParams>();
  const Array xf = to_fprop_dtype(x);
  const std::string who = std::string(type_name()) + " '" + path() + "'";
  PAX_CHECK(xf.ndim() >= 3, who, ": input ", xf.aval().str(), " must be (..., H, W, C)");
  PAX_CHECK(is_floating(xf.dtype()), who, ": input ", xf.aval().str(), " must be floating");
  const int64_t r = xf.ndim();
  const auto pads = spatial_padding(who, hp.padding, hp.explicit_padding, {xf.dim(r - 3), xf.dim(r - 2)},
                                    hp.window_shape, hp.strides, {1, 1});
  lax::Window w{Ints(size_t(r), 1), Ints(size_t(r), 1), Ints(size_t(2 * r), 0)};
  for (size_t i = 0; i < 2; ++i) {
    const size_t axis = size_t(r) - 3 + i;
    w.dimensions[axis] = hp.window_shape[i];
    w.strides[axis] = hp.strides[i];
    w.padding[2 * axis] = pads[i].first;
    w.padding[2 * axis + 1] = pads[i].second;
  }
  return lax::reduce_window_max(xf, w);
}

void AvgPool::setup() { check_hparams(*this, hparams<HParams>()); }

Array AvgPool::fprop(const Array& x) const {
  const auto& hp = hparams<HParams>();
  Array xf = to_fprop_dtype(x);
  const DType dtype = xf.dtype();
  if (is_floating(dtype) && itemsize(dtype) < 4) xf = xf.astype(DType::f32);
  Pooled p = sum_pool(*this, hp, xf);
  const int64_t kh = hp.window_shape[0], kw = hp.window_shape[1];
  const bool padded = p.pads[0] != std::pair<int64_t, int64_t>{0, 0} || p.pads[1] != std::pair<int64_t, int64_t>{0, 0};
  if (hp.count_include_pad || !padded) return (p.value / double(kh * kw)).astype(dtype);
  const int64_t r = xf.ndim(), oh = p.value.dim(r - 3), ow = p.value.dim(r - 2);
  std::vector<double> ch = window_counts(xf.dim(r - 3), oh, kh, hp.strides[0], p.pads[0].first);
  std::vector<double> cw = window_counts(xf.dim(r - 2), ow, kw, hp.strides[1], p.pads[1].first);
  std::vector<double> counts;
  counts.reserve(size_t(oh * ow));
  for (double a : ch) {
    for (double b : cw) counts.push_back(a * b);
  }
  Array c = array(counts, Shape{oh, ow, 1}).astype(xf.dtype());  // (H', W', 1)
  return (p.value / c).astype(dtype);
}

PAX_REGISTER_LAYER(MaxPool);
PAX_REGISTER_LAYER(AvgPool);

}  // namespace pax::nn
