// Random primitives against Random123 known-answer vectors, a known jax.random
// value and a slow scalar reference written here.
#include <gtest/gtest.h>
#include <omp.h>

#include <array>
#include <cstdint>
#include <random>
#include <tuple>
#include <utility>
#include <vector>

#include "pax/ops/lax.h"
#include "pax/testing/testing.h"

namespace pax {
namespace {

using U32 = std::vector<uint32_t>;

// Threefry-2x32, 20 rounds, as in the Random123 / JAX reference code.
std::pair<uint32_t, uint32_t> ref_threefry(uint32_t k0, uint32_t k1, uint32_t x0, uint32_t x1) {
  const uint32_t ks[3] = {k0, k1, k0 ^ k1 ^ 0x1BD11BDAu};
  const int rot[2][4] = {{13, 15, 26, 6}, {17, 29, 16, 24}};
  x0 += ks[0];
  x1 += ks[1];
  for (int group = 0; group < 5; ++group) {
    for (int r : rot[group % 2]) {
      x0 += x1;
      x1 = (x1 << r) | (x1 >> (32 - r));
      x1 ^= x0;
    }
    x0 += ks[(group + 1) % 3];
    x1 += ks[(group + 2) % 3] + uint32_t(group + 1);
  }
  return {x0, x1};
}

// jax.random's threefry random_bits: counters iota(n) padded to even length,
// split into halves, encrypted pairwise, concatenated and truncated.
U32 ref_random_bits(uint32_t k0, uint32_t k1, int64_t n) {
  U32 c(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) c[size_t(i)] = uint32_t(i);
  if (n % 2) c.push_back(0);
  const size_t m = c.size() / 2;
  U32 y0(m), y1(m);
  for (size_t i = 0; i < m; ++i) std::tie(y0[i], y1[i]) = ref_threefry(k0, k1, c[i], c[m + i]);
  U32 out = y0;
  out.insert(out.end(), y1.begin(), y1.end());
  out.resize(size_t(n));
  return out;
}

struct Kat {
  uint32_t k0, k1, x0, x1, y0, y1;
};
constexpr Kat kKats[] = {
    {0, 0, 0, 0, 0x6b200159u, 0x99ba4efeu},
    {0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0x1cb996fcu, 0xbb002be7u},
    {0x13198a2eu, 0x03707344u, 0x243f6a88u, 0x85a308d3u, 0xc4923a9cu, 0x483df7a0u},
};

U32 random_u32(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  U32 v(n);
  for (uint32_t& x : v) x = uint32_t(gen());
  return v;
}

Array random_bits(uint32_t k0, uint32_t k1, const Ints& shape) {
  return lax::random_bits(array<uint32_t>({k0, k1}), shape);
}

class ThreadCount {
 public:
  explicit ThreadCount(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ThreadCount() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

TEST(RandomPrims, ReferenceMatchesKnownAnswers) {
  for (const Kat& k : kKats) {
    auto [y0, y1] = ref_threefry(k.k0, k.k1, k.x0, k.x1);
    EXPECT_EQ(y0, k.y0);
    EXPECT_EQ(y1, k.y1);
  }
}

TEST(RandomPrims, Threefry2x32KnownAnswersScalar) {
  for (const Kat& k : kKats) {
    auto [y0, y1] = lax::threefry2x32(scalar(k.k0), scalar(k.k1), scalar(k.x0), scalar(k.x1));
    EXPECT_EQ(y0.shape(), Shape{});
    EXPECT_EQ(y1.dtype(), DType::u32);
    EXPECT_EQ(y0.item<uint32_t>(), k.y0);
    EXPECT_EQ(y1.item<uint32_t>(), k.y1);
  }
}

TEST(RandomPrims, Threefry2x32KnownAnswersArrays) {
  U32 k0, k1, x0, x1, w0, w1;
  for (const Kat& k : kKats) {
    k0.push_back(k.k0), k1.push_back(k.k1), x0.push_back(k.x0), x1.push_back(k.x1);
    w0.push_back(k.y0), w1.push_back(k.y1);
  }
  // Array keys, shape (3,) and (3, 1).
  auto [y0, y1] = lax::threefry2x32(array(k0), array(k1), array(x0), array(x1));
  EXPECT_EQ(y0.to_vector<uint32_t>(), w0);
  EXPECT_EQ(y1.to_vector<uint32_t>(), w1);
  const Shape s31{3, 1};
  auto [z0, z1] = lax::threefry2x32(array(k0, s31), array(k1, s31), array(x0, s31), array(x1, s31));
  EXPECT_EQ(z0.shape(), s31);
  EXPECT_EQ(z0.to_vector<uint32_t>(), w0);
  EXPECT_EQ(z1.to_vector<uint32_t>(), w1);
  // Scalar keys with array counters: each vector repeated over 37 lanes (vector body + tail).
  for (const Kat& k : kKats) {
    auto [a0, a1] = lax::threefry2x32(scalar(k.k0), scalar(k.k1), array(U32(37, k.x0)), array(U32(37, k.x1)));
    EXPECT_EQ(a0.to_vector<uint32_t>(), U32(37, k.y0));
    EXPECT_EQ(a1.to_vector<uint32_t>(), U32(37, k.y1));
  }
}

TEST(RandomPrims, Threefry2x32MixedKeysAgainstReference) {
  for (size_t n : {1, 5, 16, 17, 63, 64, 65, 200, 1027}) {
    U32 k0 = random_u32(n, 1), k1 = random_u32(n, 2), x0 = random_u32(n, 3), x1 = random_u32(n, 4);
    const uint32_t s0 = 0xdeadbeefu, s1 = 0x01234567u;
    for (int mode = 0; mode < 4; ++mode) {
      const bool b0 = mode & 1, b1 = mode & 2;
      Array a0 = b0 ? scalar(s0) : array(k0), a1 = b1 ? scalar(s1) : array(k1);
      auto [y0, y1] = lax::threefry2x32(a0, a1, array(x0), array(x1));
      U32 g0 = y0.to_vector<uint32_t>(), g1 = y1.to_vector<uint32_t>();
      for (size_t i = 0; i < n; ++i) {
        auto [w0, w1] = ref_threefry(b0 ? s0 : k0[i], b1 ? s1 : k1[i], x0[i], x1[i]);
        ASSERT_EQ(g0[i], w0) << "n " << n << " mode " << mode << " i " << i;
        ASSERT_EQ(g1[i], w1) << "n " << n << " mode " << mode << " i " << i;
      }
    }
  }
}

TEST(RandomPrims, Threefry2x32ZeroSize) {
  Array e = array(U32{}, Shape{0});
  auto [y0, y1] = lax::threefry2x32(scalar(1u), e, e, e);
  EXPECT_EQ(y0.shape(), Shape{0});
  EXPECT_EQ(y1.shape(), Shape{0});
  Array e2 = array(U32{}, Shape{2, 0});
  auto [z0, z1] = lax::threefry2x32(e2, scalar(2u), e2, e2);
  EXPECT_EQ(z1.shape(), (Shape{2, 0}));
}

TEST(RandomPrims, Threefry2x32Errors) {
  Array u = array(U32{1, 2, 3, 4});
  EXPECT_PAX_ERROR(lax::threefry2x32(u, u, u, array<float>({1, 2, 3, 4})),
                   "threefry2x32: operand x1 is f32[4]; all operands must have dtype u32");
  EXPECT_PAX_ERROR(lax::threefry2x32(scalar(int32_t(1)), u, u, u), "operand k0 is i32[]");
  EXPECT_PAX_ERROR(lax::threefry2x32(u, u, u, array(U32{1, 2, 3})),
                   "counters x0 u32[4] and x1 u32[3] must have the same shape");
  EXPECT_PAX_ERROR(lax::threefry2x32(u, array(U32{1, 2}), u, u),
                   "key k1 u32[2] must be a scalar (u32[]) or have the counters' shape u32[4]");
  EXPECT_PAX_ERROR(lax::threefry2x32(array(U32{1, 2, 3, 4}, Shape{2, 2}), u, u, u), "key k0 u32[2,2]");
}

TEST(RandomPrims, RandomBitsMatchesJaxSplit) {
  // jax.random.split(jax.random.PRNGKey(0)) with the classic threefry PRNG.
  Array keys = random_bits(0, 0, {2, 2});
  EXPECT_EQ(keys.shape(), (Shape{2, 2}));
  EXPECT_EQ(keys.dtype(), DType::u32);
  EXPECT_EQ(keys.to_vector<uint32_t>(), (U32{4146024105u, 967050713u, 2718843009u, 1272950319u}));
}

TEST(RandomPrims, RandomBitsAgainstReference) {
  const std::pair<uint32_t, uint32_t> keys[] = {{0, 0}, {0, 42}, {0x13198a2eu, 0x03707344u}, {0xffffffffu, 1}};
  for (auto [k0, k1] : keys) {
    for (int64_t n : {1, 2, 3, 4, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 1000, 1001, 4097}) {
      EXPECT_EQ(random_bits(k0, k1, {n}).to_vector<uint32_t>(), ref_random_bits(k0, k1, n))
          << "key (" << k0 << ", " << k1 << ") n " << n;
    }
  }
  Array a = random_bits(7, 9, {3, 5});
  EXPECT_EQ(a.shape(), (Shape{3, 5}));
  EXPECT_EQ(a.to_vector<uint32_t>(), ref_random_bits(7, 9, 15));
  Array b = random_bits(7, 9, {2, 3, 4});
  EXPECT_EQ(b.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(b.to_vector<uint32_t>(), ref_random_bits(7, 9, 24));
  Array s = random_bits(7, 9, {});
  EXPECT_EQ(s.shape(), Shape{});
  EXPECT_EQ(s.item<uint32_t>(), ref_random_bits(7, 9, 1)[0]);
  // An odd size pads with the counter pair (m - 1, 0), so y0 of (0, 0) under key (0, 0) appears.
  EXPECT_EQ(random_bits(0, 0, {1}).item<uint32_t>(), 0x6b200159u);
}

TEST(RandomPrims, RandomBitsZeroSize) {
  for (const Ints& shape : {Ints{0}, Ints{3, 0}, Ints{0, 5, 2}}) {
    Array a = random_bits(1, 2, shape);
    EXPECT_EQ(a.shape(), Shape(shape));
    EXPECT_EQ(a.size(), 0);
  }
}

TEST(RandomPrims, RandomBitsSameForAnyThreadCount) {
  for (int64_t n : {int64_t(1) << 20, (int64_t(1) << 20) + 1}) {
    Array one, two;
    {
      ThreadCount t(1);
      one = random_bits(0x12345678u, 0x9abcdef0u, {n});
    }
    {
      ThreadCount t(2);
      two = random_bits(0x12345678u, 0x9abcdef0u, {n});
    }
    U32 a = one.to_vector<uint32_t>();
    EXPECT_EQ(a, two.to_vector<uint32_t>()) << "n " << n;
    EXPECT_EQ(a, ref_random_bits(0x12345678u, 0x9abcdef0u, n)) << "n " << n;
  }
  // threefry2x32 over many elements, split across threads the same way.
  const size_t n = size_t(1) << 20;
  Array x0 = array(random_u32(n, 5)), x1 = array(random_u32(n, 6)), k0 = array(random_u32(n, 7));
  std::pair<Array, Array> one, two;
  {
    ThreadCount t(1);
    one = lax::threefry2x32(k0, scalar(3u), x0, x1);
  }
  {
    ThreadCount t(2);
    two = lax::threefry2x32(k0, scalar(3u), x0, x1);
  }
  EXPECT_EQ(one.first.to_vector<uint32_t>(), two.first.to_vector<uint32_t>());
  EXPECT_EQ(one.second.to_vector<uint32_t>(), two.second.to_vector<uint32_t>());
}

TEST(RandomPrims, RandomBitsErrors) {
  Array key = array(U32{0, 0});
  EXPECT_PAX_ERROR(lax::random_bits(array<int32_t>({0, 0}), {2}),
                   "random_bits: key i32[2] must be a raw threefry key u32[2]");
  EXPECT_PAX_ERROR(lax::random_bits(array(U32{0, 0, 0}), {2}), "key u32[3] must be a raw threefry key u32[2]");
  EXPECT_PAX_ERROR(lax::random_bits(scalar(0u), {2}), "key u32[] must be");
  EXPECT_PAX_ERROR(lax::random_bits(array(U32{0, 0}, Shape{2, 1}), {2}), "key u32[2,1] must be");
  EXPECT_PAX_ERROR(lax::random_bits(key, {2}, 16), "random_bits: bit_width 16 is not supported; valid value: 32");
  EXPECT_PAX_ERROR(lax::random_bits(key, {2}, 64), "bit_width 64 is not supported");
  EXPECT_PAX_ERROR(lax::random_bits(key, {2, -1}), "random_bits: shape (2, -1) has a negative dimension");
  EXPECT_PAX_ERROR(lax::random_bits(key, {65536, 65536}), "more than 4294967294 (2^32 - 2) elements");
  EXPECT_PAX_ERROR(lax::random_bits(key, {int64_t(1) << 40, int64_t(1) << 40}), "the largest size supported");
  EXPECT_PAX_ERROR(lax::random_bits(key, {0, -3}), "negative dimension");
}

}  // namespace
}  // namespace pax
