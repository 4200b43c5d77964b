// jax.random's distributions on top of the threefry2x32 / random_bits primitives.
#include "pax/ops/random.h"

#include <cmath>
#include <limits>

#include "pax/core/error.h"

namespace pax::random {

namespace {

void check_key(const Array& key, const char* op) {
  PAX_CHECK(key.dtype() == DType::u32 && key.shape() == Shape{2}, op, ": key must be u32[2] (from random::key), got ",
            key.aval().str());
}

Array u32(double v) { return scalar(v, DType::u32); }

// Floats in [0, 1) from the top 23 random bits of each u32 (jax.random's construction).
Array unit_floats_f32(const Array& key, const Shape& shape) {
  Array b = bits(key, shape);
  Array mantissa = lax::shift_right_logical(b, full(shape, 32 - 23, DType::u32));
  Array one_bits = lax::bitwise_or(mantissa, full(shape, double(0x3F800000u), DType::u32));
  return lax::sub(lax::bitcast_convert_type(one_bits, DType::f32), full(shape, 1.0, DType::f32));
}

// Floats in [0, 1) with 52 random bits from two u32 draws.
Array unit_floats_f64(const Array& key, const Shape& shape) {
  Ints both = shape.dims();
  both.insert(both.begin(), 2);
  Array b = bits(key, Shape(both)).astype(DType::f64);
  Array hi = lax::squeeze(lax::slice(b, Ints(both.size(), 0),
                                     [&] {
                                       Ints l = both;
                                       l[0] = 1;
                                       return l;
                                     }()),
                          {0});
  Ints start(both.size(), 0);
  start[0] = 1;
  Array lo = lax::squeeze(lax::slice(b, start, both), {0});
  // hi * 2^20 + floor(lo / 2^12) has 52 bits; scale by 2^-52.
  Array top = floor(lo / 4096.0);
  return (hi * 1048576.0 + top) * (1.0 / 4503599627370496.0);
}

}  // namespace

Array key(int64_t seed) {
  uint64_t s = uint64_t(seed);
  return array<uint32_t>({uint32_t(s >> 32), uint32_t(s & 0xffffffffu)});
}

Array split(const Array& k, int64_t num) {
  check_key(k, "split");
  PAX_CHECK(num >= 0, "split: num must be >= 0, got ", num);
  return bits(k, {num, 2});
}

std::vector<Array> split_keys(const Array& k, int64_t num) {
  Array all = random::split(k, num);
  std::vector<Array> out;
  for (int64_t i = 0; i < num; ++i) out.push_back(lax::reshape(lax::slice(all, {i, 0}, {i + 1, 2}), {2}));
  return out;
}

Array fold_in(const Array& k, uint32_t data) {
  check_key(k, "fold_in");
  Array k0 = lax::reshape(lax::slice(k, {0}, {1}), {});
  Array k1 = lax::reshape(lax::slice(k, {1}, {2}), {});
  auto [y0, y1] = lax::threefry2x32(k0, k1, u32(0), u32(double(data)));
  return lax::concatenate({lax::reshape(y0, {1}), lax::reshape(y1, {1})}, 0);
}

Array bits(const Array& k, const Shape& shape) {
  check_key(k, "random bits");
  return lax::random_bits(k, shape.dims(), 32);
}

Array uniform(const Array& k, const Shape& shape, DType dtype, double minval, double maxval) {
  PAX_CHECK(is_floating(dtype), "uniform: dtype must be floating, got ", dtype_name(dtype));
  Array u = dtype == DType::f64 ? unit_floats_f64(k, shape) : unit_floats_f32(k, shape);
  const DType compute = u.dtype();
  // The span is computed in the compute dtype, as jax.random does.
  const double span = compute == DType::f32 ? double(float(maxval) - float(minval)) : maxval - minval;
  Array lo = full(shape, minval, compute);
  Array v = lax::add(lax::mul(u, full(shape, span, compute)), lo);
  return lax::max(lo, v).astype(dtype);
}

Array normal(const Array& k, const Shape& shape, DType dtype) {
  PAX_CHECK(is_floating(dtype), "normal: dtype must be floating, got ", dtype_name(dtype));
  const DType compute = dtype == DType::f64 ? DType::f64 : DType::f32;
  const double lo = compute == DType::f32 ? double(std::nextafter(-1.0f, 0.0f)) : std::nextafter(-1.0, 0.0);
  Array u = uniform(k, shape, compute, lo, 1.0);
  return lax::mul(full(shape, std::sqrt(2.0), compute), lax::erf_inv(u)).astype(dtype);
}

Array truncated_normal(const Array& k, double lower, double upper, const Shape& shape, DType dtype) {
  PAX_CHECK(is_floating(dtype), "truncated_normal: dtype must be floating, got ", dtype_name(dtype));
  PAX_CHECK(lower < upper, "truncated_normal: need lower < upper, got ", lower, " and ", upper);
  const DType compute = dtype == DType::f64 ? DType::f64 : DType::f32;
  const double s2 = std::sqrt(2.0);
  const double a = std::erf(lower / s2), b = std::erf(upper / s2);
  Array u = uniform(k, shape, compute, a, b);
  Array out = lax::mul(full(shape, s2, compute), lax::erf_inv(u));
  // Keep samples strictly inside the bounds despite rounding.
  double lo, hi;
  if (compute == DType::f32) {
    lo = std::nextafter(float(lower), std::numeric_limits<float>::infinity());
    hi = std::nextafter(float(upper), -std::numeric_limits<float>::infinity());
  } else {
    lo = std::nextafter(lower, std::numeric_limits<double>::infinity());
    hi = std::nextafter(upper, -std::numeric_limits<double>::infinity());
  }
  return clip(out, lo, hi).astype(dtype);
}

Array bernoulli(const Array& k, double p, const Shape& shape) { return uniform(k, shape) < p; }

Array gumbel(const Array& k, const Shape& shape, DType dtype) {
  const DType compute = dtype == DType::f64 ? DType::f64 : DType::f32;
  const double tiny = compute == DType::f32 ? double(std::numeric_limits<float>::min())
                                            : std::numeric_limits<double>::min();
  Array u = uniform(k, shape, compute, tiny, 1.0);
  return (-log(-log(u))).astype(dtype);
}

Array categorical(const Array& k, const Array& logits, int64_t axis) {
  PAX_CHECK(is_floating(logits.dtype()), "categorical: logits must be floating, got ", logits.aval().str());
  Array g = gumbel(k, logits.shape(), logits.dtype());
  return argmax(g + logits, normalize_axis(axis, logits.ndim(), "categorical"));
}

Array randint(const Array& k, const Shape& shape, int64_t minval, int64_t maxval, DType dtype) {
  PAX_CHECK(dtype == DType::i32 || dtype == DType::u32 || dtype == DType::u8,
            "randint: dtype must be int32, uint32 or uint8, got ", dtype_name(dtype));
  PAX_CHECK(minval >= std::numeric_limits<int32_t>::min() && maxval <= int64_t(1) << 32,
            "randint: bounds must fit in 32 bits");
  std::vector<Array> keys = split_keys(k, 2);
  Array higher = bits(keys[0], shape);
  Array lower = bits(keys[1], shape);
  // span = maxval - minval (>= 1); offset = (hi % span) * (2^32 % span) + lo % span, mod span.
  const uint64_t span64 = maxval > minval ? uint64_t(maxval - minval) : 1;
  PAX_CHECK(span64 <= 0xffffffffull, "randint: maxval - minval must be < 2^32");
  Array span = full(shape, double(span64), DType::u32);
  const uint64_t mult64 = ((uint64_t(1) << 16) % span64) * ((uint64_t(1) << 16) % span64) % span64;
  Array mult = full(shape, double(mult64), DType::u32);
  Array offset = lax::rem(lax::add(lax::mul(lax::rem(higher, span), mult), lax::rem(lower, span)), span);
  Array base = full(shape, double(minval), DType::i64);
  return lax::add(base, offset.astype(DType::i64)).astype(dtype);
}

Array permutation(const Array& k, const Array& x) {
  check_key(k, "permutation");
  PAX_CHECK(x.ndim() >= 1, "permutation: needs an array of rank >= 1, got ", x.aval().str());
  // jax.random's shuffle: a few rounds of sorting by random keys.
  const int64_t n = x.dim(0);
  const int rounds = int(std::ceil(3 * std::log(double(std::max<int64_t>(1, n))) / std::log(4294967295.0)));
  Array perm = lax::iota(DType::i32, {n}, 0);
  Array current = k;
  for (int r = 0; r < rounds; ++r) {
    std::vector<Array> keys = split_keys(current, 2);
    current = keys[0];
    Array sort_keys = bits(keys[1], {n});
    perm = lax::sort({sort_keys, perm}, 0, true, 1)[1];
  }
  return take(x, perm, 0);
}

Array permutation(const Array& k, int64_t n) {
  PAX_CHECK(n >= 0, "permutation: n must be >= 0, got ", n);
  return permutation(k, arange<int64_t>(n));
}

}  // namespace pax::random
