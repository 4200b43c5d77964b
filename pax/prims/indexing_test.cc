// gather and scatter_add against hand-computed values and slow reference loops
// (XLA semantics, index vector on the last axis of the indices).
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "pax/interp/interpreter.h"
#include "pax/ops/lax.h"
#include "pax/testing/testing.h"

namespace pax {
namespace {

using lax::GatherDimensionNumbers;
using lax::GatherMode;
using lax::ScatterDimensionNumbers;
using testing::all_close;
using testing::random_array;
using testing::ravel;
using testing::unravel;

Array make(const std::vector<double>& v, const Shape& shape, DType dtype) {
  std::vector<unsigned char> bytes(v.size() * itemsize(dtype));
  convert_host(DType::f64, v.data(), dtype, bytes.data(), v.size());
  return from_host(bytes.data(), shape, dtype);
}

Array arange(const Shape& s, DType dtype = DType::f32) {
  std::vector<double> v(size_t(s.numel()));
  std::iota(v.begin(), v.end(), 0.0);
  return make(v, s, dtype);
}

Array random_indices(const Shape& s, int64_t lo, int64_t hi, uint32_t seed, DType dtype = DType::i32) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> dist(lo, hi);
  std::vector<double> v(size_t(s.numel()));
  for (double& x : v) x = double(dist(gen));
  return make(v, s, dtype);
}

// The value `v` after rounding to `dtype`.
double round_to(DType dtype, double v) {
  unsigned char buf[8];
  double out;
  convert_host(DType::f64, &v, dtype, buf, 1);
  convert_host(dtype, buf, DType::f64, &out, 1);
  return out;
}

bool contains(const Ints& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Operand coordinates of one window: its start (from the index vector, clamped
// or flagged out of range) plus the window position `pos` of the non-skipped axes.
// Returns false when some start is outside [0, dim - window].
bool window_coords(const std::vector<int64_t>& iv, const Ints& index_map, const Shape& operand, const Ints& window,
                   const Ints& skipped, const std::vector<int64_t>& pos, bool clip, std::vector<int64_t>& coord) {
  coord.assign(size_t(operand.rank()), 0);
  for (size_t k = 0; k < index_map.size(); ++k) {
    const int64_t d = index_map[k];
    int64_t s = iv[k];
    const int64_t hi = operand[d] - window[size_t(d)];
    if (s < 0 || s > hi) {
      if (!clip) return false;
      s = std::clamp<int64_t>(s, 0, hi);
    }
    coord[size_t(d)] = s;
  }
  size_t j = 0;
  for (int64_t d = 0; d < operand.rank(); ++d) {
    if (!contains(skipped, d)) coord[size_t(d)] += pos[j++];
  }
  return true;
}

// Slow XLA gather over the output index space.
std::vector<double> ref_gather(const Array& x, const Array& indices, const GatherDimensionNumbers& dn,
                               const Ints& slice_sizes, const Shape& out_shape, bool fill, double fill_value) {
  const std::vector<double> xv = x.to_vector<double>();
  const std::vector<int64_t> iv = indices.to_vector<int64_t>();
  const int64_t k = indices.dim(-1);
  Shape batch_shape(std::vector<int64_t>(indices.shape().begin(), indices.shape().end() - 1));
  std::vector<double> out(size_t(out_shape.numel()));
  std::vector<int64_t> coord;
  for (int64_t o = 0; o < out_shape.numel(); ++o) {
    std::vector<int64_t> oi = unravel(o, out_shape), bi, pos;
    for (int64_t q = 0; q < out_shape.rank(); ++q) (contains(dn.offset_dims, q) ? pos : bi).push_back(oi[size_t(q)]);
    const int64_t b = ravel(bi, batch_shape);
    std::vector<int64_t> vec(iv.begin() + b * k, iv.begin() + (b + 1) * k);
    const bool ok =
        window_coords(vec, dn.start_index_map, x.shape(), slice_sizes, dn.collapsed_slice_dims, pos, !fill, coord);
    out[size_t(o)] = ok ? xv[size_t(ravel(coord, x.shape()))] : fill_value;
  }
  return out;
}

// Slow XLA scatter-add in update order, rounding to the dtype after every add.
std::vector<double> ref_scatter_add(const Array& x, const Array& indices, const Array& updates,
                                    const ScatterDimensionNumbers& dn) {
  std::vector<double> out = x.to_vector<double>();
  const std::vector<double> uv = updates.to_vector<double>();
  const std::vector<int64_t> iv = indices.to_vector<int64_t>();
  const int64_t k = indices.dim(-1);
  Shape batch_shape(std::vector<int64_t>(indices.shape().begin(), indices.shape().end() - 1));
  Ints window(size_t(x.ndim()), 1);
  for (size_t j = 0, d = 0; j < dn.update_window_dims.size(); ++j, ++d) {
    while (contains(dn.inserted_window_dims, int64_t(d))) ++d;
    window[d] = updates.dim(dn.update_window_dims[j]);
  }
  // Contributions in batch order, then window order.
  std::vector<std::pair<int64_t, int64_t>> order;  // (batch index, update element)
  for (int64_t u = 0; u < updates.size(); ++u) {
    std::vector<int64_t> ui = unravel(u, updates.shape()), bi;
    for (int64_t q = 0; q < updates.ndim(); ++q) {
      if (!contains(dn.update_window_dims, q)) bi.push_back(ui[size_t(q)]);
    }
    order.emplace_back(ravel(bi, batch_shape), u);
  }
  std::stable_sort(order.begin(), order.end(), [](auto& a, auto& b) { return a.first < b.first; });
  std::vector<int64_t> coord;
  for (auto [b, u] : order) {
    std::vector<int64_t> ui = unravel(u, updates.shape()), pos;
    for (int64_t q = 0; q < updates.ndim(); ++q) {
      if (contains(dn.update_window_dims, q)) pos.push_back(ui[size_t(q)]);
    }
    std::vector<int64_t> vec(iv.begin() + b * k, iv.begin() + (b + 1) * k);
    if (!window_coords(vec, dn.scatter_dims_to_operand_dims, x.shape(), window, dn.inserted_window_dims, pos, false,
                       coord)) {
      continue;
    }
    double& e = out[size_t(ravel(coord, x.shape()))];
    e = round_to(x.dtype(), e + uv[size_t(u)]);
  }
  return out;
}

// Ordering of updates matters for floats, so the reference is exact.
::testing::AssertionResult same(const Array& got, const std::vector<double>& want) {
  return all_close(got, want, 0.0, 0.0);
}

// Index vector [rows, 1] -> rows of a [V, D] table: the embedding lookup form.
GatherDimensionNumbers rows_dn(int64_t offset_axis) { return {{offset_axis}, {0}, {0}}; }

// ---------------------------------------------------------------------------
// gather

TEST(Gather, TakeAxis0IsEmbeddingLookup) {
  Array x = arange({5, 3});
  Array idx = array<int32_t>({3, 0, 4, 3}, {2, 2, 1});
  Array y = lax::gather(x, idx, rows_dn(2), {1, 3});
  EXPECT_EQ(y.shape(), (Shape{2, 2, 3}));
  EXPECT_TRUE(same(y, {9, 10, 11, 0, 1, 2, 12, 13, 14, 9, 10, 11}));
}

TEST(Gather, TakeAxis1) {
  // jnp.take(x, [2, 0, 3], axis=1) on a [3, 4] array.
  Array x = arange({3, 4});
  Array idx = array<int64_t>({2, 0, 3}, {3, 1});
  Array y = lax::gather(x, idx, {{0}, {1}, {1}}, {3, 1});
  EXPECT_EQ(y.shape(), (Shape{3, 3}));
  EXPECT_TRUE(same(y, {2, 0, 3, 6, 4, 7, 10, 8, 11}));
  // A longer one through the per-element path, against the reference.
  Array big = random_array({37, 300}, DType::f32, 1);
  Array bidx = random_indices({1000, 1}, 0, 299, 2);
  Array by = lax::gather(big, bidx, {{0}, {1}, {1}}, {37, 1});
  EXPECT_EQ(by.shape(), (Shape{37, 1000}));
  EXPECT_TRUE(same(by, ref_gather(big, bidx, {{0}, {1}, {1}}, {37, 1}, by.shape(), false, 0)));
}

TEST(Gather, TakeAlongAxis) {
  // take_along_axis(x, idx, axis=1): indices pair (row iota, idx), slices of size 1.
  auto take_along = [](const Array& x, const std::vector<int64_t>& cols, int64_t m) {
    const int64_t rows = x.dim(0);
    std::vector<int32_t> iv;
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < m; ++j) {
        iv.push_back(int32_t(r));
        iv.push_back(int32_t(cols[size_t(r * m + j)]));
      }
    }
    return lax::gather(x, array(iv, {rows, m, 2}), {{}, {0, 1}, {0, 1}}, {1, 1});
  };
  Array x = arange({3, 4});
  Array y = take_along(x, {3, 0, 1, 1, 2, 2}, 2);
  EXPECT_EQ(y.shape(), (Shape{3, 2}));
  EXPECT_TRUE(same(y, {3, 0, 5, 5, 10, 10}));

  // Rows long enough to be split into blocks across threads.
  const int64_t rows = 3, n = 500, m = 9000;
  Array xb = random_array({rows, n}, DType::bf16, 3);
  std::vector<int64_t> cols = random_indices({rows * m}, 0, n - 1, 4, DType::i64).to_vector<int64_t>();
  Array yb = take_along(xb, cols, m);
  std::vector<double> xv = xb.to_vector<double>(), want;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < m; ++j) want.push_back(xv[size_t(r * n + cols[size_t(r * m + j)])]);
  }
  EXPECT_TRUE(same(yb, want));
}

TEST(Gather, EmbeddingLookupLarge) {
  for (DType dt : {DType::f32, DType::bf16, DType::f64, DType::u8}) {
    Array table = random_array({1000, 64}, dt, 5, 0, 200);
    for (DType it : {DType::i32, DType::i64, DType::u32}) {
      Array idx = random_indices({8, 128, 1}, 0, 999, 6, it);
      Array y = lax::gather(table, idx, rows_dn(2), {1, 64});
      EXPECT_EQ(y.shape(), (Shape{8, 128, 64}));
      EXPECT_EQ(y.dtype(), dt);
      EXPECT_TRUE(same(y, ref_gather(table, idx, rows_dn(2), {1, 64}, y.shape(), false, 0)));
    }
  }
}

TEST(Gather, OneHotRowsOfIdentity) {
  std::vector<double> eye(16, 0.0);
  for (int i = 0; i < 4; ++i) eye[size_t(i * 5)] = 1.0;
  Array labels = array<uint8_t>({2, 0, 3, 3, 1}, {5, 1});
  Array y = lax::gather(make(eye, {4, 4}, DType::bool_), labels, rows_dn(1), {1, 4});
  EXPECT_EQ(y.dtype(), DType::bool_);
  EXPECT_TRUE(same(y, {0, 0, 1, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 1, 0, 1, 0, 0}));
}

TEST(Gather, GeneralMultiDimSlices) {
  // operand [4, 5, 6]; index vectors address axes (2, 0); slices [2, 3, 1] with
  // axis 2 collapsed; output [3, 2(slice axis 0), 2, 3(slice axis 1)].
  const GatherDimensionNumbers dn{{1, 3}, {2}, {2, 0}};
  const Ints sizes{2, 3, 1};
  Array x = arange({4, 5, 6});
  Array idx = array<int32_t>({0, 0, 5, 2, 3, 1, -1, 3, 9, 9, 2, -4}, {3, 2, 2});
  for (bool fill : {false, true}) {
    Array y = lax::gather(x, idx, dn, sizes, fill ? GatherMode::fill : GatherMode::clip, -7.0);
    EXPECT_EQ(y.shape(), (Shape{3, 2, 2, 3}));
    EXPECT_TRUE(same(y, ref_gather(x, idx, dn, sizes, y.shape(), fill, -7.0)));
  }
  // Operand [6, 7, 8] (i64) with slices [3, 7, 2]: full rows of axis 1, index
  // vector (axis 0, axis 2), offset axes before the batch axes.
  const GatherDimensionNumbers dn2{{0, 1, 2}, {}, {0, 2}};
  Array x2 = arange({6, 7, 8}, DType::i64);
  Array idx2 = random_indices({4, 5, 2}, -2, 8, 7, DType::i64);
  for (bool fill : {false, true}) {
    Array y2 = lax::gather(x2, idx2, dn2, {3, 7, 2}, fill ? GatherMode::fill : GatherMode::clip, 0.0);
    EXPECT_EQ(y2.shape(), (Shape{3, 7, 2, 4, 5}));
    EXPECT_TRUE(same(y2, ref_gather(x2, idx2, dn2, {3, 7, 2}, y2.shape(), fill, 0.0)));
  }
}

TEST(Gather, ClipAndFillOutOfRange) {
  Array x = array<float>({10, 11, 12, 13, 14});
  Array idx = array<int32_t>({-2, 0, 4, 7}, {4, 1});
  const GatherDimensionNumbers dn{{}, {0}, {0}};
  EXPECT_TRUE(same(lax::gather(x, idx, dn, {1}), {10, 10, 14, 14}));
  EXPECT_TRUE(same(lax::gather(x, idx, dn, {1}, GatherMode::fill, -1.0), {-1, 10, 14, -1}));
  // Windows of 2: start 4 clamps to 3 under clip; under fill the whole window is filled.
  Array starts = array<int64_t>({3, 4, -1}, {3, 1});
  EXPECT_TRUE(same(lax::gather(x, starts, {{1}, {}, {0}}, {2}), {13, 14, 13, 14, 10, 11}));
  EXPECT_TRUE(same(lax::gather(x, starts, {{1}, {}, {0}}, {2}, GatherMode::fill, 0.5), {13, 14, 0.5, 0.5, 0.5, 0.5}));
  // NaN fill for floats.
  Array nan_fill = lax::gather(x, idx, dn, {1}, GatherMode::fill, std::nan(""));
  EXPECT_TRUE(std::isnan(nan_fill.to_vector<double>()[0]));
}

TEST(Gather, ZeroSizeAndScalarOperand) {
  Array table = arange({4, 3});
  Array none = lax::gather(table, make({}, {0, 1}, DType::i32), rows_dn(1), {1, 3});
  EXPECT_EQ(none.shape(), (Shape{0, 3}));
  Array empty_slice = lax::gather(table, array<int32_t>({1, 2}, {2, 1}), rows_dn(1), {1, 0});
  EXPECT_EQ(empty_slice.shape(), (Shape{2, 0}));
  // A 0-d operand with an empty index vector: every batch element is the scalar.
  Array s = lax::gather(scalar(2.5f), make({}, {3, 0}, DType::i32), {{}, {}, {}}, {});
  EXPECT_EQ(s.shape(), (Shape{3}));
  EXPECT_TRUE(same(s, {2.5, 2.5, 2.5}));
}

TEST(Gather, Errors) {
  Array x = arange({4, 3});
  Array idx = array<int32_t>({1, 2}, {2, 1});
  EXPECT_PAX_ERROR(lax::gather(x, array<float>({1, 2}, {2, 1}), rows_dn(1), {1, 3}),
                   "gather: operand f32[4,3], indices f32[2,1]: indices must have an integer dtype");
  EXPECT_PAX_ERROR(lax::gather(x, scalar<int32_t>(1), rows_dn(0), {1, 3}), "indices needs rank >= 1");
  EXPECT_PAX_ERROR(lax::gather(x, idx, rows_dn(1), {1}), "slice_sizes (1,) needs one entry per operand axis (2)");
  EXPECT_PAX_ERROR(lax::gather(x, idx, rows_dn(1), {1, 4}), "it must lie in [0, 3]");
  EXPECT_PAX_ERROR(lax::gather(x, idx, rows_dn(1), {1, -1}), "it must lie in [0, 3]");
  EXPECT_PAX_ERROR(lax::gather(x, idx, {{1}, {0}, {0, 1}}, {1, 3}), "index vector (last axis of indices) has length 1");
  EXPECT_PAX_ERROR(lax::gather(x, array<int32_t>({1, 2}, {1, 2}), {{}, {0, 1}, {1, 1}}, {1, 1}),
                   "repeats operand axis 1");
  EXPECT_PAX_ERROR(lax::gather(x, idx, {{1}, {0}, {2}}, {1, 3}), "start_index_map (2,) has entry 2 outside [0, 2)");
  EXPECT_PAX_ERROR(lax::gather(x, array<int32_t>({1, 2}, {1, 2}), {{}, {1, 0}, {0, 1}}, {1, 1}),
                   "must be sorted in increasing order");
  EXPECT_PAX_ERROR(lax::gather(x, idx, {{1}, {0}, {0}}, {2, 3}), "whose slice size is 2 (must be 1)");
  EXPECT_PAX_ERROR(lax::gather(x, idx, {{1, 2}, {0}, {0}}, {1, 3}), "operand axes are not collapsed");
  EXPECT_PAX_ERROR(lax::gather(x, idx, rows_dn(2), {1, 3}), "offset_dims (2,) has entry 2 outside [0, 2)");
  EXPECT_PAX_ERROR(lax::gather(x, idx, {{1, 0}, {}, {0}}, {1, 3}), "must be sorted in increasing order");
  Params bad_mode{{"offset_dims", Ints{1}},    {"collapsed_slice_dims", Ints{0}}, {"start_index_map", Ints{0}},
                  {"slice_sizes", Ints{1, 3}}, {"mode", std::string("wrap")},     {"fill_value", 0.0}};
  EXPECT_PAX_ERROR(bind1(Prim::gather, {x, idx}, bad_mode), "mode must be \"clip\" or \"fill\"");
}

// ---------------------------------------------------------------------------
// scatter_add

// updates [N, D] added into rows of a [V, D] operand.
ScatterDimensionNumbers rows_sdn() { return {{1}, {0}, {0}}; }

TEST(ScatterAdd, EmbeddingGradientWithDuplicates) {
  Array zeros = make(std::vector<double>(5 * 3, 0.0), {5, 3}, DType::f32);
  Array idx = array<int32_t>({1, 3, 1, 1}, {4, 1});
  Array upd = arange({4, 3});
  EXPECT_TRUE(same(lax::scatter_add(zeros, idx, upd, rows_sdn()),
                   {0, 0, 0, 0 + 6 + 9, 1 + 7 + 10, 2 + 8 + 11, 0, 0, 0, 3, 4, 5, 0, 0, 0}));
  // Large enough to run in column chunks; exact against the in-order reference.
  for (DType dt : {DType::f32, DType::bf16, DType::f16, DType::f64, DType::i32}) {
    Array table = random_array({50, 200}, dt, 8, -4, 4);
    Array rows = random_indices({3000, 1}, 0, 49, 9);
    Array grads = random_array({3000, 200}, dt, 10, -4, 4);
    Array got = lax::scatter_add(table, rows, grads, rows_sdn());
    EXPECT_EQ(got.dtype(), dt);
    EXPECT_TRUE(same(got, ref_scatter_add(table, rows, grads, rows_sdn()))) << dtype_name(dt);
  }
}

TEST(ScatterAdd, DropsOutOfBoundsWindows) {
  Array zeros = make(std::vector<double>(5 * 2, 0.0), {5, 2}, DType::f32);
  Array idx = array<int64_t>({-1, 2, 5, 4, 2}, {5, 1});
  Array upd = make(std::vector<double>(10, 1.0), {5, 2}, DType::f32);
  EXPECT_TRUE(same(lax::scatter_add(zeros, idx, upd, rows_sdn()), {0, 0, 0, 0, 2, 2, 0, 0, 1, 1}));
  // Windows of 2 along an indexed axis: a start of 5 would leave [0, 6).
  Array v = make(std::vector<double>(6, 0.0), {6}, DType::f32);
  Array starts = array<int32_t>({4, 5, -1, 0}, {4, 1});
  Array w = array<float>({1, 2, 10, 20, 100, 200, 1000, 2000}, {4, 2});
  EXPECT_TRUE(same(lax::scatter_add(v, starts, w, {{1}, {}, {0}}), {1000, 2000, 0, 0, 1, 2}));
}

TEST(ScatterAdd, GeneralMultiDimWindows) {
  // The transpose of Gather.GeneralMultiDimSlices.
  const ScatterDimensionNumbers dn{{1, 3}, {2}, {2, 0}};
  Array x = random_array({4, 5, 6}, DType::f32, 11);
  Array idx = array<int32_t>({0, 0, 5, 2, 3, 1, -1, 3, 9, 9, 2, 2}, {3, 2, 2});
  Array upd = random_array({3, 2, 2, 3}, DType::f32, 12);
  EXPECT_TRUE(same(lax::scatter_add(x, idx, upd, dn), ref_scatter_add(x, idx, upd, dn)));
  // Window axes before the batch axes, and indices of every integer dtype.
  const ScatterDimensionNumbers dn2{{0, 1}, {1}, {1, 0}};
  Array x2 = random_array({7, 9, 5}, DType::f64, 13);
  for (DType it : {DType::u8, DType::u32, DType::i32, DType::i64}) {
    Array idx2 = random_indices({40, 2}, 0, 7, 14, it);
    Array upd2 = random_array({3, 5, 40}, DType::f64, 15);
    EXPECT_TRUE(same(lax::scatter_add(x2, idx2, upd2, dn2), ref_scatter_add(x2, idx2, upd2, dn2)));
  }
}

TEST(ScatterAdd, LargeWindowsSplitAcrossChunks) {
  // Column chunks along an unindexed window axis that is not the innermost.
  const ScatterDimensionNumbers cols{{1, 2, 3}, {}, {2}};
  Array x = random_array({8, 80, 6}, DType::f32, 24);
  Array idx = random_indices({60, 1}, -1, 5, 25);
  Array upd = random_array({60, 8, 80, 2}, DType::f32, 26);
  EXPECT_TRUE(same(lax::scatter_add(x, idx, upd, cols), ref_scatter_add(x, idx, upd, cols)));
  // Region chunks along an indexed axis with windows of 3 that straddle chunk
  // boundaries (and some that leave the operand).
  const ScatterDimensionNumbers rows{{1, 2}, {}, {0}};
  Array x2 = random_array({200, 7}, DType::f32, 27);
  Array idx2 = random_indices({5000, 1}, -1, 199, 28);
  Array upd2 = random_array({5000, 3, 7}, DType::f32, 29);
  EXPECT_TRUE(same(lax::scatter_add(x2, idx2, upd2, rows), ref_scatter_add(x2, idx2, upd2, rows)));
}

TEST(ScatterAdd, ScalarScatterSplitsByRegion) {
  // take_along_axis gradient: one element per window, both axes indexed.
  Array x = make(std::vector<double>(64 * 100, 0.0), {64, 100}, DType::f32);
  Array idx = random_indices({40000, 2}, 0, 63, 16);
  Array upd = random_array({40000}, DType::f32, 17, -100, 100);
  const ScatterDimensionNumbers dn{{}, {0, 1}, {0, 1}};
  EXPECT_TRUE(same(lax::scatter_add(x, idx, upd, dn), ref_scatter_add(x, idx, upd, dn)));
}

TEST(ScatterAdd, BitIdenticalForAnyThreadCount) {
  const int saved = omp_get_max_threads();
  struct Case {
    Array x, idx, upd;
    ScatterDimensionNumbers dn;
  };
  std::vector<Case> cases;
  // Embedding gradient (column chunks), values of very different magnitudes so
  // that the order of additions shows in the result.
  cases.push_back({make(std::vector<double>(100 * 96, 0.0), {100, 96}, DType::f32),
                   random_indices({4000, 1}, 0, 99, 18), random_array({4000, 96}, DType::f32, 19, -1e6, 1e6),
                   rows_sdn()});
  cases.push_back({make(std::vector<double>(100 * 96, 0.0), {100, 96}, DType::bf16),
                   random_indices({4000, 1}, 0, 99, 20), random_array({4000, 96}, DType::bf16, 21, -1e3, 1e3),
                   rows_sdn()});
  // Scalar scatter (region chunks).
  cases.push_back({make(std::vector<double>(1000, 0.0), {1000}, DType::f32), random_indices({100000, 1}, 0, 999, 22),
                   random_array({100000}, DType::f32, 23, -1e6, 1e6), ScatterDimensionNumbers{{}, {0}, {0}}});
  // Empty index vectors: every window lands on the whole operand, so only
  // column chunks can split the work.
  cases.push_back({make(std::vector<double>(64 * 32, 0.0), {64, 32}, DType::f32), make({}, {300, 0}, DType::i32),
                   random_array({300, 64, 32}, DType::f32, 24, -1e6, 1e6), ScatterDimensionNumbers{{1, 2}, {}, {}}});
  for (const Case& c : cases) {
    std::vector<std::vector<float>> results;
    for (int threads : {1, 2, 3}) {
      omp_set_num_threads(threads);
      results.push_back(lax::scatter_add(c.x, c.idx, c.upd, c.dn).to_vector<float>());
    }
    omp_set_num_threads(saved);
    for (size_t r = 1; r < results.size(); ++r) {
      EXPECT_EQ(std::memcmp(results[0].data(), results[r].data(), results[0].size() * sizeof(float)), 0);
    }
    EXPECT_TRUE(same(lax::scatter_add(c.x, c.idx, c.upd, c.dn), ref_scatter_add(c.x, c.idx, c.upd, c.dn)));
  }
}

TEST(ScatterAdd, ZeroSize) {
  Array x = arange({4, 3});
  Array got = lax::scatter_add(x, make({}, {0, 1}, DType::i32), make({}, {0, 3}, DType::f32), rows_sdn());
  EXPECT_TRUE(same(got, x.to_vector<double>()));
  Array empty = make({}, {0, 3}, DType::f32);
  Array into_empty =
      lax::scatter_add(empty, array<int32_t>({0}, {1, 1}), make({}, {1, 0, 3}, DType::f32), {{1, 2}, {}, {0}});
  EXPECT_EQ(into_empty.shape(), (Shape{0, 3}));
}

TEST(ScatterAdd, Errors) {
  Array x = arange({4, 3});
  Array idx = array<int32_t>({1, 2}, {2, 1});
  Array upd = arange({2, 3});
  EXPECT_PAX_ERROR(lax::scatter_add(x, idx, arange({2, 3}, DType::f64), rows_sdn()),
                   "scatter_add: operand f32[4,3], indices i32[2,1], updates f64[2,3]: updates must have the "
                   "operand's dtype float32");
  EXPECT_PAX_ERROR(lax::scatter_add(make({1, 0}, {2}, DType::bool_), array<int32_t>({1}, {1, 1}),
                                    make({1}, {1}, DType::bool_), {{}, {0}, {0}}),
                   "operand must have a numeric dtype, got bool");
  EXPECT_PAX_ERROR(lax::scatter_add(x, array<float>({1, 2}, {2, 1}), upd, rows_sdn()), "integer dtype");
  EXPECT_PAX_ERROR(lax::scatter_add(x, scalar<int32_t>(1), arange({3}), {{0}, {0}, {0}}), "rank >= 1");
  EXPECT_PAX_ERROR(lax::scatter_add(x, idx, upd, {{1}, {0}, {0, 1}}), "has 2 entries but the index vector");
  EXPECT_PAX_ERROR(lax::scatter_add(x, idx, upd, {{1}, {0}, {3}}), "outside [0, 2)");
  EXPECT_PAX_ERROR(lax::scatter_add(x, array<int32_t>({1, 1}, {1, 2}), arange({1}), {{}, {0, 1}, {1, 1}}),
                   "repeats operand axis 1");
  EXPECT_PAX_ERROR(lax::scatter_add(x, array<int32_t>({1, 1}, {1, 2}), arange({1}), {{}, {1, 0}, {0, 1}}),
                   "inserted_window_dims (1, 0) must be sorted");
  EXPECT_PAX_ERROR(lax::scatter_add(x, idx, upd, {{1}, {}, {0}}), "operand axes are not inserted");
  EXPECT_PAX_ERROR(lax::scatter_add(x, idx, arange({2, 3, 1}), rows_sdn()), "updates must have rank 2");
  EXPECT_PAX_ERROR(lax::scatter_add(x, idx, arange({4, 2}), {{0}, {0}, {0}}), "window axis 0 of updates has size 4");
  EXPECT_PAX_ERROR(lax::scatter_add(x, idx, arange({3, 3}), rows_sdn()), "batch axis 0 of updates has size 3");
  EXPECT_PAX_ERROR(lax::scatter_add(x, idx, arange({2, 4}), rows_sdn()), "only 3");
  EXPECT_PAX_ERROR(lax::scatter_add(x, idx, upd, {{2}, {0}, {0}}), "update_window_dims (2,) has entry 2 outside");
}

}  // namespace
}  // namespace pax
