// Reduction primitives against slow f64 / integer reference loops: every op
// over many shapes and axis sets, bf16 / f16 / integer / bool inputs, NaN,
// wrapping, empty reductions, error paths, and bit-identity across thread
// counts.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "pax/ops/lax.h"
#include "pax/testing/testing.h"

namespace pax {
namespace {

using namespace testing;  // all_close, random_array, kNaN, kInf

enum class Op { sum, prod, max, min, and_, or_ };

Array cast(const Array& x, DType dtype) { return lax::convert_element_type(x, dtype); }

template <class T>
Array empty(const Shape& s) {
  return array(std::vector<T>{}, s);
}

Array bool_array(const std::vector<uint8_t>& v, const Shape& s) { return from_host(v.data(), s, DType::bool_); }

// Booleans that are true with probability p.
Array random_bools(const Shape& s, uint32_t seed, double p) {
  const std::vector<double> r = testing::random_values(s.numel(), seed, 0, 1);
  std::vector<uint8_t> bits(r.size());
  for (size_t i = 0; i < r.size(); ++i) bits[i] = r[i] < p;
  return bool_array(bits, s);
}

Array apply(Op op, const Array& x, const Ints& axes) {
  switch (op) {
    case Op::sum: return lax::reduce_sum(x, axes);
    case Op::prod: return lax::reduce_prod(x, axes);
    case Op::max: return lax::reduce_max(x, axes);
    case Op::min: return lax::reduce_min(x, axes);
    case Op::and_: return lax::reduce_and(x, axes);
    case Op::or_: return lax::reduce_or(x, axes);
  }
  return {};
}

// For every input element, the flat index of the output element it reduces into.
std::vector<int64_t> output_index(const Shape& s, const Ints& axes, Shape* out_shape) {
  const int64_t rank = s.rank();
  std::vector<bool> reduced(size_t(rank), false);
  for (int64_t a : axes) reduced[size_t(a < 0 ? a + rank : a)] = true;
  std::vector<int64_t> out_dims, out_stride_of(size_t(rank), 0);
  for (int64_t d = 0; d < rank; ++d) {
    if (!reduced[size_t(d)]) out_dims.push_back(s[d]);
  }
  int64_t stride = 1;
  for (int64_t d = rank; d-- > 0;) {
    if (reduced[size_t(d)]) continue;
    out_stride_of[size_t(d)] = stride;
    stride *= s[d];
  }
  *out_shape = Shape(out_dims);
  std::vector<int64_t> map(size_t(s.numel()));
  std::vector<int64_t> idx(size_t(rank), 0);
  for (int64_t flat = 0; flat < s.numel(); ++flat) {
    int64_t o = 0;
    for (int64_t d = 0; d < rank; ++d) o += idx[size_t(d)] * out_stride_of[size_t(d)];
    map[size_t(flat)] = o;
    for (int64_t d = rank; d-- > 0;) {
      if (++idx[size_t(d)] < s[d]) break;
      idx[size_t(d)] = 0;
    }
  }
  return map;
}

// f64 reference for floating inputs; max / min propagate NaN.
std::vector<double> ref_float(Op op, const Array& x, const Ints& axes) {
  Shape out_shape;
  const std::vector<int64_t> map = output_index(x.shape(), axes, &out_shape);
  const double init = op == Op::sum ? 0.0 : op == Op::prod ? 1.0 : op == Op::max ? -kInf : kInf;
  std::vector<double> out(size_t(out_shape.numel()), init);
  const std::vector<double> v = x.to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i) {
    double& a = out[size_t(map[i])];
    const double b = v[i];
    if (op == Op::sum) a += b;
    else if (op == Op::prod) a *= b;
    else if (std::isnan(a) || std::isnan(b)) a = kNaN;
    else a = op == Op::max ? std::max(a, b) : std::min(a, b);
  }
  return out;
}

// Integer reference with wrapping (unsigned) arithmetic.
template <class T>
std::vector<T> ref_int(Op op, const Array& x, const Ints& axes) {
  using U = std::make_unsigned_t<T>;
  Shape out_shape;
  const std::vector<int64_t> map = output_index(x.shape(), axes, &out_shape);
  using L = std::numeric_limits<T>;
  const T init = op == Op::sum || op == Op::or_ ? T(0)
                 : op == Op::prod               ? T(1)
                 : op == Op::and_               ? T(~T(0))
                 : op == Op::max                ? L::lowest()
                                                : L::max();
  std::vector<T> out(size_t(out_shape.numel()), init);
  const std::vector<T> v = x.to_vector<T>();
  for (size_t i = 0; i < v.size(); ++i) {
    T& a = out[size_t(map[i])];
    const T b = v[i];
    switch (op) {
      case Op::sum: a = T(U(U(a) + U(b))); break;
      case Op::prod: a = T(U(U(a) * U(b))); break;
      case Op::max: a = std::max(a, b); break;
      case Op::min: a = std::min(a, b); break;
      case Op::and_: a = T(a & b); break;
      case Op::or_: a = T(a | b); break;
    }
  }
  return out;
}

struct Case {
  Shape shape;
  Ints axes;
};

// Axis sets: single first / middle / last, contiguous and non-contiguous
// groups, all, none, negative, with unit dimensions, 0-d.
std::vector<Case> small_cases() {
  return {
      {{}, {}},
      {{7}, {0}},
      {{7}, {}},
      {{5, 6}, {0}},
      {{5, 6}, {1}},
      {{5, 6}, {-1}},
      {{5, 6}, {0, 1}},
      {{5, 6}, {}},
      {{3, 4, 5}, {0}},
      {{3, 4, 5}, {1}},
      {{3, 4, 5}, {2}},
      {{3, 4, 5}, {0, 1}},
      {{3, 4, 5}, {1, 2}},
      {{3, 4, 5}, {0, 2}},
      {{3, 4, 5}, {2, 0}},
      {{3, 4, 5}, {0, 1, 2}},
      {{2, 3, 4, 5}, {1, 3}},
      {{2, 3, 4, 5}, {0, 2}},
      {{2, 3, 4, 5}, {0, 3}},
      {{2, 3, 4, 5}, {-3, -2}},
      {{1, 5, 1, 3}, {0, 2}},
      {{1, 5, 1, 3}, {1, 3}},
      {{4, 1, 6}, {1}},
      {{6, 40}, {1}},
      {{2, 3, 2, 3, 2}, {0, 2, 4}},
      {{2, 3, 2, 3, 2}, {1, 3}},
      {{3, 1, 4, 2, 5}, {0, 2, 4}},
  };
}

// Larger arrays: long rows (split into blocks), long columns (split into
// row blocks), wide columns (split into column chunks), mixed layouts.
std::vector<Case> large_cases() {
  return {
      {{37, 1000}, {1}},
      {{37, 1000}, {0}},
      {{3, 70001}, {1}},
      {{70001}, {0}},
      {{2100, 33}, {0}},
      {{5, 3000, 7}, {1}},
      {{3, 1100, 2}, {0, 2}},
      {{2, 2500}, {0}},
      {{40, 9, 50}, {0, 2}},
      {{500, 3, 8}, {1}},
      {{8, 16, 20, 20}, {0, 2, 3}},
      {{6, 50, 7, 40}, {0, 2}},
  };
}

void check_float(DType dtype, Op op, const Case& c, uint32_t seed, double rtol, double atol_per_elem) {
  SCOPED_TRACE(::testing::Message() << dtype_name(dtype) << " op " << int(op) << " shape " << c.shape << " axes "
                                    << ints_str(c.axes));
  const bool prod = op == Op::prod;
  Array x = random_array(c.shape, dtype, seed, prod ? 0.999 : -1.0, prod ? 1.001 : 1.0);
  Array y = apply(op, x, c.axes);
  Shape out_shape;
  output_index(c.shape, c.axes, &out_shape);
  ASSERT_EQ(y.shape(), out_shape);
  ASSERT_EQ(y.dtype(), dtype);
  const int64_t n = out_shape.numel() ? c.shape.numel() / out_shape.numel() : 0;
  const bool exact = op == Op::max || op == Op::min;
  EXPECT_TRUE(all_close(y, ref_float(op, x, c.axes), exact ? 0 : rtol, exact ? 0 : atol_per_elem * double(n)));
}

TEST(ReducePrims, FloatOpsVsReference) {
  const Op ops[] = {Op::sum, Op::prod, Op::max, Op::min};
  uint32_t seed = 1;
  for (const Case& c : small_cases()) {
    for (Op op : ops) {
      check_float(DType::f32, op, c, seed++, 1e-5, 1e-6);
      check_float(DType::f64, op, c, seed++, 1e-12, 1e-14);
    }
  }
  for (const Case& c : large_cases()) {
    for (Op op : ops) {
      check_float(DType::f32, op, c, seed++, 1e-5, 1e-6);
      check_float(DType::f64, op, c, seed++, 1e-12, 1e-14);
    }
  }
}

// bf16 / f16 accumulate in f32 and round once: within one rounding of the
// exact result of the rounded inputs.
TEST(ReducePrims, HalfPrecisionVsReference) {
  const Op ops[] = {Op::sum, Op::prod, Op::max, Op::min};
  std::vector<Case> cases = small_cases();
  for (const Case& c : large_cases()) cases.push_back(c);
  cases.push_back({{3, 9000}, {1}});  // rows longer than the staging block
  cases.push_back({{2, 5000, 3}, {1}});
  uint32_t seed = 100;
  for (const Case& c : cases) {
    for (Op op : ops) {
      check_float(DType::bf16, op, c, seed++, 1.0 / 256 + 1e-5, 1e-6);
      check_float(DType::f16, op, c, seed++, 1.0 / 2048 + 1e-5, 1e-6);
    }
  }
}

template <class T>
void check_int(Op op, const Case& c, uint32_t seed, double lo, double hi) {
  SCOPED_TRACE(::testing::Message() << dtype_name(dtype_v<T>) << " op " << int(op) << " shape " << c.shape << " axes "
                                    << ints_str(c.axes));
  Array x = random_array(c.shape, dtype_v<T>, seed, lo, hi);
  Array y = apply(op, x, c.axes);
  ASSERT_EQ(y.dtype(), dtype_v<T>);
  EXPECT_EQ(y.to_vector<T>(), ref_int<T>(op, x, c.axes));
}

template <class T>
void check_int_all(double lo, double hi) {
  const Op ops[] = {Op::sum, Op::prod, Op::max, Op::min, Op::and_, Op::or_};
  std::vector<Case> cases = small_cases();
  for (const Case& c : large_cases()) cases.push_back(c);
  uint32_t seed = 1000;
  for (const Case& c : cases) {
    for (Op op : ops) check_int<T>(op, c, seed++, lo, hi);
  }
}

TEST(ReducePrims, IntegerOpsVsReference) {
  check_int_all<int32_t>(-1e6, 1e6);
  check_int_all<int64_t>(-1e12, 1e12);
  check_int_all<uint32_t>(0, 4e9);
  check_int_all<uint8_t>(0, 256);
}

TEST(ReducePrims, IntegerWraps) {
  Array a = array<int32_t>({std::numeric_limits<int32_t>::max(), 1});
  EXPECT_EQ(lax::reduce_sum(a, {0}).item<int32_t>(), std::numeric_limits<int32_t>::min());
  EXPECT_EQ(lax::reduce_sum(array<uint8_t>({200, 100}), {0}).item<uint8_t>(), 44);
  EXPECT_EQ(lax::reduce_prod(array<uint8_t>({16, 16, 3}), {0}).item<uint8_t>(), 0);
  Array big = array<int64_t>({int64_t(1) << 62, 4, 3});
  EXPECT_EQ(lax::reduce_prod(big, {0}).item<int64_t>(), 0);
  EXPECT_EQ(lax::reduce_prod(array<int32_t>({65536, 65537}), {0}).item<int32_t>(), 65536);
  EXPECT_EQ(lax::reduce_and(array<int32_t>({-1, 6, 7}), {0}).item<int32_t>(), 6);
  EXPECT_EQ(lax::reduce_or(array<uint32_t>({1, 4, 0x80000000u}), {0}).item<uint32_t>(), 0x80000005u);
}

TEST(ReducePrims, BoolOpsVsReference) {
  std::vector<Case> cases = small_cases();
  for (const Case& c : large_cases()) cases.push_back(c);
  uint32_t seed = 5000;
  for (const Case& c : cases) {
    // Mostly-true and mostly-false inputs so that every result occurs.
    for (double p_true : {0.1, 0.5, 0.995}) {
      SCOPED_TRACE(::testing::Message() << "shape " << c.shape << " axes " << ints_str(c.axes) << " p " << p_true);
      Array x = random_bools(c.shape, seed++, p_true);
      Array as_u8 = cast(x, DType::u8);
      const std::vector<uint8_t> any = ref_int<uint8_t>(Op::max, as_u8, c.axes);
      const std::vector<uint8_t> all = ref_int<uint8_t>(Op::min, as_u8, c.axes);
      for (Op op : {Op::max, Op::or_}) {
        Array y = apply(op, x, c.axes);
        ASSERT_EQ(y.dtype(), DType::bool_);
        EXPECT_EQ(y.to_vector<uint8_t>(), any);
      }
      for (Op op : {Op::min, Op::and_}) EXPECT_EQ(apply(op, x, c.axes).to_vector<uint8_t>(), all);
    }
  }
}

TEST(ReducePrims, NaNPropagates) {
  // Rows (short, vector, long), columns, full reductions; NaN at several places.
  for (const Shape& s : {Shape{4, 5}, Shape{4, 100}, Shape{2, 70001}, Shape{2100, 3}}) {
    for (DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      for (int64_t pos : {int64_t(0), s.numel() / 2 + 1, s.numel() - 1}) {
        SCOPED_TRACE(::testing::Message() << s << " " << dtype_name(dtype) << " pos " << pos);
        std::vector<double> v = testing::random_values(s.numel(), uint32_t(pos) + 7);
        v[size_t(pos)] = kNaN;
        Array x = cast(array(v, s), dtype);
        for (Op op : {Op::max, Op::min, Op::sum}) {
          for (const Ints& axes : {Ints{0}, Ints{1}, Ints{0, 1}}) {
            EXPECT_TRUE(all_close(apply(op, x, axes), ref_float(op, x, axes), 1e-2, 1e-2 * double(s.numel())));
          }
        }
      }
    }
  }
  // max / min see -inf / +inf as ordinary values.
  Array inf = array<float>({1, float(kInf), -float(kInf)});
  EXPECT_EQ(lax::reduce_max(inf, {0}).item<float>(), float(kInf));
  EXPECT_EQ(lax::reduce_min(inf, {0}).item<float>(), -float(kInf));
  EXPECT_TRUE(std::isnan(lax::reduce_sum(inf, {0}).item<float>()));
}

TEST(ReducePrims, EmptyReductionsGiveIdentity) {
  Array f = empty<float>({3, 0});
  EXPECT_TRUE(all_close(lax::reduce_sum(f, {1}), {0, 0, 0}));
  EXPECT_TRUE(all_close(lax::reduce_prod(f, {1}), {1, 1, 1}));
  EXPECT_TRUE(all_close(lax::reduce_max(f, {1}), {-kInf, -kInf, -kInf}));
  EXPECT_TRUE(all_close(lax::reduce_min(f, {-1}), {kInf, kInf, kInf}));
  EXPECT_EQ(lax::reduce_sum(f, {0}).shape(), (Shape{0}));
  EXPECT_EQ(lax::reduce_sum(f, {0, 1}).item<float>(), 0.0f);

  Array h = cast(empty<float>({0, 4}), DType::bf16);
  Array hm = lax::reduce_max(h, {0});
  EXPECT_EQ(hm.dtype(), DType::bf16);
  EXPECT_TRUE(all_close(hm, {-kInf, -kInf, -kInf, -kInf}));
  EXPECT_TRUE(all_close(lax::reduce_min(cast(empty<float>({0, 2}), DType::f16), {0}), {kInf, kInf}));

  Array i = empty<int32_t>({2, 0, 3});
  using L = std::numeric_limits<int32_t>;
  EXPECT_EQ(lax::reduce_max(i, {1}).to_vector<int32_t>(), std::vector<int32_t>(6, L::min()));
  EXPECT_EQ(lax::reduce_min(i, {1}).to_vector<int32_t>(), std::vector<int32_t>(6, L::max()));
  EXPECT_EQ(lax::reduce_and(i, {1}).to_vector<int32_t>(), std::vector<int32_t>(6, -1));
  EXPECT_EQ(lax::reduce_or(i, {1}).to_vector<int32_t>(), std::vector<int32_t>(6, 0));
  EXPECT_EQ(lax::reduce_prod(i, {0, 1}).to_vector<int32_t>(), std::vector<int32_t>(3, 1));
  EXPECT_EQ(lax::reduce_max(empty<uint8_t>({0}), {0}).item<uint8_t>(), 0);
  EXPECT_EQ(lax::reduce_min(empty<uint32_t>({0}), {0}).item<uint32_t>(), 0xffffffffu);
  EXPECT_EQ(lax::reduce_and(empty<uint8_t>({0}), {0}).item<uint8_t>(), 255);

  Array b = bool_array({}, Shape{2, 0});
  EXPECT_EQ(lax::reduce_and(b, {1}).to_vector<uint8_t>(), (std::vector<uint8_t>{1, 1}));
  EXPECT_EQ(lax::reduce_min(b, {1}).to_vector<uint8_t>(), (std::vector<uint8_t>{1, 1}));
  EXPECT_EQ(lax::reduce_or(b, {1}).to_vector<uint8_t>(), (std::vector<uint8_t>{0, 0}));
  EXPECT_EQ(lax::reduce_max(b, {1}).to_vector<uint8_t>(), (std::vector<uint8_t>{0, 0}));
}

TEST(ReducePrims, ScalarsAndWeakTypes) {
  Array s = scalar(2.5, DType::f32, /*weak_type=*/true);
  for (Op op : {Op::sum, Op::prod, Op::max, Op::min}) {
    Array y = apply(op, s, {});
    EXPECT_EQ(y.shape(), Shape{});
    EXPECT_TRUE(y.weak_type());
    EXPECT_EQ(y.item<float>(), 2.5f);
  }
  EXPECT_FALSE(lax::reduce_sum(array<float>({1, 2}), {0}).weak_type());
  EXPECT_EQ(lax::reduce_and(scalar<int32_t>(6), {}).item<int32_t>(), 6);
  // Reducing only unit axes keeps the values (and the sign of zero).
  Array z = array<float>({-0.0f, 1.0f}, Shape{1, 2});
  Array y = lax::reduce_sum(z, {0});
  EXPECT_TRUE(std::signbit(y.to_vector<float>()[0]));
}

// ---------------------------------------------------------------------------
// argmax / argmin

// (outer, n, inner) around one (possibly negative) axis.
struct Split {
  int64_t outer = 1, n = 1, inner = 1;
};

Split split_at(const Shape& s, int64_t axis) {
  if (axis < 0) axis += s.rank();
  Split p;
  for (int64_t d = 0; d < s.rank(); ++d) (d < axis ? p.outer : d == axis ? p.n : p.inner) *= s[d];
  return p;
}

// Reference: the first extreme along `axis`; NaN is the extreme (first wins).
std::vector<int64_t> ref_arg(const Array& x, int64_t axis, bool is_max) {
  const auto [outer, n, inner] = split_at(x.shape(), axis);
  const std::vector<double> v = x.to_vector<double>();
  std::vector<int64_t> out;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t i = 0; i < inner; ++i) {
      int64_t best = 0;
      for (int64_t r = 0; r < n; ++r) {
        const double a = v[size_t((o * n + r) * inner + i)];
        const double b = v[size_t((o * n + best) * inner + i)];
        if (std::isnan(b)) break;
        if (std::isnan(a) || (is_max ? a > b : a < b)) best = r;
      }
      out.push_back(best);
    }
  }
  return out;
}

void check_arg(const Array& x, int64_t axis, DType index_dtype = DType::i32) {
  for (bool is_max : {true, false}) {
    SCOPED_TRACE(::testing::Message() << x.aval().str() << " axis " << axis << (is_max ? " argmax" : " argmin"));
    Array y = is_max ? lax::argmax(x, axis, index_dtype) : lax::argmin(x, axis, index_dtype);
    EXPECT_EQ(y.dtype(), index_dtype);
    Shape want = x.shape();
    want.dims().erase(want.dims().begin() + (axis < 0 ? axis + x.ndim() : axis));
    EXPECT_EQ(y.shape(), want);
    EXPECT_EQ(y.to_vector<int64_t>(), ref_arg(x, axis, is_max));
  }
}

TEST(ReducePrims, ArgMaxArgMinVsReference) {
  const std::vector<std::pair<Shape, int64_t>> cases = {
      {{7}, 0},        {{5, 6}, 0},       {{5, 6}, 1},    {{5, 6}, -1},   {{3, 4, 5}, 0},
      {{3, 4, 5}, 1},  {{3, 4, 5}, 2},    {{1, 9, 1}, 1}, {{6, 100}, 1},  {{3, 70001}, 1},
      {{2100, 33}, 0}, {{3, 1500, 5}, 1}, {{2, 9000}, 1}, {{3000, 2}, 0}, {{4, 5000}, 0},
  };
  uint32_t seed = 9000;
  for (const auto& [shape, axis] : cases) {
    for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      check_arg(random_array(shape, dt, seed++), axis);
    }
    // Few distinct values: many ties, the first occurrence must win.
    check_arg(cast(random_array(shape, DType::i32, seed++, -3, 3), DType::bf16), axis);
    check_arg(random_array(shape, DType::i32, seed++, -3, 3), axis, DType::i64);
    check_arg(random_array(shape, DType::u8, seed++, 0, 4), axis);
    check_arg(random_array(shape, DType::i64, seed++, -1e15, 1e15), axis, DType::i64);
    check_arg(random_array(shape, DType::u32, seed++, 0, 7), axis);
    check_arg(random_bools(shape, seed++, 0.2), axis);
    check_arg(random_bools(shape, seed++, 0.9), axis);
  }
  // All equal: index 0 everywhere, across blocks too.
  check_arg(array(std::vector<float>(100000, 1.0f), Shape{100000}), 0);
  check_arg(array(std::vector<float>(6000, 1.0f), Shape{3000, 2}), 0);
}

TEST(ReducePrims, ArgMaxArgMinNaN) {
  Array x = array<float>({1, float(kNaN), 5, float(kNaN), -3});
  EXPECT_EQ(lax::argmax(x, 0).item<int32_t>(), 1);
  EXPECT_EQ(lax::argmin(x, 0).item<int32_t>(), 1);
  Array inf = array<float>({-float(kInf), 2, float(kInf), float(kInf)});
  EXPECT_EQ(lax::argmax(inf, 0).item<int32_t>(), 2);
  EXPECT_EQ(lax::argmin(inf, 0).item<int32_t>(), 0);
  for (const Shape& s : {Shape{3, 50}, Shape{2, 70001}, Shape{2100, 3}, Shape{3, 9000}}) {
    for (DType dt : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
      std::vector<double> v = testing::random_values(s.numel(), 3);
      for (int64_t k = 0; k < 6; ++k) v[size_t((k * 7919 + 11) % s.numel())] = kNaN;
      Array xs = cast(array(v, s), dt);
      check_arg(xs, 0);
      check_arg(xs, 1);
    }
  }
}

// ---------------------------------------------------------------------------
// cumsum

// Reference running sums in T accumulated in A (double, or unsigned for wrapping).
template <class T, class A>
std::vector<T> ref_cumsum(const Array& x, int64_t axis, bool reverse) {
  const Split p = split_at(x.shape(), axis);
  const std::vector<T> v = x.to_vector<T>();
  std::vector<T> out(v.size());
  for (int64_t o = 0; o < p.outer; ++o) {
    for (int64_t i = 0; i < p.inner; ++i) {
      A acc = 0;
      for (int64_t k = 0; k < p.n; ++k) {
        const size_t e = size_t((o * p.n + (reverse ? p.n - 1 - k : k)) * p.inner + i);
        acc = A(acc + A(v[e]));
        out[e] = T(acc);
      }
    }
  }
  return out;
}

std::vector<double> ref_cumsum(const Array& x, int64_t axis, bool reverse) {
  return ref_cumsum<double, double>(x, axis, reverse);
}

template <class T>
std::vector<T> ref_cumsum_int(const Array& x, int64_t axis, bool reverse) {
  return ref_cumsum<T, std::make_unsigned_t<T>>(x, axis, reverse);
}

TEST(ReducePrims, CumsumVsReference) {
  const std::vector<std::pair<Shape, int64_t>> cases = {
      {{7}, 0},          {{5, 6}, 0},    {{5, 6}, 1},    {{5, 6}, -1},      {{3, 4, 5}, 1},
      {{3, 4, 5}, 2},    {{1, 1}, 0},    {{100001}, 0},  {{3, 70001}, 1},   {{2100, 33}, 0},
      {{3, 1500, 5}, 1}, {{2, 9000}, 1}, {{3000, 2}, 0}, {{4, 3, 1100}, 1},
  };
  uint32_t seed = 20000;
  for (const auto& [shape, axis] : cases) {
    for (bool reverse : {false, true}) {
      SCOPED_TRACE(::testing::Message() << shape << " axis " << axis << " reverse " << reverse);
      const double n = double(shape[axis < 0 ? axis + shape.rank() : axis]);
      Array f = random_array(shape, DType::f32, seed++);
      Array yf = lax::cumsum(f, axis, reverse);
      EXPECT_EQ(yf.dtype(), DType::f32);
      EXPECT_EQ(yf.shape(), shape);
      EXPECT_TRUE(all_close(yf, ref_cumsum(f, axis, reverse), 1e-5, 1e-6 * n));
      Array d = random_array(shape, DType::f64, seed++);
      EXPECT_TRUE(all_close(lax::cumsum(d, axis, reverse), ref_cumsum(d, axis, reverse), 1e-12, 1e-14 * n));
      // Half precision: a running f32 sum, each output rounded once.
      Array b = random_array(shape, DType::bf16, seed++, 0, 1);
      Array yb = lax::cumsum(b, axis, reverse);
      EXPECT_EQ(yb.dtype(), DType::bf16);
      EXPECT_TRUE(all_close(yb, ref_cumsum(b, axis, reverse), 1.0 / 256 + 1e-5, 1e-6 * n));
      Array h = random_array(shape, DType::f16, seed++, 0, 0.5);
      EXPECT_TRUE(all_close(lax::cumsum(h, axis, reverse), ref_cumsum(h, axis, reverse), 1.0 / 2048 + 1e-5, 1e-6 * n));
      const int64_t ax = axis < 0 ? axis + shape.rank() : axis;
      Array i = random_array(shape, DType::i32, seed++, -2e9, 2e9);
      EXPECT_EQ(lax::cumsum(i, axis, reverse).to_vector<int32_t>(), ref_cumsum_int<int32_t>(i, ax, reverse));
      Array u = random_array(shape, DType::u8, seed++, 0, 256);
      EXPECT_EQ(lax::cumsum(u, axis, reverse).to_vector<uint8_t>(), ref_cumsum_int<uint8_t>(u, ax, reverse));
      Array l = random_array(shape, DType::i64, seed++, -1e18, 1e18);
      EXPECT_EQ(lax::cumsum(l, axis, reverse).to_vector<int64_t>(), ref_cumsum_int<int64_t>(l, ax, reverse));
    }
  }
  EXPECT_EQ(lax::cumsum(empty<float>({0, 3}), 0).shape(), (Shape{0, 3}));
  EXPECT_EQ(lax::cumsum(empty<float>({2, 0}), 0).shape(), (Shape{2, 0}));
  EXPECT_TRUE(all_close(lax::cumsum(array<float>({1, 2, 3}), 0, true), {6, 5, 3}));
  EXPECT_TRUE(all_close(lax::cumsum(array<float>({1, float(kNaN), 3}), 0), {1, kNaN, kNaN}));
}

// ---------------------------------------------------------------------------
// errors

TEST(ReducePrims, Errors) {
  Array x = array<float>({1, 2, 3, 4, 5, 6}, Shape{2, 3});
  EXPECT_PAX_ERROR(lax::reduce_sum(x, {2}), "reduce_sum of f32[2,3]: axis 2 is out of range");
  EXPECT_PAX_ERROR(lax::reduce_max(x, {-3}), "valid axes are -2 .. 1");
  EXPECT_PAX_ERROR(lax::reduce_sum(x, {1, 1}), "axis 1 is repeated");
  EXPECT_PAX_ERROR(lax::reduce_min(x, {0, -2}), "is repeated");
  EXPECT_PAX_ERROR(lax::reduce_sum(scalar(1.0f), {0}), "out of range for an array of rank 0");
  Array b = bool_array({1, 0}, Shape{2});
  EXPECT_PAX_ERROR(lax::reduce_sum(b, {0}), "reduce_sum: operand bool[2] has dtype bool; it requires a numeric dtype");
  EXPECT_PAX_ERROR(lax::reduce_prod(b, {0}), "requires a numeric dtype");
  EXPECT_PAX_ERROR(lax::reduce_and(x, {0}),
                   "reduce_and: operand f32[2,3] has dtype float32; it requires bool or an integer");
  EXPECT_PAX_ERROR(lax::reduce_or(cast(x, DType::bf16), {0}), "requires bool or an integer");
  EXPECT_PAX_ERROR(lax::argmax(x, 0, DType::f32),
                   "argmax of f32[2,3]: index_dtype must be int32 or int64, got float32");
  EXPECT_PAX_ERROR(lax::argmin(x, 0, DType::u32), "index_dtype must be int32 or int64");
  EXPECT_PAX_ERROR(lax::argmax(x, 2), "argmax of f32[2,3]: axis 2 is out of range");
  EXPECT_PAX_ERROR(lax::argmin(x, -3), "out of range");
  EXPECT_PAX_ERROR(lax::argmax(empty<float>({2, 0}), 1), "axis 1 has size 0");
  EXPECT_PAX_ERROR(lax::argmin(empty<float>({0}), 0), "argmin of f32[0]: axis 0 has size 0");
  EXPECT_PAX_ERROR(lax::argmax(scalar(1.0f), 0), "is a scalar");
  EXPECT_PAX_ERROR(lax::cumsum(b, 0), "cumsum: operand bool[2] has dtype bool; it requires a numeric dtype");
  EXPECT_PAX_ERROR(lax::cumsum(x, 2), "cumsum of f32[2,3]: axis 2 is out of range");
  EXPECT_PAX_ERROR(lax::cumsum(scalar(1.0f), 0), "is a scalar");
}

// ---------------------------------------------------------------------------
// thread-count independence

bool same_bits(const Array& a, const Array& b) {
  return a.nbytes() == b.nbytes() && testing::host_bytes(a) == testing::host_bytes(b);
}

TEST(ReducePrims, BitIdenticalAcrossThreadCounts) {
  const int saved = omp_get_max_threads();
  Array big = random_array({3 << 20}, DType::f32, 77);
  Array rows = lax::reshape(big, {3, 1 << 20});
  Array cols = lax::reshape(big, {3072, 1024});
  Array narrow = lax::reshape(big, {1 << 19, 6});
  Array hb = cast(lax::reshape(big, {1536, 2048}), DType::bf16);
  auto run = [&] {
    return std::vector<Array>{lax::reduce_sum(big, {0}),    lax::reduce_sum(rows, {1}),   lax::reduce_sum(cols, {0}),
                              lax::reduce_sum(narrow, {0}), lax::reduce_sum(hb, {0}),     lax::reduce_prod(cols, {0}),
                              lax::cumsum(big, 0),          lax::cumsum(narrow, 0, true), lax::argmax(big, 0),
                              lax::argmin(cols, 0)};
  };
  omp_set_num_threads(1);
  const std::vector<Array> one = run();
  omp_set_num_threads(2);
  const std::vector<Array> two = run();
  omp_set_num_threads(saved);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(same_bits(one[i], two[i])) << "result " << i;
  // And the large sum is accurate.
  EXPECT_TRUE(all_close(one[0], ref_float(Op::sum, big, {0}), 1e-5, 1e-3));
}

}  // namespace
}  // namespace pax
