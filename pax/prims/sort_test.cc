// sort and top_k against hand-computed orders and a slow std::stable_sort
// reference using the total order (-0.0 == 0.0, NaN above +inf).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "pax/interp/interpreter.h"
#include "pax/ops/lax.h"
#include "pax/testing/testing.h"

namespace pax {
namespace {

using namespace testing;  // all_close, random_values, kNaN, kInf

Array make(const std::vector<double>& v, const Shape& shape, DType dtype) {
  std::vector<unsigned char> bytes(v.size() * itemsize(dtype));
  convert_host(DType::f64, v.data(), dtype, bytes.data(), v.size());
  return from_host(bytes.data(), shape, dtype);
}

// Random values of `dtype` with many repeats (rounded to a coarse grid) and,
// for floats, some NaN, infinities and signed zeros.
Array random_keys(const Shape& s, DType dtype, uint32_t seed) {
  std::vector<double> v = random_values(s.numel(), seed, -40, 40);
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = std::round(v[i]);
    if (is_floating(dtype)) {
      if (i % 17 == 3) v[i] = kNaN;
      if (i % 29 == 5) v[i] = i % 2 ? kInf : -kInf;
      if (i % 13 == 7) v[i] = i % 2 ? 0.0 : -0.0;
      if (i % 11 == 1) v[i] += 0.25;
    } else if (dtype == DType::bool_) {
      v[i] = v[i] > 0;
    } else if (is_unsigned(dtype)) {
      v[i] = std::fabs(v[i]) * (dtype == DType::u32 ? 1e8 : 5);
    } else if (dtype == DType::i64 && i % 19 == 2) {
      v[i] = i % 2 ? -9.2e18 : 9.2e18;
    }
  }
  return make(v, s, dtype);
}

// Total order on values read back as f64.
bool less_total(double a, double b) {
  if (std::isnan(a)) return false;
  return std::isnan(b) || a < b;
}

// Row r of an array of `shape` along `dim`: the flat offsets of its elements.
std::vector<int64_t> row_offsets(const Shape& shape, int64_t dim, int64_t r) {
  int64_t inner = 1;
  for (int64_t d = dim + 1; d < shape.rank(); ++d) inner *= shape[d];
  const int64_t n = shape[dim];
  std::vector<int64_t> off(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) off[size_t(i)] = (r / inner) * n * inner + r % inner + i * inner;
  return off;
}

// Expected outputs of lax::sort by stable-sorting each row.
std::vector<std::vector<double>> ref_sort(const std::vector<Array>& ops, int64_t dim, int64_t num_keys) {
  std::vector<std::vector<double>> in, out;
  for (const Array& a : ops) in.push_back(a.to_vector<double>());
  out = in;
  const Shape& shape = ops[0].shape();
  const int64_t n = shape[dim];
  const int64_t rows = n == 0 ? 0 : shape.numel() / n;
  for (int64_t r = 0; r < rows; ++r) {
    const std::vector<int64_t> off = row_offsets(shape, dim, r);
    std::vector<int64_t> perm(static_cast<size_t>(n));
    std::iota(perm.begin(), perm.end(), 0);
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) {
      for (int64_t k = 0; k < num_keys; ++k) {
        const double x = in[size_t(k)][size_t(off[size_t(a)])], y = in[size_t(k)][size_t(off[size_t(b)])];
        if (less_total(x, y)) return true;
        if (less_total(y, x)) return false;
      }
      return false;
    });
    for (size_t op = 0; op < ops.size(); ++op) {
      for (int64_t i = 0; i < n; ++i) out[op][size_t(off[size_t(i)])] = in[op][size_t(off[size_t(perm[size_t(i)])])];
    }
  }
  return out;
}

void expect_sorted_like_reference(const std::vector<Array>& ops, int64_t dim, int64_t num_keys) {
  std::vector<Array> got = lax::sort(ops, dim, true, num_keys);
  std::vector<std::vector<double>> want = ref_sort(ops, dim, num_keys);
  ASSERT_EQ(got.size(), ops.size());
  for (size_t i = 0; i < ops.size(); ++i) {
    EXPECT_EQ(got[i].aval(), ops[i].aval());
    EXPECT_TRUE(all_close(got[i], want[i], 0, 0))
        << "operand " << i << " of " << ops[0].aval().str() << " dim " << dim << " num_keys " << num_keys;
  }
}

Array iota_like(const Shape& s, DType dtype = DType::i32) {
  std::vector<double> v(size_t(s.numel()));
  std::iota(v.begin(), v.end(), 0.0);
  return make(v, s, dtype);
}

// ---------------------------------------------------------------------------
// sort

TEST(Sort, FloatTotalOrderAndStability) {
  const std::vector<double> v{3, kNaN, -0.0, -kInf, 0.0, kInf, -1, kNaN, -0.0};
  for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    Array x = make(v, {9}, dt);
    std::vector<Array> out = lax::sort({x, iota_like({9})}, -1, true, 1);
    EXPECT_TRUE(all_close(out[0], {-kInf, -1, 0, 0, 0, 3, kInf, kNaN, kNaN}, 0, 0)) << dtype_name(dt);
    // The three zeros keep their input order (-0.0, 0.0, -0.0), as do the NaNs.
    EXPECT_EQ(out[1].to_vector<int32_t>(), (std::vector<int32_t>{3, 6, 2, 4, 8, 0, 5, 1, 7})) << dtype_name(dt);
    std::vector<double> got = out[0].to_vector<double>();
    EXPECT_TRUE(std::signbit(got[2]) && !std::signbit(got[3]) && std::signbit(got[4])) << dtype_name(dt);
  }
}

TEST(Sort, SingleOperandAndPayload) {
  Array x = array<int32_t>({5, -2, 7, -2, 0});
  EXPECT_EQ(lax::sort({x})[0].to_vector<int32_t>(), (std::vector<int32_t>{-2, -2, 0, 5, 7}));
  std::vector<Array> kv = lax::sort({x, array<float>({0.5f, 1.5f, 2.5f, 3.5f, 4.5f})});
  EXPECT_EQ(kv[0].to_vector<int32_t>(), (std::vector<int32_t>{-2, -2, 0, 5, 7}));
  EXPECT_TRUE(all_close(kv[1], {1.5, 3.5, 4.5, 0.5, 2.5}, 0, 0));
}

TEST(Sort, TwoKeysThreeOperands) {
  Array k1 = array<int32_t>({1, 0, 1, 0, 1, 0});
  Array k2 = array<float>({5, 7, 2, 7, 2, -1});
  Array payload = array<int64_t>({10, 11, 12, 13, 14, 15});
  std::vector<Array> out = lax::sort({k1, k2, payload}, 0, true, 2);
  EXPECT_EQ(out[0].to_vector<int32_t>(), (std::vector<int32_t>{0, 0, 0, 1, 1, 1}));
  EXPECT_TRUE(all_close(out[1], {-1, 7, 7, 2, 2, 5}, 0, 0));
  EXPECT_EQ(out[2].to_vector<int64_t>(), (std::vector<int64_t>{15, 11, 13, 12, 14, 10}));
  // num_keys = 1 ignores the second key: ties in k1 keep their input order.
  std::vector<Array> one = lax::sort({k1, k2, payload}, 0, false, 1);
  EXPECT_EQ(one[2].to_vector<int64_t>(), (std::vector<int64_t>{11, 13, 15, 10, 12, 14}));
}

TEST(Sort, EveryDTypeBothAxesAndRadixRows) {
  const DType dtypes[] = {DType::bool_, DType::u8,  DType::u32, DType::i32, DType::i64,
                          DType::bf16,  DType::f16, DType::f32, DType::f64};
  uint32_t seed = 100;
  for (DType dt : dtypes) {
    // Short rows (comparison sort) and long rows (radix sort), contiguous and strided.
    for (const Shape& s : {Shape{5, 37}, Shape{3, 1500}, Shape{1500, 3}, Shape{3, 40, 4}}) {
      for (int64_t dim = 0; dim < s.rank(); ++dim) {
        Array keys = random_keys(s, dt, seed++);
        expect_sorted_like_reference({keys, iota_like(s)}, dim, 1);
      }
    }
  }
}

TEST(Sort, TwoKeysLongRows) {
  const Shape s{2, 2000};
  Array k1 = random_keys(s, DType::u8, 7);
  Array k2 = random_keys(s, DType::bf16, 8);
  Array k3 = random_keys(s, DType::f64, 9);
  expect_sorted_like_reference({k1, k2, k3, iota_like(s)}, 1, 2);
  expect_sorted_like_reference({k2, k3, iota_like(s)}, 1, 2);
  expect_sorted_like_reference({k1, k2, k3, iota_like(s, DType::f32)}, 1, 3);
  expect_sorted_like_reference({k1, k2, iota_like(s)}, 0, 2);
}

TEST(Sort, ZeroSize) {
  for (const Shape& s : {Shape{0, 4}, Shape{4, 0}}) {
    std::vector<Array> out = lax::sort({make({}, s, DType::f32), make({}, s, DType::i32)}, 1, true, 2);
    EXPECT_EQ(out[0].shape(), s);
    EXPECT_EQ(out[1].dtype(), DType::i32);
  }
}

TEST(Sort, Errors) {
  Array x = array<float>({1, 2, 3});
  EXPECT_PAX_ERROR(lax::sort({scalar(1.0f)}, 0), "sort: operands (f32[]): cannot sort a 0-d array");
  EXPECT_PAX_ERROR(lax::sort({x, array<float>({1, 2})}), "all operands must have the same shape; f32[2] differs");
  EXPECT_PAX_ERROR(lax::sort({x}, 1), "dimension 1 is out of range [0, 1)");
  EXPECT_PAX_ERROR(lax::sort({x}, -2), "dimension -1 is out of range [0, 1)");
  EXPECT_PAX_ERROR(lax::sort({x}, 0, true, 0), "num_keys is 0; it must lie in [1, 1]");
  EXPECT_PAX_ERROR(lax::sort({x, x}, 0, true, 3), "num_keys is 3; it must lie in [1, 2]");
  EXPECT_PAX_ERROR(bind(Prim::sort, std::span<const Array>{}, Params{}), "sort: needs at least one operand");
  Params not_bool{{"dimension", int64_t(0)}, {"is_stable", int64_t(1)}, {"num_keys", int64_t(1)}};
  EXPECT_PAX_ERROR(bind(Prim::sort, std::vector<Array>{x}, not_bool), "is_stable");
}

// ---------------------------------------------------------------------------
// top_k

// Expected (values, indices) by stable-sorting each row in descending order.
std::pair<std::vector<double>, std::vector<double>> ref_top_k(const Array& x, int64_t k) {
  const std::vector<double> v = x.to_vector<double>();
  const int64_t n = x.dim(-1);
  std::vector<double> vals, idx;
  for (int64_t r = 0; n > 0 && r < x.size() / n; ++r) {
    std::vector<int64_t> perm(static_cast<size_t>(n));
    std::iota(perm.begin(), perm.end(), 0);
    std::stable_sort(perm.begin(), perm.end(),
                     [&](int64_t a, int64_t b) { return less_total(v[size_t(r * n + b)], v[size_t(r * n + a)]); });
    for (int64_t j = 0; j < k; ++j) {
      vals.push_back(v[size_t(r * n + perm[size_t(j)])]);
      idx.push_back(double(perm[size_t(j)]));
    }
  }
  return {vals, idx};
}

TEST(TopK, NaNIsLargestAndTiesKeepLowerIndex) {
  Array x = array<float>({1, 3, 2, 3, float(kNaN), -float(kInf)});
  auto [v3, i3] = lax::top_k(x, 3);
  EXPECT_TRUE(all_close(v3, {kNaN, 3, 3}, 0, 0));
  EXPECT_EQ(i3.dtype(), DType::i32);
  EXPECT_EQ(i3.to_vector<int32_t>(), (std::vector<int32_t>{4, 1, 3}));
  auto [v6, i6] = lax::top_k(x, 6);
  EXPECT_TRUE(all_close(v6, {kNaN, 3, 3, 2, 1, -kInf}, 0, 0));
  EXPECT_EQ(i6.to_vector<int32_t>(), (std::vector<int32_t>{4, 1, 3, 2, 0, 5}));
  // -0.0 and 0.0 tie.
  auto [vz, iz] = lax::top_k(array<float>({0.0f, -0.0f, 0.0f, -1.0f}), 2);
  EXPECT_EQ(iz.to_vector<int32_t>(), (std::vector<int32_t>{0, 1}));
  auto [ve, ie] = lax::top_k(array<int32_t>({4, 4, 4, 4, 4, 4, 4, 4, 4, 4}), 3);
  EXPECT_EQ(ie.to_vector<int32_t>(), (std::vector<int32_t>{0, 1, 2}));
}

TEST(TopK, MatchesSortReference) {
  uint32_t seed = 200;
  for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::i32, DType::u8, DType::i64}) {
    for (const Shape& s : {Shape{7, 1000}, Shape{2, 3, 50}, Shape{40}}) {
      Array x = random_keys(s, dt, seed++);
      const int64_t n = s[s.rank() - 1];
      for (int64_t k : {int64_t(0), int64_t(1), int64_t(5), n / 8, n / 8 + 1, n / 2, n}) {
        auto [values, indices] = lax::top_k(x, k);
        std::vector<int64_t> want_shape = s.dims();
        want_shape.back() = k;
        EXPECT_EQ(values.shape(), Shape(want_shape));
        EXPECT_EQ(values.dtype(), dt);
        if (k == 0) continue;
        auto [want_v, want_i] = ref_top_k(x, k);
        EXPECT_TRUE(all_close(values, want_v, 0, 0)) << dtype_name(dt) << " " << s << " k=" << k;
        EXPECT_TRUE(all_close(indices, want_i, 0, 0)) << dtype_name(dt) << " " << s << " k=" << k;
      }
    }
  }
}

TEST(TopK, ZeroSize) {
  auto [v, i] = lax::top_k(make({}, {0, 5}, DType::f32), 2);
  EXPECT_EQ(v.shape(), (Shape{0, 2}));
  EXPECT_EQ(i.shape(), (Shape{0, 2}));
  auto [v0, i0] = lax::top_k(make({}, {3, 0}, DType::bf16), 0);
  EXPECT_EQ(v0.shape(), (Shape{3, 0}));
}

TEST(TopK, Errors) {
  EXPECT_PAX_ERROR(lax::top_k(scalar(1.0f), 1), "top_k: operand f32[] is 0-d");
  Array x = array<float>({1, 2, 3});
  EXPECT_PAX_ERROR(lax::top_k(x, -1), "top_k: k = -1 for operand f32[3]; k must lie in [0, 3]");
  EXPECT_PAX_ERROR(lax::top_k(x, 4), "k must lie in [0, 3]");
}

}  // namespace
}  // namespace pax
