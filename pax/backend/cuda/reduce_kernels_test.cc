// The CUDA kernels of reductions, scans, sorting, random numbers and windows
// (kernels_reduce.cu, kernels_sort.cu, kernels_random.cu, kernels_window.cu).
// On every machine their index arithmetic and combining rules
// (reduce_index_math.h) run on the host, in the kernels' order, and must
// reproduce the CPU kernels' results (bit for bit where the kernels document
// the CPU's order); where a GPU is present every kernel runs there and must
// agree with the CPU backend for several shapes and dtypes.
#include "pax/backend/cuda/reduce_index_math.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "pax/backend/cuda/cuda_devices.h"
#include "pax/backend/cuda/cuda_kernels.h"
#include "pax/core/device_put.h"
#include "pax/ops/lax.h"
#include "pax/testing/testing.h"

namespace pax::cuda {
namespace {

using reduce::Op;
using testing::host_bytes;

const Device kCuda{DeviceKind::cuda, 0};
constexpr int64_t kRowThreads = 256;  // the row kernels' block size
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

template <class T>
std::vector<T> values_of(const Array& a) {
  const std::vector<unsigned char> bytes = host_bytes(a);
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

// Values in a few levels (ties) with optional NaNs at the given positions.
Array tied_f32(const Shape& s, uint32_t seed, const std::vector<int64_t>& nans = {}) {
  std::vector<double> v = testing::random_values(s.numel(), seed, -4, 4);
  std::vector<float> f(v.size());
  for (size_t i = 0; i < v.size(); ++i) f[i] = std::round(float(v[i])) + 0.0f;  // no -0.0
  for (int64_t i : nans) f[size_t(i)] = kNaN;
  return array(f, s);
}

Array random_bool(const Shape& s, uint32_t seed) {
  const std::vector<double> v = testing::random_values(s.numel(), seed);
  std::vector<uint8_t> b(v.size());
  for (size_t i = 0; i < v.size(); ++i) b[i] = v[i] > 0.3 ? 1 : 0;
  return from_host(b.data(), s, DType::bool_);
}

Array random_i32(const Shape& s, uint32_t seed, int lo = -50, int hi = 50) {
  return testing::random_array(s, DType::i32, seed, lo, hi);
}

// ---------------------------------------------------------------------------
// Host emulation of the kernels, from the header's functions.

// One (outer, n, inner) column pass in blocks of rb rows: [outer, nb, inner].
template <Op kOp, class A>
std::vector<A> emulate_cols(const std::vector<A>& x, int64_t outer, int64_t n, int64_t inner, reduce::Blocks b) {
  std::vector<A> y(size_t(outer * b.nb * inner));
  for (int64_t e = 0; e < int64_t(y.size()); ++e) {
    const int64_t i = e % inner, blk = (e / inner) % b.nb, o = e / (inner * b.nb);
    const A* col = x.data() + (o * n + blk * b.rb) * inner + i;
    y[size_t(e)] =
        reduce::column_partial<kOp, A>([&](int64_t r) { return col[r * inner]; }, std::min(b.rb, n - blk * b.rb));
  }
  return y;
}

// The row kernel: strided partials of kRowThreads threads, then the tree.
template <Op kOp, class A>
A emulate_row(const A* row, int64_t n) {
  std::vector<A> part(kRowThreads);
  for (int64_t t = 0; t < kRowThreads; ++t)
    part[size_t(t)] = reduce::strided_partial<kOp, A>([&](int64_t r) { return row[r]; }, n, t, kRowThreads);
  for (int64_t s = kRowThreads / 2; s > 0; s >>= 1)
    for (int64_t t = 0; t < s; ++t) part[size_t(t)] = reduce::apply<kOp>(part[size_t(t)], part[size_t(t + s)]);
  return part[0];
}

// The reduction kernel on the host (T = int32_t or float).
template <Op kOp, class T>
std::vector<T> emulate_reduce(const std::vector<T>& x, const Shape& s, const Ints& axes) {
  using A = reduce::Acc<kOp, T>;
  std::vector<A> cur(x.begin(), x.end());
  for (const reduce::Pass& p : reduce::reduce_passes(s, normalize_axes(axes, s.rank(), "test"))) {
    if (p.n == 1) continue;
    if (p.inner == 1) {
      std::vector<A> next(size_t(p.outer));
      for (int64_t o = 0; o < p.outer; ++o) next[size_t(o)] = emulate_row<kOp>(cur.data() + o * p.n, p.n);
      cur = std::move(next);
      continue;
    }
    reduce::Blocks b = reduce::column_blocks(p.outer, p.n, p.inner, true);
    cur = emulate_cols<kOp>(cur, p.outer, p.n, p.inner, b);
    for (int64_t rows = b.nb; rows > 1; rows = b.nb) {
      b = reduce::column_blocks(p.outer, rows, p.inner, false);
      cur = emulate_cols<kOp>(cur, p.outer, rows, p.inner, b);
    }
  }
  return std::vector<T>(cur.begin(), cur.end());
}

// Equal bits, or both NaN.
::testing::AssertionResult same_floats(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << got.size() << " != " << want.size();
  for (size_t i = 0; i < got.size(); ++i) {
    const bool ok = (got[i] != got[i] && want[i] != want[i]) || std::memcmp(&got[i], &want[i], sizeof(float)) == 0;
    if (!ok) return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " != " << want[i];
  }
  return ::testing::AssertionSuccess();
}

// ---------------------------------------------------------------------------
// Reductions

TEST(CudaReduceIndexMath, PassesFollowTheCpuAxisGroups) {
  auto str = [](const std::vector<reduce::Pass>& ps) {
    std::string s;
    for (const reduce::Pass& p : ps)
      s += std::to_string(p.outer) + "," + std::to_string(p.n) + "," + std::to_string(p.inner) + ";";
    return s;
  };
  EXPECT_EQ(str(reduce::reduce_passes(Shape{2, 3, 4}, {2})), "6,4,1;");
  EXPECT_EQ(str(reduce::reduce_passes(Shape{2, 3, 4}, {0, 1})), "1,6,4;");
  // Non-adjacent groups: the innermost first, then the merged rest.
  EXPECT_EQ(str(reduce::reduce_passes(Shape{2, 3, 4, 5}, {0, 2})), "6,4,5;1,2,15;");
  EXPECT_EQ(str(reduce::reduce_passes(Shape{2, 1, 4}, {1})), "8,1,1;");
  EXPECT_EQ(str(reduce::reduce_passes(Shape{2, 0, 4}, {1})), "8,0,1;");
}

template <Op kOp, Prim P>
void expect_int_reduction_matches_cpu(const Shape& s, const Ints& axes, uint32_t seed) {
  const Array x = random_i32(s, seed, kOp == Op::prod ? -3 : -1000, kOp == Op::prod ? 4 : 1000);
  const Array want = kOp == Op::sum    ? lax::reduce_sum(x, axes)
                     : kOp == Op::prod ? lax::reduce_prod(x, axes)
                     : kOp == Op::max  ? lax::reduce_max(x, axes)
                     : kOp == Op::min  ? lax::reduce_min(x, axes)
                     : kOp == Op::and_ ? lax::reduce_and(x, axes)
                                       : lax::reduce_or(x, axes);
  EXPECT_EQ(emulate_reduce<kOp>(values_of<int32_t>(x), s, axes), values_of<int32_t>(want))
      << prim_name(P) << " " << s.str() << " axes " << ints_str(axes);
}

TEST(CudaReduceIndexMath, IntegerReductionsMatchCpuForEveryAxisSet) {
  for (const auto& [shape, axes] : std::vector<std::pair<Shape, Ints>>{{Shape{700}, {0}},
                                                                       {Shape{5, 300}, {1}},
                                                                       {Shape{300, 7}, {0}},
                                                                       {Shape{3, 4, 5}, {0, 2}},
                                                                       {Shape{3, 4, 5}, {1}},
                                                                       {Shape{3, 4, 5}, {0, 1, 2}},
                                                                       {Shape{2, 3, 4, 5}, {1, 3}},
                                                                       {Shape{5000, 9}, {0}}}) {
    expect_int_reduction_matches_cpu<Op::sum, Prim::reduce_sum>(shape, axes, 1);
    expect_int_reduction_matches_cpu<Op::prod, Prim::reduce_prod>(shape, axes, 2);
    expect_int_reduction_matches_cpu<Op::max, Prim::reduce_max>(shape, axes, 3);
    expect_int_reduction_matches_cpu<Op::min, Prim::reduce_min>(shape, axes, 4);
    expect_int_reduction_matches_cpu<Op::and_, Prim::reduce_and>(shape, axes, 5);
    expect_int_reduction_matches_cpu<Op::or_, Prim::reduce_or>(shape, axes, 6);
  }
}

TEST(CudaReduceIndexMath, ColumnSumsAddInTheCpuOrderBitForBit) {
  // Column passes only: blocks cut finer for few tasks ([4000, 64]), block
  // partials combined in a second level ([20000, 3]), several outer rows.
  for (const auto& [shape, axes] : std::vector<std::pair<Shape, Ints>>{{Shape{37, 50}, {0}},
                                                                       {Shape{3, 50, 40}, {1}},
                                                                       {Shape{4000, 64}, {0}},
                                                                       {Shape{20000, 3}, {0}},
                                                                       {Shape{6, 2, 7, 5}, {0, 1}}}) {
    const Array x = testing::random_array(shape, DType::f32, 7);
    EXPECT_TRUE(same_floats(emulate_reduce<Op::sum>(values_of<float>(x), shape, axes),
                            values_of<float>(lax::reduce_sum(x, axes))))
        << shape.str();
    EXPECT_TRUE(same_floats(emulate_reduce<Op::prod>(values_of<float>(x), shape, axes),
                            values_of<float>(lax::reduce_prod(x, axes))))
        << shape.str();
  }
}

TEST(CudaReduceIndexMath, RowSumsAreCloseAndMaxMinExactWithNaN) {
  const Shape s{6, 1000};
  const Array x = testing::random_array(s, DType::f32, 8);
  const std::vector<float> got = emulate_reduce<Op::sum>(values_of<float>(x), s, {1});
  const std::vector<float> want = values_of<float>(lax::reduce_sum(x, {1}));
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-4) << i;
  const Array t = tied_f32(s, 9, {1500, 1700, 4001});
  for (const Ints& axes : {Ints{1}, Ints{0}, Ints{0, 1}}) {
    EXPECT_TRUE(
        same_floats(emulate_reduce<Op::max>(values_of<float>(t), s, axes), values_of<float>(lax::reduce_max(t, axes))))
        << ints_str(axes);
    EXPECT_TRUE(
        same_floats(emulate_reduce<Op::min>(values_of<float>(t), s, axes), values_of<float>(lax::reduce_min(t, axes))))
        << ints_str(axes);
  }
}

// ---------------------------------------------------------------------------
// argmax / argmin

template <bool kMax, class V>
std::vector<int64_t> emulate_arg(const std::vector<V>& x, const Shape& s, int64_t axis) {
  const reduce::Pass c = reduce::around_axis(s, axis);
  std::vector<int64_t> y(size_t(c.outer * c.inner));
  for (int64_t e = 0; e < int64_t(y.size()); ++e) {
    const V* col = x.data() + (e / c.inner) * c.n * c.inner + e % c.inner;
    if (c.inner > 1) {  // the column kernel: one scan in order
      V best = col[0];
      int64_t at = 0;
      for (int64_t r = 1; r < c.n; ++r) {
        if (reduce::arg_better<kMax>(col[r * c.inner], best)) {
          best = col[r * c.inner];
          at = r;
        }
      }
      y[size_t(e)] = at;
      continue;
    }
    std::vector<reduce::ArgBest<V>> part(kRowThreads, reduce::ArgBest<V>{V(0), -1});
    for (int64_t t = 0; t < kRowThreads; ++t) {
      for (int64_t r = t; r < c.n; r += kRowThreads) {
        if (part[size_t(t)].i < 0 || reduce::arg_better<kMax>(col[r], part[size_t(t)].v))
          part[size_t(t)] = reduce::ArgBest<V>{col[r], r};
      }
    }
    for (int64_t st = kRowThreads / 2; st > 0; st >>= 1)
      for (int64_t t = 0; t < st; ++t) part[size_t(t)] = reduce::arg_merge<kMax>(part[size_t(t)], part[size_t(t + st)]);
    y[size_t(e)] = part[0].i;
  }
  return y;
}

TEST(CudaReduceIndexMath, ArgReductionsFindTheFirstExtremeAsCpu) {
  const Shape s{5, 600};
  // Ties everywhere, NaNs in some rows (two in row 2: the first wins) and
  // columns, and a NaN past the first thread's stride.
  const Array f = tied_f32(s, 10, {700, 1300, 1290, 2999, 5, 2404});
  const Array i = random_i32(s, 11, -3, 3);
  for (int64_t axis : {0, 1}) {
    for (bool is_max : {true, false}) {
      const auto arg = [&](const Array& x) {
        return values_of<int32_t>(is_max ? lax::argmax(x, axis) : lax::argmin(x, axis));
      };
      const auto as64 = [](const std::vector<int32_t>& v) { return std::vector<int64_t>(v.begin(), v.end()); };
      if (is_max) {
        EXPECT_EQ(emulate_arg<true>(values_of<float>(f), s, axis), as64(arg(f))) << axis;
        EXPECT_EQ(emulate_arg<true>(values_of<int32_t>(i), s, axis), as64(arg(i))) << axis;
      } else {
        EXPECT_EQ(emulate_arg<false>(values_of<float>(f), s, axis), as64(arg(f))) << axis;
        EXPECT_EQ(emulate_arg<false>(values_of<int32_t>(i), s, axis), as64(arg(i))) << axis;
      }
    }
  }
  // The merge keeps the lower index among equals, whatever the order.
  using B = reduce::ArgBest<float>;
  EXPECT_EQ(reduce::arg_merge<true>(B{1.0f, 7}, B{1.0f, 3}).i, 3);
  EXPECT_EQ(reduce::arg_merge<true>(B{kNaN, 9}, B{5.0f, 2}).i, 9);
  EXPECT_EQ(reduce::arg_merge<false>(B{kNaN, 9}, B{kNaN, 4}).i, 4);
  EXPECT_EQ(reduce::arg_merge<false>(B{0.0f, -1}, B{-0.0f, 4}).i, 4);
}

// ---------------------------------------------------------------------------
// cumsum

template <class T>
std::vector<T> emulate_cumsum(const std::vector<T>& x, const Shape& s, int64_t axis, bool reverse) {
  using A = reduce::Acc<Op::sum, T>;
  const reduce::Pass c = reduce::around_axis(s, axis);
  const reduce::Blocks b = reduce::scan_blocks(c.outer, c.n, c.inner);
  const int64_t tasks = c.outer * b.nb * c.inner;
  std::vector<A> part(size_t(tasks), A(0));
  if (b.nb > 1) {
    std::vector<A> xa(x.begin(), x.end());
    part = emulate_cols<Op::sum>(xa, c.outer, c.n, c.inner, b);
    for (int64_t e = 0; e < c.outer * c.inner; ++e) {
      A* col = part.data() + (e / c.inner) * b.nb * c.inner + e % c.inner;
      A carry = A(0);
      for (int64_t k = 0; k < b.nb; ++k) {
        A& v = col[(reverse ? b.nb - 1 - k : k) * c.inner];
        const A next = A(carry + v);
        v = carry;
        carry = next;
      }
    }
  }
  std::vector<T> y(x.size());
  for (int64_t e = 0; e < tasks; ++e) {
    const int64_t i = e % c.inner, blk = (e / c.inner) % b.nb, o = e / (c.inner * b.nb);
    const int64_t base = (o * c.n + blk * b.rb) * c.inner + i, rows = std::min(b.rb, c.n - blk * b.rb);
    A acc = part[size_t(e)];
    for (int64_t k = 0; k < rows; ++k) {
      const int64_t at = base + (reverse ? rows - 1 - k : k) * c.inner;
      acc = A(acc + A(x[size_t(at)]));
      y[size_t(at)] = T(acc);
    }
  }
  return y;
}

TEST(CudaReduceIndexMath, ScanBlocksFollowTheCpuPlan) {
  EXPECT_EQ(reduce::scan_blocks(7, 100, 1).nb, 1);
  EXPECT_EQ(reduce::scan_blocks(1, 70000, 1).rb, 8192);  // four row blocks per task
  EXPECT_EQ(reduce::scan_blocks(1, 40000, 2).rb, 16384);
  EXPECT_EQ(reduce::scan_blocks(16, 100000, 1).nb, 1);  // enough independent rows
}

TEST(CudaReduceIndexMath, CumsumMatchesCpuBitForBit) {
  // Float scans bit for bit where the CPU scans in one pass or over columns;
  // integer scans everywhere (long rows cut into blocks too).
  for (bool reverse : {false, true}) {
    for (const auto& [shape, axis] : std::vector<std::pair<Shape, int64_t>>{
             {Shape{7, 100}, 1}, {Shape{7, 100}, 0}, {Shape{3, 5, 4}, 1}, {Shape{40000, 2}, 0}}) {
      const Array x = testing::random_array(shape, DType::f32, 12);
      EXPECT_TRUE(same_floats(emulate_cumsum(values_of<float>(x), shape, axis, reverse),
                              values_of<float>(lax::cumsum(x, axis, reverse))))
          << shape.str() << " axis " << axis << " reverse " << reverse;
    }
    for (const auto& [shape, axis] :
         std::vector<std::pair<Shape, int64_t>>{{Shape{1, 70000}, 1}, {Shape{40000, 2}, 0}, {Shape{3, 5, 4}, 2}}) {
      const Array x = random_i32(shape, 13, -1000000000, 1000000000);  // sums wrap
      EXPECT_EQ(emulate_cumsum(values_of<int32_t>(x), shape, axis, reverse),
                values_of<int32_t>(lax::cumsum(x, axis, reverse)))
          << shape.str() << " axis " << axis << " reverse " << reverse;
    }
  }
}

// ---------------------------------------------------------------------------
// Sorting

// The kernels' passes on the host: stable sorts of all positions, the last
// key first, then by row.
std::vector<int64_t> emulate_sort_order(const std::vector<Array>& keys, int64_t n, int64_t inner, bool descending) {
  const int64_t total = keys[0].size();
  std::vector<int64_t> perm(static_cast<size_t>(total));
  std::iota(perm.begin(), perm.end(), 0);
  for (size_t k = keys.size(); k-- > 0;) {
    const std::vector<unsigned char> bytes = host_bytes(keys[k]);
    const DType dt = keys[k].dtype();
    const int bits = reduce::order_key_bits(dt);
    auto key = [&](int64_t e) {
      const uint64_t v = reduce::order_key(
          dt, reduce::element_bits(bytes.data(), int(itemsize(dt)), reduce::row_element_offset(e, n, inner)));
      return descending ? reduce::descending_key(v, bits) : v;
    };
    std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return key(a) < key(b); });
  }
  std::stable_sort(perm.begin(), perm.end(), [&](int64_t a, int64_t b) { return a / n < b / n; });
  return perm;
}

// An operand gathered through the order, as the kernel gathers it.
std::vector<unsigned char> gather_sorted(const Array& x, const std::vector<int64_t>& perm, int64_t n, int64_t inner) {
  const std::vector<unsigned char> in = host_bytes(x);
  std::vector<unsigned char> out(in.size());
  const size_t w = itemsize(x.dtype());
  for (int64_t j = 0; j < int64_t(perm.size()); ++j) {
    std::memcpy(&out[size_t(reduce::row_element_offset(j, n, inner)) * w],
                &in[size_t(reduce::row_element_offset(perm[size_t(j)], n, inner)) * w], w);
  }
  return out;
}

TEST(CudaReduceIndexMath, OrderKeysOrderFloatsAsCpu) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v{1.0f, -0.0f, kNaN, -inf, 0.0f, inf, -2.5f, -kNaN, 3.0f};
  const Array a = array(v, Shape{int64_t(v.size())});
  const Array sorted = lax::sort({a})[0];
  const std::vector<int64_t> perm = emulate_sort_order({a}, int64_t(v.size()), 1, false);
  EXPECT_EQ(gather_sorted(a, perm, int64_t(v.size()), 1), host_bytes(sorted));
  // -0.0 and 0.0 are equal keys (kept in index order), NaNs above +inf.
  EXPECT_EQ(reduce::order_key(DType::f32, std::bit_cast<uint32_t>(-0.0f)),
            reduce::order_key(DType::f32, std::bit_cast<uint32_t>(0.0f)));
  EXPECT_GT(reduce::order_key(DType::f32, std::bit_cast<uint32_t>(-kNaN)),
            reduce::order_key(DType::f32, std::bit_cast<uint32_t>(inf)));
  EXPECT_EQ(reduce::descending_key(0, 16), 0xffffu);
}

TEST(CudaReduceIndexMath, SortPassesMatchCpuForEveryAxisAndSeveralKeys) {
  const Shape s{6, 9, 4};
  const Array f = tied_f32(s, 14, {3, 50, 51, 100});
  const Array i = random_i32(s, 15, -2, 2);
  const Array b = random_bool(s, 16);
  const Array h = lax::convert_element_type(f, DType::bf16);
  const Array l = random_i32(s, 17).astype(DType::i64);
  for (int64_t dim : {0, 1, 2}) {
    const reduce::Pass c = reduce::around_axis(s, dim);
    for (const auto& [ops, num_keys] : std::vector<std::pair<std::vector<Array>, int64_t>>{
             {{f}, 1}, {{i, f, l}, 2}, {{b, h, i}, 3}, {{h, l}, 1}, {{l}, 1}}) {
      const std::vector<Array> want = lax::sort(ops, dim, true, num_keys);
      const std::vector<int64_t> perm =
          emulate_sort_order(std::vector<Array>(ops.begin(), ops.begin() + num_keys), c.n, c.inner, false);
      for (size_t k = 0; k < ops.size(); ++k) {
        EXPECT_EQ(gather_sorted(ops[k], perm, c.n, c.inner), host_bytes(want[k]))
            << "dimension " << dim << " operand " << k << " of " << ops.size() << ", " << num_keys << " keys";
      }
    }
  }
}

TEST(CudaReduceIndexMath, TopKTakesTheFirstKOfADescendingStableSort) {
  const Shape s{4, 300};
  const Array f = tied_f32(s, 18, {10, 20, 700});
  for (int64_t k : {0, 1, 5, 150, 300}) {
    const auto [values, indices] = lax::top_k(f, k);
    const std::vector<int64_t> perm = emulate_sort_order({f}, 300, 1, true);
    const std::vector<float> x = values_of<float>(f);
    std::vector<float> got_v;
    std::vector<int32_t> got_i;
    for (int64_t r = 0; r < 4; ++r) {
      for (int64_t j = 0; j < k; ++j) {
        const int64_t src = perm[size_t(r * 300 + j)];
        got_v.push_back(x[size_t(src)]);
        got_i.push_back(int32_t(src % 300));
      }
    }
    EXPECT_TRUE(same_floats(got_v, values_of<float>(values))) << k;
    EXPECT_EQ(got_i, values_of<int32_t>(indices)) << k;
  }
}

// ---------------------------------------------------------------------------
// Random numbers

TEST(CudaReduceIndexMath, ThreefryMatchesRandom123KnownAnswers) {
  struct Kat {
    uint32_t k0, k1, x0, x1, y0, y1;
  };
  for (const Kat& k : {Kat{0, 0, 0, 0, 0x6b200159u, 0x99ba4efeu},
                       Kat{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu, 0x1cb996fcu, 0xbb002be7u},
                       Kat{0x13198a2eu, 0x03707344u, 0x243f6a88u, 0x85a308d3u, 0xc4923a9cu, 0x483df7a0u}}) {
    uint32_t y0 = 0, y1 = 0;
    reduce::threefry2x32(k.k0, k.k1, k.x0, k.x1, y0, y1);
    EXPECT_EQ(y0, k.y0);
    EXPECT_EQ(y1, k.y1);
  }
}

Array random_u32(int64_t n, uint32_t seed) {
  std::vector<uint32_t> v(static_cast<size_t>(n));
  uint32_t s = seed;
  for (uint32_t& x : v) x = s = s * 1664525u + 1013904223u;
  return array(v, Shape{n});
}

TEST(CudaReduceIndexMath, ThreefryAndRandomBitsMatchCpu) {
  const int64_t n = 37;  // not a multiple of any vector width: the CPU's tails too
  const Array k0 = random_u32(n, 1), k1 = random_u32(n, 2), x0 = random_u32(n, 3), x1 = random_u32(n, 4);
  for (bool broadcast : {false, true}) {
    const Array a = broadcast ? scalar<uint32_t>(0x12345678u) : k0;
    const auto [y0, y1] = lax::threefry2x32(a, k1, x0, x1);
    const std::vector<uint32_t> av = values_of<uint32_t>(a), bv = values_of<uint32_t>(k1), c0 = values_of<uint32_t>(x0),
                                c1 = values_of<uint32_t>(x1);
    std::vector<uint32_t> g0(static_cast<size_t>(n)), g1(static_cast<size_t>(n));
    for (size_t i = 0; i < size_t(n); ++i)
      reduce::threefry2x32(av[broadcast ? 0 : i], bv[i], c0[i], c1[i], g0[i], g1[i]);
    EXPECT_EQ(g0, values_of<uint32_t>(y0)) << broadcast;
    EXPECT_EQ(g1, values_of<uint32_t>(y1)) << broadcast;
  }
  const Array key = array(std::vector<uint32_t>{0x9e3779b9u, 42u}, Shape{2});
  for (int64_t count : {1, 2, 7, 10, 1001}) {
    std::vector<uint32_t> got(static_cast<size_t>(count));
    const uint64_t m = uint64_t(count + 1) / 2;
    for (uint64_t i = 0; i < m; ++i) {
      uint32_t y0 = 0, y1 = 0;
      if (reduce::random_bits_block(0x9e3779b9u, 42u, uint64_t(count), i, y0, y1)) got[m + i] = y1;
      got[i] = y0;
    }
    EXPECT_EQ(got, values_of<uint32_t>(lax::random_bits(key, {count}))) << count;
  }
}

// ---------------------------------------------------------------------------
// Windows

struct WindowCase {
  Shape in;
  Ints dims, strides, padding;  // padding: (lo, hi) per axis
};

const std::vector<WindowCase>& window_cases() {
  static const std::vector<WindowCase> cases{
      {Shape{2, 7, 9, 3}, {1, 3, 3, 1}, {1, 2, 2, 1}, {0, 0, 1, 1, 1, 1, 0, 0}},  // NHWC pooling, padded
      {Shape{2, 6, 8, 3}, {1, 2, 2, 1}, {1, 2, 2, 1}, {0, 0, 0, 0, 0, 0, 0, 0}},  // tiles
      {Shape{5, 6}, {3, 2}, {1, 1}, {2, 1, 0, 3}},                                // overlapping, padded
      {Shape{9}, {4}, {3}, {0, 0}},                                               // remainder left over
      {Shape{4, 3}, {2, 2}, {3, 3}, {3, 3, 0, 0}},                                // windows all in padding
  };
  return cases;
}

Window window_of_case(const WindowCase& c) {
  Window w{c.dims, c.strides, {}, {}};
  for (size_t d = 0; d < c.dims.size(); ++d) {
    w.lo.push_back(c.padding[2 * d]);
    w.hi.push_back(c.padding[2 * d + 1]);
  }
  return w;
}

lax::Window lax_window(const WindowCase& c) { return lax::Window{c.dims, c.strides, c.padding}; }

// The three window kernels on the host, for storage type T.
template <class T>
void expect_windows_match_cpu(DType dt) {
  using V = std::conditional_t<reduce::kIsHalf<T>, float, T>;
  for (const WindowCase& c : window_cases()) {
    const Array x = lax::convert_element_type(tied_f32(c.in, 19, {4}), dt);
    const Array y = lax::reduce_window_max(x, lax_window(c));
    const reduce::WindowMap m = reduce::window_map("test", c.in, y.shape(), window_of_case(c));
    const std::vector<T> xs = values_of<T>(x);
    auto load = [&](int64_t off) { return reduce::load_as<V>(xs[size_t(off)]); };
    const Array t = lax::convert_element_type(testing::random_array(c.in, DType::f32, 20), dt);
    const Array s = lax::convert_element_type(testing::random_array(y.shape(), DType::f32, 21), dt);
    const std::vector<T> ts = values_of<T>(t), ss = values_of<T>(s);
    std::vector<T> max_got, gather_got, scatter_got;
    for (int64_t pos = 0; pos < m.out_count; ++pos) {
      V best = V(0);
      const int64_t at = reduce::window_select(m, pos, load, best);
      max_got.push_back(reduce::store_as<T>(at < 0 ? -reduce::plus_infinity<V>() : best));
      gather_got.push_back(at < 0 ? reduce::store_as<T>(V(0)) : ts[size_t(at)]);
    }
    for (int64_t e = 0; e < c.in.numel(); ++e) {
      int64_t lo[reduce::kMaxRank], hi[reduce::kMaxRank];
      const int64_t count = reduce::covering_windows(m, e, lo, hi);
      T acc = reduce::store_as<T>(V(0));
      for (int64_t j = 0; j < count; ++j) {
        const int64_t pos = reduce::box_position(m, lo, hi, j);
        V best = V(0);
        if (reduce::window_select(m, pos, load, best) != e) continue;
        acc = m.tiles ? ss[size_t(pos)]
                      : reduce::store_as<T>(reduce::load_as<V>(acc) + reduce::load_as<V>(ss[size_t(pos)]));
      }
      scatter_got.push_back(acc);
    }
    auto bytes = [](const std::vector<T>& v) {
      std::vector<unsigned char> b(v.size() * sizeof(T));
      std::memcpy(b.data(), v.data(), b.size());
      return b;
    };
    const std::string what = std::string(dtype_name(dt)) + " " + c.in.str() + " window " + ints_str(c.dims);
    EXPECT_EQ(bytes(max_got), host_bytes(y)) << "reduce_window_max " << what;
    EXPECT_EQ(bytes(gather_got), host_bytes(lax::select_and_gather_add(t, x, lax_window(c))))
        << "select_and_gather_add " << what;
    EXPECT_EQ(bytes(scatter_got), host_bytes(lax::select_and_scatter_add(s, x, lax_window(c))))
        << "select_and_scatter_add " << what;
  }
}

TEST(CudaReduceIndexMath, WindowsMatchCpuBitForBit) {
  expect_windows_match_cpu<float>(DType::f32);
  expect_windows_match_cpu<double>(DType::f64);
  expect_windows_match_cpu<reduce::Bf16Bits>(DType::bf16);
  expect_windows_match_cpu<reduce::F16Bits>(DType::f16);
}

TEST(CudaReduceIndexMath, CoveringWindowsListTheWindowsOfAnElement) {
  const WindowCase c{Shape{10}, {4}, {3}, {2, 1}};  // padded length 13: windows at 0, 3, 6, 9
  const reduce::WindowMap m = reduce::window_map("test", c.in, Shape{4}, window_of_case(c));
  for (int64_t e = 0; e < 10; ++e) {
    int64_t lo[reduce::kMaxRank], hi[reduce::kMaxRank];
    const int64_t count = reduce::covering_windows(m, e, lo, hi);
    std::vector<int64_t> got, want;
    for (int64_t j = 0; j < count; ++j) got.push_back(reduce::box_position(m, lo, hi, j));
    for (int64_t o = 0; o < 4; ++o) {
      for (int64_t k = 0; k < 4; ++k) {
        if (reduce::window_element(m, o, k) == e) want.push_back(o);
      }
    }
    EXPECT_EQ(got, want) << e;
  }
}

// ---------------------------------------------------------------------------
// The kernels on a GPU against the CPU backend.

TEST(CudaReduceKernels, RegisteredForEveryPrimitive) {
  for (Prim p :
       {Prim::reduce_sum, Prim::reduce_max, Prim::reduce_min, Prim::reduce_prod, Prim::reduce_and, Prim::reduce_or,
        Prim::argmax, Prim::argmin, Prim::cumsum, Prim::sort, Prim::top_k, Prim::threefry2x32, Prim::random_bits,
        Prim::reduce_window_max, Prim::select_and_scatter_add, Prim::select_and_gather_add}) {
    EXPECT_NE(cuda_kernel(p), nullptr) << prim_name(p);
  }
}

using Fn = std::function<std::vector<Array>(const std::vector<Array>&)>;

// f on the CPU, and on copies of `inputs` on cuda:0. `rtol` 0: the same
// bytes; otherwise floats within rtol (NaN matching NaN).
void expect_same_on_cuda(const std::vector<Array>& inputs, const Fn& f, const std::string& what, double rtol = 0) {
  const std::vector<Array> want = f(inputs);
  std::vector<Array> on_gpu;
  for (const Array& x : inputs) on_gpu.push_back(device_put(x, kCuda));
  std::vector<Array> got;
  {
    const DefaultDeviceScope on(kCuda);
    got = f(on_gpu);
  }
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t k = 0; k < got.size(); ++k) {
    EXPECT_EQ(got[k].device(), kCuda) << what;
    EXPECT_EQ(got[k].shape(), want[k].shape()) << what;
    EXPECT_EQ(got[k].dtype(), want[k].dtype()) << what;
    if (rtol == 0) {
      EXPECT_EQ(host_bytes(got[k]), host_bytes(want[k])) << what << " result " << k;
    } else {
      const std::vector<double> w = want[k].to_vector<double>();
      EXPECT_TRUE(testing::all_close(got[k], w, rtol, rtol)) << what << " result " << k;
    }
  }
}

Fn one(std::function<Array(const Array&)> g) {
  return [g](const std::vector<Array>& in) { return std::vector<Array>{g(in[0])}; };
}

Array sample(const Shape& s, DType dt, uint32_t seed) {
  if (dt == DType::bool_) return random_bool(s, seed);
  if (is_floating(dt)) return lax::convert_element_type(tied_f32(s, seed, {1}), dt);
  return testing::random_array(s, dt, seed, dt == DType::u8 || dt == DType::u32 ? 0 : -100, 100);
}

#define PAX_REQUIRE_CUDA() \
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device"

const std::vector<std::pair<Shape, Ints>>& reduce_cases() {
  static const std::vector<std::pair<Shape, Ints>> cases{
      {Shape{3, 1000}, {1}},      {Shape{1000, 3}, {0}},       {Shape{4, 5, 6}, {0, 2}},
      {Shape{4, 5, 6}, {1}},      {Shape{4, 5, 6}, {0, 1, 2}}, {Shape{3000, 70}, {0}},
      {Shape{2, 0, 3}, {1}},      {Shape{2, 1, 3}, {1}},       {Shape{17}, {0}},
      {Shape{2, 3, 4, 5}, {1, 3}}};
  return cases;
}

TEST(CudaReduceKernels, ReductionsMatchCpu) {
  PAX_REQUIRE_CUDA();
  for (DType dt :
       {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32, DType::i64, DType::u8, DType::u32, DType::bool_}) {
    const bool fl = is_floating(dt);
    for (const auto& [shape, axes] : reduce_cases()) {
      const std::string n = std::string(dtype_name(dt)) + " " + shape.str() + " axes " + ints_str(axes);
      const Array x = sample(shape, dt, 30);
      const Ints ax = axes;
      // Float sums and products round in the kernels' order (close);
      // everything else is exact.
      if (dt != DType::bool_) {
        expect_same_on_cuda({x}, one([ax](const Array& a) { return lax::reduce_sum(a, ax); }), "reduce_sum " + n,
                            fl ? 1e-2 : 0);
        const Array small = fl ? x : sample(shape, dt, 31);
        expect_same_on_cuda(
            {lax::convert_element_type(
                lax::mul(lax::convert_element_type(small, DType::f32), scalar<float>(fl ? 0.1f : 1.0f)), dt)},
            one([ax](const Array& a) { return lax::reduce_prod(a, ax); }), "reduce_prod " + n, fl ? 1e-2 : 0);
      }
      expect_same_on_cuda({x}, one([ax](const Array& a) { return lax::reduce_max(a, ax); }), "reduce_max " + n);
      expect_same_on_cuda({x}, one([ax](const Array& a) { return lax::reduce_min(a, ax); }), "reduce_min " + n);
      if (!fl) {
        expect_same_on_cuda({x}, one([ax](const Array& a) { return lax::reduce_and(a, ax); }), "reduce_and " + n);
        expect_same_on_cuda({x}, one([ax](const Array& a) { return lax::reduce_or(a, ax); }), "reduce_or " + n);
      }
    }
  }
  // Column sums add in the CPU's order: exact; row sums close.
  for (DType dt : {DType::f32, DType::f64}) {
    const Array x = testing::random_array(Shape{3000, 70}, dt, 32);
    expect_same_on_cuda({x}, one([](const Array& a) { return lax::reduce_sum(a, {0}); }),
                        std::string("column reduce_sum ") + dtype_name(dt));
    expect_same_on_cuda({x}, one([](const Array& a) { return lax::reduce_sum(a, {1}); }),
                        std::string("row reduce_sum ") + dtype_name(dt), 1e-5);
  }
}

TEST(CudaReduceKernels, ArgReductionsAndCumsumMatchCpu) {
  PAX_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32, DType::i64, DType::u8, DType::bool_}) {
    for (const Shape& shape : {Shape{5, 700}, Shape{700, 5}, Shape{3, 4, 5}}) {
      const Array x = sample(shape, dt, 33);
      for (int64_t axis = 0; axis < shape.rank(); ++axis) {
        const std::string n = std::string(dtype_name(dt)) + " " + shape.str() + " axis " + std::to_string(axis);
        for (DType it : {DType::i32, DType::i64}) {
          expect_same_on_cuda({x}, one([axis, it](const Array& a) { return lax::argmax(a, axis, it); }), "argmax " + n);
          expect_same_on_cuda({x}, one([axis, it](const Array& a) { return lax::argmin(a, axis, it); }), "argmin " + n);
        }
        if (dt == DType::bool_) continue;
        for (bool reverse : {false, true}) {
          expect_same_on_cuda({x}, one([axis, reverse](const Array& a) { return lax::cumsum(a, axis, reverse); }),
                              "cumsum " + n);
        }
      }
    }
  }
  // Long scans cut into blocks: columns exact, long rows close.
  const Array cols = testing::random_array(Shape{40000, 2}, DType::f32, 34);
  expect_same_on_cuda({cols}, one([](const Array& a) { return lax::cumsum(a, 0, true); }), "long column cumsum");
  const Array row = testing::random_array(Shape{1, 70000}, DType::f32, 35);
  expect_same_on_cuda({row}, one([](const Array& a) { return lax::cumsum(a, 1); }), "long row cumsum", 1e-3);
  const Array irow = random_i32(Shape{1, 70000}, 36);
  expect_same_on_cuda({irow}, one([](const Array& a) { return lax::cumsum(a, 1); }), "long int row cumsum");
}

TEST(CudaReduceKernels, SortAndTopKMatchCpu) {
  PAX_REQUIRE_CUDA();
  for (DType dt :
       {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32, DType::i64, DType::u8, DType::u32, DType::bool_}) {
    for (const Shape& shape : {Shape{6, 9, 4}, Shape{3, 1000}, Shape{2000}}) {
      const Array x = sample(shape, dt, 37);
      const Array y = random_i32(shape, 38, -3, 3);
      const Array z = testing::random_array(shape, DType::f32, 39);
      for (int64_t dim = 0; dim < shape.rank(); ++dim) {
        const std::string n = std::string(dtype_name(dt)) + " " + shape.str() + " dimension " + std::to_string(dim);
        expect_same_on_cuda(
            {x, z}, [dim](const std::vector<Array>& in) { return lax::sort(in, dim, true, 1); }, "sort " + n);
        expect_same_on_cuda(
            {y, x, z}, [dim](const std::vector<Array>& in) { return lax::sort(in, dim, true, 2); },
            "sort two keys " + n);
      }
      if (dt == DType::bool_) continue;
      for (int64_t k : {int64_t(0), int64_t(1), int64_t(7), shape[shape.rank() - 1]}) {
        expect_same_on_cuda(
            {x},
            [k](const std::vector<Array>& in) {
              const auto [v, i] = lax::top_k(in[0], k);
              return std::vector<Array>{v, i};
            },
            "top_k " + std::to_string(k) + " " + dtype_name(dt) + " " + shape.str());
      }
    }
  }
}

TEST(CudaReduceKernels, RandomBitsMatchCpu) {
  PAX_REQUIRE_CUDA();
  const Array key = array(std::vector<uint32_t>{0x9e3779b9u, 42u}, Shape{2});
  for (const Ints& shape : {Ints{1}, Ints{7}, Ints{3, 5}, Ints{1000, 1001}}) {
    expect_same_on_cuda({key}, one([shape](const Array& k) { return lax::random_bits(k, shape); }),
                        "random_bits " + ints_str(shape));
  }
  const Array k0 = random_u32(1001, 1), k1 = random_u32(1001, 2), x0 = random_u32(1001, 3), x1 = random_u32(1001, 4);
  const Fn tf = [](const std::vector<Array>& in) {
    const auto [a, b] = lax::threefry2x32(in[0], in[1], in[2], in[3]);
    return std::vector<Array>{a, b};
  };
  expect_same_on_cuda({k0, k1, x0, x1}, tf, "threefry2x32");
  expect_same_on_cuda({scalar<uint32_t>(7u), k1, x0, x1}, tf, "threefry2x32 broadcast k0");
  expect_same_on_cuda({k0, scalar<uint32_t>(9u), x0, x1}, tf, "threefry2x32 broadcast k1");
}

TEST(CudaReduceKernels, WindowsMatchCpu) {
  PAX_REQUIRE_CUDA();
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::f64}) {
    for (const WindowCase& c : window_cases()) {
      const lax::Window w = lax_window(c);
      const std::string n = std::string(dtype_name(dt)) + " " + c.in.str() + " window " + ints_str(c.dims);
      const Array x = sample(c.in, dt, 40);
      const Array y = lax::reduce_window_max(x, w);
      const Array s = lax::convert_element_type(testing::random_array(y.shape(), DType::f32, 41), dt);
      const Array t = lax::convert_element_type(testing::random_array(c.in, DType::f32, 42), dt);
      expect_same_on_cuda({x}, one([w](const Array& a) { return lax::reduce_window_max(a, w); }),
                          "reduce_window_max " + n);
      expect_same_on_cuda(
          {s, x},
          [w](const std::vector<Array>& in) {
            return std::vector<Array>{lax::select_and_scatter_add(in[0], in[1], w)};
          },
          "select_and_scatter_add " + n);
      expect_same_on_cuda(
          {t, x},
          [w](const std::vector<Array>& in) { return std::vector<Array>{lax::select_and_gather_add(in[0], in[1], w)}; },
          "select_and_gather_add " + n);
    }
  }
}

}  // namespace
}  // namespace pax::cuda
