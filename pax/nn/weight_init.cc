// Weight initialisers.
#include "pax/nn/weight_init.h"

#include <cmath>

#include "pax/core/error.h"
#include "pax/ops/numpy.h"
#include "pax/ops/random.h"

namespace pax::nn {

PAX_REGISTER_HPARAMS(WeightInit, "weight_init");

std::pair<double, double> fans(const Shape& shape, const Ints& fan_in_axes, const Ints& fan_out_axes) {
  const int64_t r = shape.rank();
  if (r == 0) return {1, 1};
  if (r == 1) return {double(shape[0]), double(shape[0])};
  auto product = [&](const Ints& axes) {
    double p = 1;
    for (int64_t a : normalize_axes(axes, r, "fan axes")) p *= double(shape[a]);
    return p;
  };
  // Default (as jax.nn.initializers): in axis -2, out axis -1, every other
  // axis a receptive field that multiplies both.
  double receptive = 1;
  for (int64_t i = 0; i < r - 2; ++i) receptive *= double(shape[i]);
  const double fan_in = fan_in_axes.empty() ? double(shape[r - 2]) * receptive : product(fan_in_axes);
  const double fan_out = fan_out_axes.empty() ? double(shape[r - 1]) * receptive : product(fan_out_axes);
  return {fan_in, fan_out};
}

// Larger weights with a repetition prefix are drawn one repetition at a time
// (random bits are limited to 2^32 - 2 per draw; f64 draws take two each).
constexpr int64_t kMaxElementsPerDraw = int64_t(1) << 30;

Array init_weight(const WeightInit& init, const Array& key, const Shape& shape, DType dtype, const Ints& fan_in_axes,
                  const Ints& fan_out_axes, int64_t repeat_prefix_axes) {
  PAX_CHECK(repeat_prefix_axes >= 0 && repeat_prefix_axes <= shape.rank(),
            "init_weight: repeat_prefix_axes must be in [0, ", shape.rank(), "] for shape ", shape.str(), ", got ",
            repeat_prefix_axes);
  const Ints& dims = shape.dims();
  // A stack of repetitions too large for one random draw (2^32 bits; the
  // stacked projections of a 22B model's 48 layers): each repetition is
  // drawn on its own key, with the same fans.
  if (repeat_prefix_axes > 0 && shape.numel() > kMaxElementsPerDraw) {
    std::vector<Array> slices;
    for (int64_t i = 0; i < dims[0]; ++i)
      slices.push_back(init_weight(init, random::fold_in(key, i), Shape(Ints(dims.begin() + 1, dims.end())), dtype,
                                   fan_in_axes, fan_out_axes, repeat_prefix_axes - 1));
    return stack(slices);
  }
  auto [fan_in, fan_out] = fans(Shape(Ints(dims.begin() + repeat_prefix_axes, dims.end())), fan_in_axes, fan_out_axes);
  const double s = init.scale;
  const DType draw = dtype == DType::f64 ? DType::f64 : DType::f32;
  auto gauss = [&](double stddev) { return (random::normal(key, shape, draw) * stddev).astype(dtype); };
  auto uniform = [&](double bound) { return random::uniform(key, shape, draw, -bound, bound).astype(dtype); };
  // Truncated to [-2, 2] standard deviations and rescaled to the requested
  // variance (0.8796... is the stddev of a standard normal truncated there).
  auto truncated = [&](double stddev) {
    return (random::truncated_normal(key, -2, 2, shape, draw) * (stddev / 0.87962566103423978)).astype(dtype);
  };
  switch (init.method) {
    case InitMethod::constant: return full(shape, s, dtype);
    case InitMethod::uniform: return uniform(s);
    case InitMethod::gaussian: return gauss(s);
    case InitMethod::truncated_gaussian: return (random::truncated_normal(key, -2, 2, shape, draw) * s).astype(dtype);
    case InitMethod::xavier: return uniform(s * std::sqrt(6.0 / (fan_in + fan_out)));
    case InitMethod::gaussian_sqrt_fan_in: return gauss(s / std::sqrt(fan_in));
    case InitMethod::gaussian_sqrt_fan_out: return gauss(s / std::sqrt(fan_out));
    case InitMethod::gaussian_sqrt_fan_avg: return gauss(s / std::sqrt((fan_in + fan_out) / 2));
    case InitMethod::uniform_sqrt_fan_in: return uniform(s * std::sqrt(3.0 / fan_in));
    case InitMethod::uniform_sqrt_fan_out: return uniform(s * std::sqrt(3.0 / fan_out));
    case InitMethod::uniform_sqrt_fan_avg: return uniform(s * std::sqrt(3.0 / ((fan_in + fan_out) / 2)));
    case InitMethod::lecun_normal: return truncated(std::sqrt(s / fan_in));
    case InitMethod::lecun_uniform: return uniform(std::sqrt(3.0 * s / fan_in));
    case InitMethod::he_normal: return truncated(std::sqrt(2.0 * s / fan_in));
    case InitMethod::he_uniform: return uniform(std::sqrt(6.0 * s / fan_in));
  }
  PAX_FAIL("init_weight: unknown init method");
}

}  // namespace pax::nn
