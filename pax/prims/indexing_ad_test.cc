// VJP / JVP rules of gather and scatter_add against central finite
// differences (f64), second order, jit of the function and of its VJP against
// eager, and hand-computed gradients where indices are clamped, filled,
// duplicated or dropped.
#include <gtest/gtest.h>

#include "pax/testing/transform_check.h"

namespace pax {
namespace {

using testing::ArrayFn;

using Case = testing::AdCase;
constexpr auto rnd = testing::ad_argument;

// Rows of a (n, ...) operand read at `idx` (an (m, 1) index array): the
// gather of an embedding table, in the given mode.
Array gather_rows(const Array& x, const Array& idx, lax::GatherMode mode = lax::GatherMode::clip, double fill = 0.0,
                  int64_t rows = 1) {
  Ints offset_dims, collapsed, slice_sizes = x.shape().dims();
  slice_sizes[0] = rows;
  if (rows == 1) collapsed = {0};
  for (int64_t d = rows == 1 ? 1 : 0; d < x.ndim(); ++d) offset_dims.push_back(d + (rows == 1 ? 0 : 1));
  return lax::gather(x, idx, {offset_dims, collapsed, {0}}, slice_sizes, mode, fill);
}

// Adds each row of `upd` (or each window of `upd.dim(1)` rows) at idx[i].
Array scatter_rows(const Array& x, const Array& idx, const Array& upd) {
  const bool windows = upd.ndim() == x.ndim() + 1;
  Ints window_dims;
  for (int64_t d = 1; d < upd.ndim(); ++d) window_dims.push_back(d);
  return lax::scatter_add(x, idx, upd, {window_dims, windows ? Ints{} : Ints{0}, {0}});
}

std::vector<Case> cases() {
  const Array rows_idx = array<int32_t>({-2, 5, 1, 9}, {4, 1});
  // clang-format off
  return {
      {"take_axis0", [](const std::vector<Array>& a) { return take(a[0], a[1], 0); },
       {rnd({5, 3}, 1), array<int32_t>({3, 0, 3, 4, -1})}},
      {"take_axis1", [](const std::vector<Array>& a) { return take(a[0], a[1], 1); },
       {rnd({3, 5}, 2), array<int32_t>({1, 4, 4, 0}, {2, 2})}},
      {"take_along_axis", [](const std::vector<Array>& a) { return take_along_axis(a[0], a[1], 1); },
       {rnd({3, 4}, 3), array<int64_t>({0, 3, 2, 2, 1, 0}, {3, 2})}},
      {"take_along_axis0", [](const std::vector<Array>& a) { return take_along_axis(a[0], a[1], 0); },
       {rnd({3, 4}, 4), array<int32_t>({2, 0, 1, 1}, {1, 4})}},
      {"embedding", [](const std::vector<Array>& a) { return take(a[0], a[1], 0); },
       {rnd({6, 4}, 5), array<int32_t>({5, 0, 2, 2, 5, 5}, {2, 3})}},
      // Windows (2, 1, 3) at (axis 0, axis 2) starts, axis 1 collapsed, the
      // batch axes of indices between the window axes; windows overlap.
      {"general",
       [](const std::vector<Array>& a) { return lax::gather(a[0], a[1], {{0, 3}, {1}, {0, 2}}, {2, 1, 3}); },
       {rnd({5, 6, 4}, 6), array<int32_t>({1, 1, 3, 0, 0, 1, 3, 1}, {2, 2, 2})}},
      {"clip_rows", [](const std::vector<Array>& a) { return gather_rows(a[0], a[1]); }, {rnd({4, 3}, 7), rows_idx}},
      {"clip_windows",
       [](const std::vector<Array>& a) { return gather_rows(a[0], a[1], lax::GatherMode::clip, 0.0, 2); },
       {rnd({4, 3}, 8), rows_idx}},
      {"clip_u8", [](const std::vector<Array>& a) { return gather_rows(a[0], a[1]); },
       {rnd({4, 3}, 9), array<uint8_t>({200, 1, 3}, {3, 1})}},
      {"fill_rows", [](const std::vector<Array>& a) { return gather_rows(a[0], a[1], lax::GatherMode::fill, 0.5); },
       {rnd({4, 3}, 10), rows_idx}},
      {"fill_windows",
       [](const std::vector<Array>& a) { return gather_rows(a[0], a[1], lax::GatherMode::fill, -1.0, 2); },
       {rnd({4, 3}, 11), array<int32_t>({0, 3, 2, -1}, {4, 1})}},
      {"scatter_duplicates_dropped",
       [](const std::vector<Array>& a) { return scatter_rows(a[0], a[2], a[1]); },
       {rnd({5, 3}, 12), rnd({5, 3}, 13), array<int32_t>({1, 1, 4, 7, -1}, {5, 1})}},
      {"scatter_windows",
       [](const std::vector<Array>& a) { return scatter_rows(a[0], a[2], a[1]); },
       {rnd({5, 4}, 14), rnd({3, 2, 4}, 15), array<int64_t>({0, 3, 4}, {3, 1})}},
  };
  // clang-format on
}

// sin(f): second order then differentiates the rules themselves.
ArrayFn nonlinear(const ArrayFn& f) {
  return [f](const std::vector<Array>& a) { return lax::sin(f(a)); };
}

TEST(IndexingAD, VjpMatchesFiniteDifferences) {
  for (const Case& c : cases()) EXPECT_TRUE(testing::check_vjp(c.f, c.args)) << c.name;
}

TEST(IndexingAD, JvpMatchesFiniteDifferences) {
  for (const Case& c : cases()) EXPECT_TRUE(testing::check_jvp(c.f, c.args)) << c.name;
}

TEST(IndexingAD, SecondOrder) {
  for (const Case& c : cases()) EXPECT_TRUE(testing::check_vjp_order2(nonlinear(c.f), c.args)) << c.name;
}

TEST(IndexingAD, JitMatchesEager) {
  for (const Case& c : cases()) {
    EXPECT_TRUE(testing::check_jit(c.f, c.args)) << c.name;
    EXPECT_TRUE(testing::check_jit(testing::vjp_as_fn(c.f, c.args), c.args)) << c.name << " (vjp)";
  }
}

// Gradient of sum(w * gather(x)) for x of shape (4, 3): w's rows land on the
// rows the gather read.
Array row_grad(const Array& idx, lax::GatherMode mode, int64_t rows) {
  const Array w = lax::reshape(lax::iota(DType::f64, {4 * rows * 3}), rows == 1 ? Ints{4, 3} : Ints{4, rows, 3}) + 1.0;
  return grad([&](const Array& x) { return sum(w * gather_rows(x, idx, mode, 0.5, rows)); })(zeros({4, 3}, DType::f64));
}

TEST(IndexingAD, ClipGradientLandsOnClampedPositions) {
  const Array idx = array<int32_t>({-2, 5, 1, 9}, {4, 1});
  // Rows read: 0, 3, 1, 3.
  EXPECT_TRUE(
      testing::all_close(row_grad(idx, lax::GatherMode::clip, 1), {1, 2, 3, 7, 8, 9, 0, 0, 0, 4 + 10, 5 + 11, 6 + 12}));
  // Windows of 2 rows start at 0, 2, 1, 2.
  EXPECT_TRUE(testing::all_close(
      row_grad(idx, lax::GatherMode::clip, 2),
      {1, 2, 3, 4 + 13, 5 + 14, 6 + 15, 7 + 16 + 19, 8 + 17 + 20, 9 + 18 + 21, 10 + 22, 11 + 23, 12 + 24}));
}

TEST(IndexingAD, FillGradientSkipsFilledWindows) {
  const Array idx = array<int32_t>({-2, 5, 1, 2}, {4, 1});
  // Only the reads of rows 1 and 2 are in range.
  EXPECT_TRUE(testing::all_close(row_grad(idx, lax::GatherMode::fill, 1), {0, 0, 0, 7, 8, 9, 10, 11, 12, 0, 0, 0}));
  // Windows of 2 rows: only the ones at 1 and 2 fit.
  EXPECT_TRUE(testing::all_close(row_grad(idx, lax::GatherMode::fill, 2),
                                 {0, 0, 0, 13, 14, 15, 16 + 19, 17 + 20, 18 + 21, 22, 23, 24}));
}

TEST(IndexingAD, ScatterAddGradients) {
  const Array idx = array<int32_t>({1, 1, 4, 7, -1}, {5, 1});
  const Array w = array<double>({1, 2, 3, 4, 5}, {5, 1});
  auto loss = [&](const Array& x, const Array& u) { return sum(w * scatter_rows(x, idx, u)); };
  auto [gx, gu] = grad<0, 1>(loss)(zeros({5, 1}, DType::f64), zeros({5, 1}, DType::f64));
  EXPECT_TRUE(testing::all_close(gx, {1, 2, 3, 4, 5}));
  // Updates read the weight of the row they were added to; dropped ones get 0.
  EXPECT_TRUE(testing::all_close(gu, {2, 2, 5, 0, 0}));
}

TEST(IndexingAD, EmbeddingLookupGrad) {
  const Array ids = array<int32_t>({3, 1, 3, 0, 3, 1}, {2, 3});
  const Array table = rnd({5, 2}, 20);
  const Array w = rnd({2, 3, 2}, 21);
  Array g = grad([&](const Array& t) { return sum(w * take(t, ids, 0)); })(table);
  std::vector<double> want(10, 0.0), wv = w.to_vector<double>();
  std::vector<int32_t> iv = ids.to_vector<int32_t>();
  for (size_t p = 0; p < iv.size(); ++p) {
    for (size_t j = 0; j < 2; ++j) want[size_t(iv[p]) * 2 + j] += wv[p * 2 + j];
  }
  EXPECT_TRUE(testing::all_close(g, want, 1e-12, 1e-12));
  EXPECT_TRUE(testing::all_close(jit(grad([&](const Array& t) { return sum(w * take(t, ids, 0)); }))(table), want,
                                 1e-12, 1e-12));
}

TEST(IndexingAD, Bf16GradientKeepsDtype) {
  const Array x = testing::random_array({4, 3}, DType::bf16, 22);
  Array g = grad([](const Array& t) { return sum(take(t, array<int32_t>({2, 2, 0}), 0).astype(DType::f32)); })(x);
  EXPECT_EQ(g.dtype(), DType::bf16);
  EXPECT_TRUE(testing::all_close(g, {1, 1, 1, 0, 0, 0, 2, 2, 2, 0, 0, 0}, 0, 0));
}

TEST(IndexingAD, EmptyIndicesGiveZeroGradients) {
  const Array x = rnd({4, 3}, 24);
  Array g = grad([](const Array& t) { return sum(take(t, zeros({0}, DType::i32), 0)); })(x);
  EXPECT_TRUE(testing::all_close(g, std::vector<double>(12, 0.0), 0, 0));
  auto [gx, gu] = grad<0, 1>([](const Array& t, const Array& u) {
    return sum(scatter_rows(t, zeros({0, 1}, DType::i32), u));
  })(x, zeros({0, 3}, DType::f64));
  EXPECT_TRUE(testing::all_close(gx, std::vector<double>(12, 1.0), 0, 0));
  EXPECT_EQ(gu.shape(), (Shape{0, 3}));
}

}  // namespace
}  // namespace pax
