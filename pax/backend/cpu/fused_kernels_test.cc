// Accumulator chains against the elementwise kernels run one step at a time
// (random programs, every operand order, scalar and array leaves, special
// values, tails, in place), and streaming copies.
#include "pax/backend/cpu/fused_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "pax/core/buffer.h"

namespace pax::cpu {
namespace {

template <class T>
std::vector<T> values(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(-3, 3);
  const double special[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e-40, 2.0, -0.5};
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = T(gen() % 5 == 0 ? special[gen() % 8] : dist(gen));
  return v;
}

template <class T>
void check_random_chains(DType dtype) {
  const BinaryOp binary_ops[] = {BinaryOp::add, BinaryOp::sub, BinaryOp::mul,
                                 BinaryOp::div, BinaryOp::max, BinaryOp::min};
  std::mt19937 gen(7);
  for (size_t n : {size_t(1), size_t(3), size_t(16), size_t(31), size_t(64), size_t(65), size_t(200), size_t(1000)}) {
    for (int trial = 0; trial < 20; ++trial) {
      const size_t num_steps = 1 + gen() % 8;
      std::vector<std::vector<T>> leaves;
      std::vector<ChainStep> steps(num_steps);
      for (size_t s = 0; s < num_steps; ++s) {
        ChainStep& st = steps[s];
        st.binary = gen() % 4 != 0;
        st.op = st.binary ? uint8_t(binary_ops[gen() % 6]) : uint8_t(gen() % 2 ? UnaryOp::neg : UnaryOp::abs);
        st.leaf_first = gen() % 2;
        st.scalar = gen() % 3 == 0;
        leaves.push_back(values<T>(st.scalar ? 1 : n, uint32_t(gen())));
      }
      for (size_t s = 0; s < num_steps; ++s) steps[s].leaf = leaves[s].data();
      const std::vector<T> first = values<T>(n, uint32_t(gen()));
      // Reference: the kernels, one step at a time.
      std::vector<T> want = first, operand(n);
      for (const ChainStep& st : steps) {
        if (!st.binary) {
          unary(UnaryOp(st.op), dtype, want.data(), want.data(), n);
          continue;
        }
        const T* leaf = static_cast<const T*>(st.leaf);
        for (size_t i = 0; i < n; ++i) operand[i] = st.scalar ? leaf[0] : leaf[i];
        std::vector<T> out(n);
        if (st.leaf_first) binary(BinaryOp(st.op), dtype, operand.data(), want.data(), out.data(), n);
        else binary(BinaryOp(st.op), dtype, want.data(), operand.data(), out.data(), n);
        want = out;
      }
      std::vector<T> got = first;  // in place
      chain(dtype, got.data(), false, steps, got.data(), n);
      auto streamed = Buffer::allocate(n * sizeof(T));  // 64-byte aligned: non-temporal stores
      chain(dtype, first.data(), false, steps, streamed->data(), n, /*stream=*/true);
      stream_fence();
      const T* s = static_cast<const T*>(streamed->data());
      for (size_t i = 0; i < n; ++i) {
        auto same = [](T a, T b) { return std::memcmp(&a, &b, sizeof(T)) == 0 || (std::isnan(a) && std::isnan(b)); };
        ASSERT_TRUE(same(got[i], want[i]) && same(s[i], want[i]))
            << "n " << n << " trial " << trial << " element " << i << ": got " << got[i] << " / " << s[i] << ", want "
            << want[i];
      }
    }
  }
}

TEST(FusedKernels, ChainsMatchTheElementwiseKernels) {
  check_random_chains<float>(DType::f32);
  check_random_chains<double>(DType::f64);
}

TEST(FusedKernels, ScalarFirstOperand) {
  const float two = 2.0f;
  std::vector<float> x = {1, 2, 4, -8, 0.5f};
  ChainStep sub{true, uint8_t(BinaryOp::sub), false, false, x.data()};
  std::vector<float> y(x.size());
  chain(DType::f32, &two, true, {&sub, 1}, y.data(), y.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], 2.0f - x[i]);
}

TEST(FusedKernels, SupportedOperations) {
  EXPECT_TRUE(chain_supports(true, uint8_t(BinaryOp::max), DType::f64));
  EXPECT_TRUE(chain_supports(false, uint8_t(UnaryOp::abs), DType::f32));
  EXPECT_FALSE(chain_supports(true, uint8_t(BinaryOp::pow), DType::f32));
  EXPECT_FALSE(chain_supports(false, uint8_t(UnaryOp::exp), DType::f32));
  EXPECT_FALSE(chain_supports(true, uint8_t(BinaryOp::add), DType::bf16));
  EXPECT_FALSE(chain_supports(true, uint8_t(BinaryOp::add), DType::i32));
}

TEST(FusedKernels, StreamCopy) {
  auto src = Buffer::allocate(5000), dst = Buffer::allocate(5000);
  auto* s = static_cast<unsigned char*>(src->data());
  for (size_t i = 0; i < 5000; ++i) s[i] = static_cast<unsigned char>(i * 7);
  for (size_t bytes : {size_t(0), size_t(1), size_t(63), size_t(64), size_t(100), size_t(4999)}) {
    std::memset(dst->data(), 0, 5000);
    stream_copy(dst->data(), src->data(), bytes);
    stream_fence();
    EXPECT_EQ(std::memcmp(dst->data(), src->data(), bytes), 0) << bytes;
    EXPECT_EQ(static_cast<unsigned char*>(dst->data())[bytes], 0) << bytes;
  }
}

}  // namespace
}  // namespace pax::cpu
