// The f32 kernels that round each result to bf16 precision (for fused loops
// holding bf16 values as f32) against the bf16 kernels, bit for bit; the
// vector paths of select_n (bool selectors) and integer_pow against scalar
// references; narrowing to bf16 with and without streaming stores.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "pax/backend/cpu/elementwise.h"
#include "pax/backend/cpu/fused_kernels.h"
#include "pax/core/buffer.h"

namespace pax::cpu {
namespace {

const size_t kSizes[] = {0, 1, 5, 16, 17, 100, 515, 1024};

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// Random f32 values (special values among them); bf16_exact: each one a bf16 value.
std::vector<float> values(size_t n, uint32_t seed, bool bf16_exact, double lo = -4, double hi = 4) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  const float special[] = {NAN, -NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 1e-40f, 3e38f, 1.0f, -0.5f};
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    v[i] = gen() % 6 == 0 ? special[gen() % 10] : float(dist(gen));
    if (bf16_exact) v[i] = bf16_to_float(float_to_bf16(v[i]));
  }
  return v;
}

// The bf16 kernel's result on bf16 operands, widened.
std::vector<float> via_bf16(size_t n, const std::function<void(const void*, const void*, void*)>& kernel,
                            const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<uint16_t> na(n), nb(n), out(n);
  for (size_t i = 0; i < n; ++i) {
    na[i] = float_to_bf16(a[i]);
    nb[i] = float_to_bf16(b[i]);
  }
  kernel(na.data(), nb.data(), out.data());
  std::vector<float> y(n);
  for (size_t i = 0; i < n; ++i) y[i] = bf16_to_float(out[i]);
  return y;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(bits_of(got[i]), bits_of(want[i]))
        << what << " element " << i << " of " << got.size() << ": got " << got[i] << ", want " << want[i];
  }
}

TEST(RoundedKernels, RoundToBf16MatchesFloatToBf16) {
  for (size_t n : kSizes) {
    std::vector<float> x = values(n, 1, false), y(n), want(n);
    for (size_t i = 0; i < n; ++i) want[i] = bf16_to_float(float_to_bf16(x[i]));
    round_to_bf16(x.data(), y.data(), n);
    expect_same_bits(y, want, "round_to_bf16");
    round_to_bf16(x.data(), x.data(), n);  // in place
    expect_same_bits(x, want, "round_to_bf16 in place");
  }
}

TEST(RoundedKernels, UnaryMatchesTheBf16Kernels) {
  // Every floating-point operation of elementwise_ops.def.
  for (int k = 0; k < kNumUnaryFloatOps; ++k) {
    const UnaryOp op = UnaryOp(k);
    SCOPED_TRACE(unary_op_name(op));
    for (size_t n : kSizes) {
      const std::vector<float> x = values(n, 2 + uint32_t(op), true);
      std::vector<float> y(n);
      unary_round_bf16(op, x.data(), y.data(), n);
      auto kernel = [&](const void* a, const void*, void* out) { unary(op, DType::bf16, a, out, n); };
      expect_same_bits(y, via_bf16(n, kernel, x, x), "unary_round_bf16");
    }
  }
  // Out of the range of the vector sin: the C library path, rounded too.
  std::vector<float> big = {1e6f, -3e5f, 0.5f}, y(3);
  unary_round_bf16(UnaryOp::sin, big.data(), y.data(), 3);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(bits_of(y[i]), bits_of(bf16_to_float(float_to_bf16(std::sin(big[i])))));
}

TEST(RoundedKernels, BinaryMatchesTheBf16Kernels) {
  const BinaryOp ops[] = {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::div,
                          BinaryOp::max, BinaryOp::min, BinaryOp::rem, BinaryOp::pow};
  for (BinaryOp op : ops) {
    for (size_t n : kSizes) {
      const std::vector<float> a = values(n, 30 + uint32_t(op), true), b = values(n, 60 + uint32_t(op), true);
      std::vector<float> y(n);
      binary_round_bf16(op, a.data(), b.data(), y.data(), n);
      auto kernel = [&](const void* p, const void* q, void* out) { binary(op, DType::bf16, p, q, out, n); };
      expect_same_bits(y, via_bf16(n, kernel, a, b), "binary_round_bf16");
      std::vector<float> in_place = a;
      binary_round_bf16(op, in_place.data(), b.data(), in_place.data(), n);
      expect_same_bits(in_place, y, "binary_round_bf16 in place");
    }
  }
}

template <class T>
T pow_reference(T x, int64_t e) {
  const bool invert = e < 0;
  uint64_t m = invert ? uint64_t(-(e + 1)) + 1 : uint64_t(e);
  T acc = T(1);
  for (uint64_t k = m; k; k >>= 1) {
    if (k & 1) acc = T(acc * x);
    x = T(x * x);
  }
  return invert ? T(T(1) / acc) : acc;
}

template <class T>
void check_integer_pow(DType dtype) {
  for (int64_t e : {-3, -2, -1, 0, 1, 2, 3, 5, 8}) {
    for (size_t n : kSizes) {
      const std::vector<float> f = values(n, 90 + uint32_t(e + 3), false, -3, 3);
      std::vector<T> x(f.begin(), f.end()), y(n);
      integer_pow(dtype, e, x.data(), y.data(), n);
      for (size_t i = 0; i < n; ++i) {
        const T want = pow_reference(x[i], e);
        ASSERT_TRUE(std::memcmp(&y[i], &want, sizeof(T)) == 0 || (std::isnan(y[i]) && std::isnan(want)))
            << "x=" << x[i] << " e=" << e << " got " << y[i] << " want " << want;
      }
    }
  }
}

TEST(RoundedKernels, IntegerPowVectorsMatchTheScalarLoop) {
  check_integer_pow<float>(DType::f32);
  check_integer_pow<double>(DType::f64);
}

template <class T>
void check_select(size_t width) {
  std::mt19937 gen(5);
  for (size_t n : kSizes) {
    std::unique_ptr<bool[]> which(new bool[n + 1]);
    std::vector<T> c0(n), c1(n), y(n);
    for (size_t i = 0; i < n; ++i) {
      which[i] = gen() % 2;
      c0[i] = T(gen());
      c1[i] = T(gen());
    }
    const void* cases[] = {c0.data(), c1.data()};
    select_n(DType::bool_, which.get(), cases, 2, width, y.data(), n);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(y[i], which[i] ? c1[i] : c0[i]) << "width " << width << " i " << i;
  }
}

TEST(RoundedKernels, SelectWithBoolSelector) {
  check_select<uint8_t>(1);
  check_select<uint16_t>(2);
  check_select<uint32_t>(4);
  check_select<uint64_t>(8);
}

TEST(RoundedKernels, NarrowToBf16StreamedOrNot) {
  for (size_t n : kSizes) {
    const std::vector<float> x = values(n, 11, true);
    auto plain = Buffer::allocate(n * 2 + 64), streamed = Buffer::allocate(n * 2 + 64);
    narrow_to_bf16(x.data(), static_cast<uint16_t*>(plain->data()), n);
    narrow_to_bf16(x.data(), static_cast<uint16_t*>(streamed->data()), n, true);
    stream_fence();
    for (size_t i = 0; i < n; ++i) {
      const uint16_t want = uint16_t(bits_of(x[i]) >> 16);
      ASSERT_EQ(static_cast<const uint16_t*>(plain->data())[i], want);
      ASSERT_EQ(static_cast<const uint16_t*>(streamed->data())[i], want);
    }
  }
}

}  // namespace
}  // namespace pax::cpu
