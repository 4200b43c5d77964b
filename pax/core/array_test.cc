// Array creation, read-back, printing and the caching allocator.
#include "pax/core/array.h"

#include <gtest/gtest.h>

#include <sstream>

#include "pax/testing/testing.h"

namespace pax {
namespace {

std::string str(const Array& a) {
  std::ostringstream os;
  os << a;
  return os.str();
}

TEST(Array, CreationAndReadBack) {
  Array a = array<float>({1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(a.shape(), (Shape{2, 2}));
  EXPECT_EQ(a.dtype(), DType::f32);
  EXPECT_EQ(a.ndim(), 2);
  EXPECT_EQ(a.size(), 4);
  EXPECT_EQ(a.dim(-1), 2);
  EXPECT_EQ(a.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(a.to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3, 4}));
  EXPECT_EQ(scalar(2.5).item<double>(), 2.5);
  EXPECT_EQ(scalar(7, DType::i32).item<int64_t>(), 7);
  EXPECT_EQ(scalar<int64_t>(5).dtype(), DType::i64);
  Array b = array(std::vector<bf16>{bf16(1.5f)});
  EXPECT_EQ(b.dtype(), DType::bf16);
  EXPECT_EQ(b.item<float>(), 1.5f);
}

TEST(Array, ErrorsNameTheProblem) {
  EXPECT_PAX_ERROR(array<float>({1, 2, 3}, {2, 2}), "3 values do not fill shape (2, 2)");
  EXPECT_PAX_ERROR(array<float>({1, 2}).item<float>(), "needs exactly one element");
  EXPECT_PAX_ERROR(Array().shape(), "empty Array");
  EXPECT_PAX_ERROR(array<float>({1}).dim(3), "axis 3 is out of range");
}

TEST(Array, ZeroSizeAndScalar) {
  Array z = from_host(nullptr, Shape{0, 3}, DType::f32);
  EXPECT_EQ(z.size(), 0);
  EXPECT_TRUE(z.to_vector<float>().empty());
  Array s = scalar(3.0f);
  EXPECT_EQ(s.ndim(), 0);
  EXPECT_EQ(s.size(), 1);
}

TEST(Array, PrintsLikeJax) {
  EXPECT_EQ(str(array<float>({1, 2, 3, 4}, {2, 2})), "Array([[1., 2.],\n       [3., 4.]], dtype=float32)");
  EXPECT_EQ(str(array<int32_t>({1, -20, 3})), "Array([  1, -20,   3], dtype=int32)");
  EXPECT_EQ(str(array<bool>({true, false})), "Array([ True, False], dtype=bool)");
  EXPECT_EQ(str(scalar(0.5f)), "Array(0.5, dtype=float32)");
  EXPECT_EQ(str(array<float>({0.25f, 1.5f})), "Array([0.25, 1.5 ], dtype=float32)");
  EXPECT_EQ(str(from_host(nullptr, Shape{0, 2}, DType::f32)), "Array([], dtype=float32, shape=(0, 2))");
  std::vector<float> many(2000, 1.0f);
  std::string s = str(array(many));
  EXPECT_NE(s.find("..."), std::string::npos);
  EXPECT_LT(s.size(), 200u);
  EXPECT_NE(str(array<float>({1e-8f, 1.0f})).find("e-08"), std::string::npos);
}

TEST(Buffer, AlignedAndReused) {
  HostAllocatorStats before = host_allocator_stats();
  const void* first;
  {
    auto b = Buffer::allocate(1000);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(b->data()) % 64, 0u);
    first = b->data();
  }
  auto again = Buffer::allocate(900);  // same size class: the cached block comes back
  EXPECT_EQ(again->data(), first);
  HostAllocatorStats after = host_allocator_stats();
  EXPECT_GT(after.cache_hits, before.cache_hits);
  auto big = Buffer::allocate(size_t(5) << 20);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(big->data()) % 64, 0u);
  EXPECT_NE(Buffer::allocate(0)->data(), nullptr);
}

}  // namespace
}  // namespace pax
