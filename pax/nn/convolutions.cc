// Conv2D and the spatial padding rule shared with the pooling layers.
#include "pax/nn/convolutions.h"

#include "pax/ops/numpy.h"

namespace pax::nn {

std::vector<std::pair<int64_t, int64_t>> spatial_padding(const std::string& who, const std::string& padding,
                                                         const Ints& explicit_padding, const Ints& sizes,
                                                         const Ints& window, const Ints& strides,
                                                         const Ints& dilations) {
  const size_t n = sizes.size();
  std::vector<std::pair<int64_t, int64_t>> pads(n, {0, 0});
  if (padding == "EXPLICIT") {
    PAX_CHECK(explicit_padding.size() == 2 * n, who, ": explicit_padding ", ints_str(explicit_padding), " must have ",
              2 * n, " entries (lo, hi per spatial axis) with padding = EXPLICIT");
    for (size_t i = 0; i < n; ++i) {
      pads[i] = {explicit_padding[2 * i], explicit_padding[2 * i + 1]};
      PAX_CHECK(pads[i].first >= 0 && pads[i].second >= 0, who, ": explicit_padding ", ints_str(explicit_padding),
                " must be non-negative");
    }
  } else {
    PAX_CHECK(padding == "SAME" || padding == "VALID", who, ": padding '", padding,
              "' must be \"SAME\", \"VALID\" or \"EXPLICIT\"");
    PAX_CHECK(explicit_padding.empty(), who, ": explicit_padding ", ints_str(explicit_padding),
              " is only used with padding = EXPLICIT (got padding = ", padding, ")");
  }
  for (size_t i = 0; i < n; ++i) {
    const int64_t span = (window[i] - 1) * dilations[i] + 1;
    if (padding == "SAME") {
      const int64_t out = (sizes[i] + strides[i] - 1) / strides[i];
      const int64_t total = std::max<int64_t>(0, (out - 1) * strides[i] + span - sizes[i]);
      pads[i] = {total / 2, total - total / 2};
    }
    const int64_t padded = sizes[i] + pads[i].first + pads[i].second;
    PAX_CHECK(padded >= span, who, ": spatial size ", sizes[i], " (axis ", i, ", padded to ", padded,
              ") is smaller than the ", dilations[i] > 1 ? "dilated " : "", "window of size ", span,
              "; use a larger input, smaller window or more padding");
  }
  return pads;
}

void Conv2D::setup() {
  const auto& hp = hparams<HParams>();
  const Ints& f = hp.filter_shape;
  PAX_CHECK(f.size() == 4 && f[0] > 0 && f[1] > 0 && f[2] > 0 && f[3] > 0, "Conv2D '", path(), "': filter_shape ",
            ints_str(f), " must be 4 positive sizes (kh, kw, in, out)");
  auto check_pair = [&](const Ints& v, const char* name) {
    PAX_CHECK(v.size() == 2 && v[0] >= 1 && v[1] >= 1, "Conv2D '", path(), "': ", name, " ", ints_str(v),
              " must be 2 positive integers");
  };
  check_pair(hp.filter_stride, "filter_stride");
  check_pair(hp.dilations, "dilations");
  const int64_t g = hp.feature_group_count;
  PAX_CHECK(g >= 1 && f[2] % g == 0 && f[3] % g == 0, "Conv2D '", path(), "': feature_group_count = ", g,
            " must be positive and divide the input depth ", f[2], " and the output depth ", f[3]);
  // Validates padding / explicit_padding now rather than at the first call.
  spatial_padding(std::string("Conv2D '") + path() + "'", hp.padding, hp.explicit_padding, {f[0], f[1]}, {f[0], f[1]},
                  {1, 1}, {1, 1});
  create_variable("w", WeightHParams{Shape{f[0], f[1], f[2] / g, f[3]}});  // (kh, kw, in / G, out)
  if (hp.bias) create_variable("b", WeightHParams{Shape{f[3]}, hp.bias_init});
}

Array Conv2D::fprop(const Array& x) const {
  const auto& hp = hparams<HParams>();
  const Ints& f = hp.filter_shape;
  const std::string who = std::string("Conv2D '") + path() + "'";
  PAX_CHECK(x.ndim() >= 3 && x.dim(-1) == f[2], who, ": input ", x.aval().str(), " must be (..., H, W, in = ", f[2],
            ")");
  PAX_CHECK(is_floating(x.dtype()), who, ": input ", x.aval().str(), " must be floating");
  const Shape& s = x.shape();
  const int64_t h = s[s.rank() - 3], w = s[s.rank() - 2];
  auto pads =
      spatial_padding(who, hp.padding, hp.explicit_padding, {h, w}, {f[0], f[1]}, hp.filter_stride, hp.dilations);
  Ints batch(s.dims().begin(), s.dims().end() - 3);
  int64_t b = 1;
  for (int64_t d : batch) b *= d;
  Array x4 = reshape(to_fprop_dtype(x), {b, h, w, f[2]});  // (B, H, W, in)
  Array y = lax::conv_general_dilated(x4, theta("w"), hp.filter_stride, pads, {}, hp.dilations,
                                      lax::conv_dimension_numbers("NHWC", "HWIO", "NHWC"),
                                      hp.feature_group_count);  // (B, H', W', out)
  if (hp.bias) y = y + theta("b");
  Ints out = batch;
  out.insert(out.end(), {y.dim(1), y.dim(2), f[3]});
  return reshape(y, out);
}

PAX_REGISTER_LAYER(Conv2D);

}  // namespace pax::nn
