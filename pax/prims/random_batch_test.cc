// Batching rules of the random primitives: threefry2x32 against a loop
// (scalar and full keys, shared and batched, every batch axis) and
// random_bits with a batched key, which must give every example exactly the
// bits of random_bits(key_i, shape) — odd, even, empty and 0-d shapes,
// nested vmap, and the sampling functions built on top.
#include <gtest/gtest.h>

#include "pax/api/transforms.h"
#include "pax/interp/vmap.h"
#include "pax/ops/numpy.h"
#include "pax/ops/random.h"
#include "pax/testing/testing.h"

namespace pax {
namespace {

using Axis = std::optional<int64_t>;
const Axis kNone = std::nullopt;

// u32 values from a seed (check_vmap keeps integer operands fixed, so the
// batches here are built by hand).
Array u32s(const Shape& s, uint32_t seed) {
  std::vector<uint32_t> v(size_t(s.numel()));
  uint32_t x = seed * 2654435761u + 12345u;
  for (uint32_t& e : v) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    e = x;
  }
  return array<uint32_t>(v, s);
}

// Item b along `axis` (nullopt: x itself).
Array item(const Array& x, Axis axis, int64_t b) {
  if (!axis) return x;
  return squeeze(slice_along(x, *axis, b, b + 1), {*axis});
}

::testing::AssertionResult same_bits(const Array& got, const Array& want) {
  if (got.aval() != want.aval()) {
    return ::testing::AssertionFailure() << got.aval().str() << " != " << want.aval().str();
  }
  if (got.to_vector<uint32_t>() != want.to_vector<uint32_t>()) return ::testing::AssertionFailure() << "bits differ";
  return ::testing::AssertionSuccess();
}

// threefry2x32 under vmap (both outputs, batch moved to axis 0) against a loop.
::testing::AssertionResult check_threefry(const std::vector<Array>& args, const std::vector<Axis>& in_axes, int64_t n) {
  FlatFn f = [](std::span<const Array> a) {
    auto [y0, y1] = lax::threefry2x32(a[0], a[1], a[2], a[3]);
    return std::vector<Array>{y0, y1};
  };
  std::vector<int64_t> out_axes{0};
  std::vector<Array> got = vmap_flat(f, args, in_axes, out_axes, "");
  for (int64_t b = 0; b < n; ++b) {
    std::vector<Array> one;
    for (size_t i = 0; i < 4; ++i) one.push_back(item(args[i], in_axes[i], b));
    std::vector<Array> want = f(one);
    for (size_t j = 0; j < 2; ++j) {
      auto r = same_bits(item(got[j], 0, b), want[j]);
      if (!r) return r << " (output " << j << ", example " << b << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

TEST(RandomBatch, Threefry) {
  const int64_t n = 4;
  // Per example: counters u32[2, 3]; keys scalars or u32[2, 3].
  Array counters_b0 = u32s({n, 2, 3}, 1), counters_b2 = u32s({2, 3, n}, 2), counters = u32s({2, 3}, 3);
  Array scalar_key = u32s({}, 4), scalar_keys = u32s({n}, 5), full_key = u32s({2, 3}, 6),
        full_keys = u32s({2, n, 3}, 7);
  EXPECT_TRUE(check_threefry({scalar_key, scalar_key, counters_b0, counters_b0}, {kNone, kNone, 0, 0}, n));
  EXPECT_TRUE(check_threefry({scalar_keys, scalar_key, counters_b2, counters}, {0, kNone, 2, kNone}, n));
  EXPECT_TRUE(check_threefry({scalar_keys, scalar_keys, counters, counters}, {0, 0, kNone, kNone}, n));
  EXPECT_TRUE(check_threefry({full_keys, scalar_keys, counters_b0, counters_b2}, {1, 0, 0, 2}, n));
  EXPECT_TRUE(check_threefry({full_key, full_keys, counters, counters_b2}, {kNone, 1, kNone, 2}, n));
  // 0-d examples.
  Array c = u32s({n}, 8);
  EXPECT_TRUE(check_threefry({scalar_key, scalar_keys, c, c}, {kNone, 0, 0, 0}, n));
  EXPECT_TRUE(check_threefry({scalar_keys, scalar_key, scalar_key, c}, {0, kNone, kNone, 0}, n));
}

TEST(RandomBatch, RandomBitsEqualsTheLoop) {
  const int64_t n = 5;
  for (const Ints& shape : std::vector<Ints>{{}, {1}, {2}, {7}, {2, 3}, {3, 5}, {0}, {4, 0, 2}, {33, 3}}) {
    for (int64_t axis : {0, 1}) {
      Array keys = axis == 0 ? u32s({n, 2}, 9) : u32s({2, n}, 10);
      Array got = vmap([&](const Array& k) { return lax::random_bits(k, shape); }, {.in_axes = {axis}})(keys);
      for (int64_t b = 0; b < n; ++b) {
        EXPECT_TRUE(same_bits(item(got, 0, b), lax::random_bits(item(keys, axis, b), shape)))
            << "shape " << ints_str(shape) << " key axis " << axis << " example " << b;
      }
    }
  }
}

TEST(RandomBatch, NestedAndThroughTheSamplers) {
  // vmap of vmap over a grid of keys u32[2, 3, 2].
  Array grid = u32s({2, 3, 2}, 11);
  auto bits = [](const Array& k) { return lax::random_bits(k, {3}); };
  Array got = vmap(vmap(bits))(grid);
  ASSERT_EQ(got.shape(), Shape({2, 3, 3}));
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      EXPECT_TRUE(same_bits(item(item(got, 0, i), 0, j), bits(item(item(grid, 0, i), 0, j)))) << i << " " << j;
    }
  }
  // Samplers over split keys: batched keys through bits, shifts and casts.
  Array keys = random::split(random::key(42), 4);
  Array normal = vmap([](const Array& k) { return random::normal(k, {2, 3}); })(keys);
  Array uniform = vmap([](const Array& k) { return random::uniform(k, {5}, DType::bf16); })(keys);
  for (int64_t b = 0; b < 4; ++b) {
    EXPECT_TRUE(testing::all_close(item(normal, 0, b), random::normal(item(keys, 0, b), {2, 3}), 0, 0)) << b;
    EXPECT_TRUE(testing::all_close(item(uniform, 0, b), random::uniform(item(keys, 0, b), {5}, DType::bf16), 0, 0));
  }
  // A key shared by every example gives every example the same bits.
  Array shared = vmap([](const Array& x) { return x + random::uniform(random::key(7), {}); })(zeros({3}));
  EXPECT_EQ(shared.to_vector<float>()[0], shared.to_vector<float>()[2]);
}

TEST(RandomBatch, JitOfVmap) {
  Array keys = u32s({3, 2}, 16);
  auto f = [](const Array& k) { return lax::random_bits(k, {3, 3}); };
  Array eager = vmap(f)(keys);
  Array jitted = jit([&](const Array& k) { return vmap(f)(k); })(keys);
  EXPECT_TRUE(same_bits(jitted, eager));
}

TEST(RandomBatch, Errors) {
  auto bits = [](const Array& k) { return lax::random_bits(k, {4}); };
  EXPECT_PAX_ERROR(vmap(bits)(u32s({3, 3}, 12)), "random_bits: key u32[3] must be a raw threefry key u32[2]");
  auto huge = [](const Array& k) { return lax::random_bits(k, {1 << 20, 1 << 13}); };
  EXPECT_PAX_ERROR(vmap(huge)(u32s({3, 2}, 13)), "the largest size supported");
  auto tf = [](const Array& k, const Array& x) { return lax::threefry2x32(k, k, x, x).first; };
  EXPECT_PAX_ERROR(vmap(tf)(u32s({3, 2}, 14), u32s({3, 4}, 15)),
                   "must be a scalar (u32[]) or have the counters' shape");
}

}  // namespace
}  // namespace pax
