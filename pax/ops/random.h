// pax::random — counter-based random numbers as in jax.random. A key is a
// u32[2] array; functions are pure (same key, same numbers, whatever the
// thread count). key / split / fold_in / random bits / uniform / normal
// reproduce jax.random's classic Threefry values for float32.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "pax/ops/numpy.h"

namespace pax::random {

// jax.random.PRNGKey(seed): [seed >> 32, seed & 0xffffffff] as u32[2].
Array key(int64_t seed);
// `num` new keys (u32[num, 2] stacked, as jax.random.split).
Array split(const Array& key, int64_t num = 2);
// The keys of split() as a list, for `auto keys = split_keys(key, 3); keys[0]`.
std::vector<Array> split_keys(const Array& key, int64_t num = 2);
Array fold_in(const Array& key, uint32_t data);
Array bits(const Array& key, const Shape& shape);  // u32
// Uniform in [minval, maxval). float32 matches jax.random.uniform bit for bit;
// bf16 / f16 are drawn in float32 and rounded; float64 uses 52 random bits.
Array uniform(const Array& key, const Shape& shape = {}, DType dtype = DType::f32, double minval = 0.0,
              double maxval = 1.0);
// Standard normal (sqrt(2) * erf_inv of a uniform in (-1, 1)).
Array normal(const Array& key, const Shape& shape = {}, DType dtype = DType::f32);
// Normal truncated to [lower, upper].
Array truncated_normal(const Array& key, double lower, double upper, const Shape& shape = {}, DType dtype = DType::f32);
Array bernoulli(const Array& key, double p = 0.5, const Shape& shape = {});
Array gumbel(const Array& key, const Shape& shape = {}, DType dtype = DType::f32);
// Samples indices from logits along `axis` (Gumbel-max trick).
Array categorical(const Array& key, const Array& logits, int64_t axis = -1);
// Integers uniform in [minval, maxval) (jax.random.randint's construction).
Array randint(const Array& key, const Shape& shape, int64_t minval, int64_t maxval, DType dtype = DType::i32);
// A random permutation of 0..n-1, or of x along axis 0.
Array permutation(const Array& key, int64_t n);
Array permutation(const Array& key, const Array& x);

}  // namespace pax::random
