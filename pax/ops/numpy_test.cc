// numpy-level API: broadcasting, promotion with weak literals, creation,
// arithmetic semantics, reductions, shape manipulation, indexing, matmul,
// einsum — against hand values and slow reference loops.
#include "pax/ops/numpy.h"

#include <gtest/gtest.h>

#include <cmath>

#include "pax/testing/testing.h"

namespace pax {
namespace {

using testing::all_close;
using testing::random_array;

TEST(Numpy, BroadcastingFollowsNumpy) {
  Array a = reshape(arange(6).astype(DType::f32), {2, 3});
  Array b = array<float>({10, 20, 30});
  EXPECT_TRUE(all_close(a + b, {10, 21, 32, 13, 24, 35}));
  Array col = array<float>({1, 2}, {2, 1});
  EXPECT_TRUE(all_close(a * col, {0, 1, 2, 6, 8, 10}));
  EXPECT_EQ((col + b).shape(), (Shape{2, 3}));
  EXPECT_EQ(broadcast_shapes({8, 1, 6, 1}, {7, 1, 5}), (Shape{8, 7, 6, 5}));
  EXPECT_PAX_ERROR(a + array<float>({1, 2}), "could not be broadcast together with shapes (2, 3) and (2,)");
  EXPECT_EQ((scalar(2.0f) + scalar(3.0f)).ndim(), 0);
  Array z = zeros({0, 3});
  EXPECT_EQ((z + b).shape(), (Shape{0, 3}));
}

TEST(Numpy, PromotionWithWeakLiterals) {
  Array h = ones({2}, DType::bf16);
  EXPECT_EQ((h * 0.5).dtype(), DType::bf16);
  EXPECT_EQ((h + 1).dtype(), DType::bf16);
  Array i = arange(3);
  EXPECT_EQ(i.dtype(), DType::i32);
  EXPECT_EQ((i + 1).dtype(), DType::i32);
  EXPECT_EQ((i * 1.5).dtype(), DType::f32);
  EXPECT_EQ((i / 2).dtype(), DType::f32);
  EXPECT_TRUE(all_close(i / 2, {0, 0.5, 1}));
  EXPECT_EQ((array<uint8_t>({1}) + 1).dtype(), DType::u8);
  EXPECT_EQ((array<uint8_t>({1}) + array<int32_t>({1})).dtype(), DType::i32);
  EXPECT_EQ((h + ones({2}, DType::f16)).dtype(), DType::f32);
  // A literal is materialised exactly in the result dtype.
  Array d = array<double>({1.0});
  EXPECT_EQ((d + 0.1).item<double>(), 1.1);
  EXPECT_EQ(result_type({h, 2.0}), DType::bf16);
}

TEST(Numpy, IntegerDivisionAndRemainderArePythonic) {
  Array a = array<int32_t>({7, -7, 7, -7});
  Array b = array<int32_t>({2, 2, -2, -2});
  EXPECT_EQ(floor_divide(a, b).to_vector<int32_t>(), (std::vector<int32_t>{3, -4, -4, 3}));
  EXPECT_EQ(remainder(a, b).to_vector<int32_t>(), (std::vector<int32_t>{1, 1, -1, -1}));
  Array f = array<float>({7, -7, 7, -7});
  Array g = array<float>({2, 2, -2, -2});
  EXPECT_TRUE(all_close(floor_divide(f, g), {3, -4, -4, 3}));
  EXPECT_TRUE(all_close(remainder(f, g), {1, 1, -1, -1}));
  EXPECT_TRUE(all_close(power(array<float>({2, 3}), 2), {4, 9}));
  EXPECT_TRUE(all_close(power(array<float>({4, 9}), 0.5), {2, 3}));
  EXPECT_EQ(power(array<int32_t>({2}), 3).item<int32_t>(), 8);
}

TEST(Numpy, CreationFunctions) {
  EXPECT_TRUE(all_close(zeros({2, 2}), {0, 0, 0, 0}));
  EXPECT_TRUE(all_close(full({3}, 2.5), {2.5, 2.5, 2.5}));
  EXPECT_EQ(ones({2}, DType::i64).dtype(), DType::i64);
  EXPECT_TRUE(all_close(arange(5), {0, 1, 2, 3, 4}));
  EXPECT_TRUE(all_close(arange(2, 10, 3), {2, 5, 8}));
  EXPECT_TRUE(all_close(arange(0.0, 1.0, 0.25), {0, 0.25, 0.5, 0.75}));
  EXPECT_EQ(arange(0.0, 1.0, 0.25).dtype(), DType::f32);
  EXPECT_TRUE(all_close(arange(5, 0, -2), {5, 3, 1}));
  EXPECT_EQ(arange(3, 3).size(), 0);
  EXPECT_TRUE(all_close(linspace(0, 1, 5), {0, 0.25, 0.5, 0.75, 1}));
  EXPECT_TRUE(all_close(linspace(0, 1, 4, false), {0, 0.25, 0.5, 0.75}));
  EXPECT_EQ(linspace(0, 0.3, 7).to_vector<float>().back(), 0.3f);
  EXPECT_TRUE(all_close(eye(2, 3), {1, 0, 0, 0, 1, 0}));
  EXPECT_TRUE(all_close(eye(3, std::nullopt, 1), {0, 1, 0, 0, 0, 1, 0, 0, 0}));
  Array m = reshape(arange(9).astype(DType::f32), {3, 3});
  EXPECT_TRUE(all_close(tril(m), {0, 0, 0, 3, 4, 0, 6, 7, 8}));
  EXPECT_TRUE(all_close(triu(m, 1), {0, 1, 2, 0, 0, 5, 0, 0, 0}));
  EXPECT_PAX_ERROR(arange(0, 5, 0), "step must not be zero");
  EXPECT_PAX_ERROR(zeros({2, -1}), "negative dimension");
}

TEST(Numpy, WhereClipLogic) {
  Array x = array<float>({-2, -0.5, 0.5, 2});
  EXPECT_TRUE(all_close(where(x > 0, x, 0), {0, 0, 0.5, 2}));
  EXPECT_TRUE(all_close(clip(x, -1, 1), {-1, -0.5, 0.5, 1}));
  EXPECT_TRUE(all_close(clip(x, std::nullopt, 0), {-2, -0.5, 0, 0}));
  EXPECT_EQ(logical_and(x > -1, x < 1).to_vector<bool>(), (std::vector<bool>{false, true, true, false}));
  EXPECT_EQ((!(x > 0)).to_vector<bool>(), (std::vector<bool>{true, true, false, false}));
  EXPECT_EQ(isnan(array<float>({NAN, 1})).to_vector<bool>(), (std::vector<bool>{true, false}));
  EXPECT_EQ(isinf(array<float>({-INFINITY, 1})).to_vector<bool>(), (std::vector<bool>{true, false}));
  EXPECT_TRUE(all_close(round(array<float>({0.5, 1.5, 2.5, -0.5})), {0, 2, 2, -0.0}));
  EXPECT_EQ(exp(arange(2)).dtype(), DType::f32);
}

// Slow reference: sum over the given axes of a row-major array.
std::vector<double> ref_sum(const std::vector<double>& x, const Shape& s, const Ints& axes, Shape* out_shape) {
  std::vector<int64_t> out_dims;
  for (int64_t d = 0; d < s.rank(); ++d) {
    if (std::find(axes.begin(), axes.end(), d) == axes.end()) out_dims.push_back(s[d]);
  }
  *out_shape = Shape(out_dims);
  std::vector<double> out(size_t(out_shape->numel()), 0.0);
  std::vector<int64_t> idx(size_t(s.rank()), 0);
  for (int64_t flat = 0; flat < s.numel(); ++flat) {
    int64_t o = 0;
    for (int64_t d = 0; d < s.rank(); ++d) {
      if (std::find(axes.begin(), axes.end(), d) == axes.end()) o = o * s[d] + idx[size_t(d)];
    }
    out[size_t(o)] += x[size_t(flat)];
    for (int64_t d = s.rank() - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < s[d]) break;
      idx[size_t(d)] = 0;
    }
  }
  return out;
}

TEST(Numpy, ReductionsWithAxesAndKeepdims) {
  Shape s{3, 4, 5};
  Array x = random_array(s, DType::f32, 4);
  std::vector<double> xv = x.to_vector<double>();
  for (Ints axes : {Ints{0}, Ints{1}, Ints{2}, Ints{0, 2}, Ints{0, 1, 2}}) {
    Shape os;
    std::vector<double> want = ref_sum(xv, s, axes, &os);
    Array got = sum(x, axes);
    EXPECT_EQ(got.shape(), os);
    EXPECT_TRUE(all_close(got, want, 1e-5, 1e-5));
    Array kept = sum(x, axes, true);
    EXPECT_EQ(kept.ndim(), 3);
    std::vector<double> mean_want = want;
    double n = double(s.numel()) / double(os.numel());
    for (double& v : mean_want) v /= n;
    EXPECT_TRUE(all_close(mean(x, axes), mean_want, 1e-5, 1e-6));
  }
  Shape last;
  EXPECT_TRUE(all_close(sum(x, -1), ref_sum(xv, s, {2}, &last), 1e-5, 1e-5));
  Array m = array<float>({1, 5, 3, 2}, {2, 2});
  EXPECT_TRUE(all_close(max(m, 1), {5, 3}));
  EXPECT_TRUE(all_close(min(m), {1}));
  EXPECT_TRUE(all_close(prod(m, 0), {3, 10}));
  EXPECT_EQ(argmax(m, 1).to_vector<int32_t>(), (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(argmax(m).item<int32_t>(), 1);
  EXPECT_EQ(argmin(m, 0, true).shape(), (Shape{1, 2}));
  EXPECT_TRUE(all_close(var(array<float>({1, 2, 3, 4})), {1.25}));
  EXPECT_TRUE(all_close(std(array<float>({1, 2, 3, 4}), {}, false, 1), {std::sqrt(5.0 / 3)}, 1e-6));
  EXPECT_EQ(sum(array<bool>({true, true, false})).item<int32_t>(), 2);
  EXPECT_EQ(sum(array<bool>({true})).dtype(), DType::i32);
  EXPECT_TRUE(all(array<float>({1, 2})).item<bool>());
  EXPECT_FALSE(any(zeros({3})).item<bool>());
  EXPECT_TRUE(all_close(cumsum(array<int32_t>({1, 2, 3})), {1, 3, 6}));
  Array bf = ones({1000}, DType::bf16);
  EXPECT_EQ(mean(bf).dtype(), DType::bf16);
  EXPECT_EQ(mean(bf).item<float>(), 1.0f);
  EXPECT_PAX_ERROR(max(zeros({0, 3}), 0), "zero-size axis 0");
  EXPECT_PAX_ERROR(sum(x, {0, 0}), "repeated");
  EXPECT_PAX_ERROR(sum(x, 3), "axis 3 is out of range");
  EXPECT_PAX_ERROR(argmax(zeros({0})), "empty axis");
}

TEST(Numpy, ShapeManipulation) {
  Array x = reshape(arange(24).astype(DType::f32), {2, 3, 4});
  EXPECT_EQ(reshape(x, {4, -1}).shape(), (Shape{4, 6}));
  EXPECT_PAX_ERROR(reshape(x, {5, -1}), "cannot reshape");
  EXPECT_PAX_ERROR(reshape(x, {-1, -1}), "only one dimension may be -1");
  EXPECT_EQ(transpose(x).shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(swapaxes(x, 0, 2).shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(moveaxis(x, 0, -1).shape(), (Shape{3, 4, 2}));
  EXPECT_TRUE(all_close(moveaxis(x, 0, -1), transpose(x, Ints{1, 2, 0})));
  EXPECT_EQ(expand_dims(x, {0, -1}).shape(), (Shape{1, 2, 3, 4, 1}));
  EXPECT_EQ(squeeze(zeros({1, 3, 1})).shape(), (Shape{3}));
  EXPECT_PAX_ERROR(squeeze(zeros({2, 3}), 0), "only size-1 dimensions");
  Array a = array<float>({1, 2}), b = array<float>({3, 4});
  EXPECT_TRUE(all_close(stack({a, b}), {1, 2, 3, 4}));
  EXPECT_EQ(stack({a, b}, 1).shape(), (Shape{2, 2}));
  EXPECT_TRUE(all_close(stack({a, b}, 1), {1, 3, 2, 4}));
  EXPECT_TRUE(all_close(concatenate({a, array<int32_t>({5})}), {1, 2, 5}));
  std::vector<Array> parts = split(arange(6), 3);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_TRUE(all_close(parts[2], {4, 5}));
  parts = split(arange(6), Ints{1, 4});
  EXPECT_TRUE(all_close(parts[1], {1, 2, 3}));
  EXPECT_PAX_ERROR(split(arange(5), 2), "does not divide");
  EXPECT_TRUE(all_close(flip(a), {2, 1}));
  EXPECT_TRUE(all_close(slice_along(arange(10), 0, -3), {7, 8, 9}));
  EXPECT_TRUE(all_close(slice_along(arange(10), 0, 1, 7, 3), {1, 4}));
  EXPECT_TRUE(all_close(pad(a, {{1, 2}}, 9), {9, 1, 2, 9, 9}));
}

TEST(Numpy, TakeAndTakeAlongAxis) {
  Array x = reshape(arange(12).astype(DType::f32), {3, 4});
  EXPECT_TRUE(all_close(take(x, array<int32_t>({2, 0}), 0), {8, 9, 10, 11, 0, 1, 2, 3}));
  EXPECT_EQ(take(x, array<int32_t>({2, 0}), 0).shape(), (Shape{2, 4}));
  EXPECT_TRUE(all_close(take(x, array<int32_t>({-1, 1}), 1), {3, 1, 7, 5, 11, 9}));
  EXPECT_EQ(take(x, array<int32_t>({1, 2, 3, 0}, {2, 2}), 1).shape(), (Shape{3, 2, 2}));
  EXPECT_TRUE(all_close(take(x, array<int32_t>({5, 100})), {5, 11}));  // clamped
  Array idx = array<int32_t>({3, 0, 1}, {3, 1});
  EXPECT_TRUE(all_close(take_along_axis(x, idx, 1), {3, 4, 9}));
  Array idx0 = array<int32_t>({2, 1, 0, 0}, {1, 4});
  EXPECT_TRUE(all_close(take_along_axis(x, idx0, 0), {8, 5, 2, 3}));
  EXPECT_PAX_ERROR(take(x, array<float>({1}), 0), "indices must have an integer dtype");
}

TEST(Numpy, SortAndArgsort) {
  Array x = array<float>({3, 1, 2, 1});
  EXPECT_TRUE(all_close(sort(x), {1, 1, 2, 3}));
  EXPECT_EQ(argsort(x).to_vector<int32_t>(), (std::vector<int32_t>{1, 3, 2, 0}));
  EXPECT_EQ(argsort(x, -1, true).to_vector<int32_t>(), (std::vector<int32_t>{0, 2, 1, 3}));
}

// Slow reference matmul of [M, K] x [K, N].
std::vector<double> ref_matmul(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t k,
                               int64_t n) {
  std::vector<double> out(size_t(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) out[size_t(i * n + j)] += a[size_t(i * k + p)] * b[size_t(p * n + j)];
  return out;
}

TEST(Numpy, MatmulShapesAndBroadcasting) {
  Array a = random_array({5, 7}, DType::f32, 10);
  Array b = random_array({7, 3}, DType::f32, 11);
  EXPECT_TRUE(all_close(matmul(a, b), ref_matmul(a.to_vector<double>(), b.to_vector<double>(), 5, 7, 3), 1e-5, 1e-5));
  Array v = random_array({7}, DType::f32, 12);
  EXPECT_EQ(matmul(a, v).shape(), (Shape{5}));
  EXPECT_EQ(matmul(v, b).shape(), (Shape{3}));
  EXPECT_EQ(matmul(v, v).ndim(), 0);
  Array batched = random_array({2, 5, 7}, DType::f32, 13);
  EXPECT_EQ(matmul(batched, b).shape(), (Shape{2, 5, 3}));
  Array bb = random_array({4, 1, 7, 3}, DType::f32, 14);
  EXPECT_EQ(matmul(batched, bb).shape(), (Shape{4, 2, 5, 3}));
  // Batch slice [i][j] equals the 2-D product.
  Array out = matmul(batched, bb);
  Array want = matmul(slice_along(batched, 0, 1, 2), slice_along(bb, 0, 3, 4));
  EXPECT_TRUE(all_close(slice_along(slice_along(out, 0, 3, 4), 1, 1, 2), want, 1e-5, 1e-6));
  EXPECT_PAX_ERROR(matmul(a, a), "contracting dimensions differ");
  EXPECT_EQ(matmul(a.astype(DType::bf16), b.astype(DType::bf16)).dtype(), DType::bf16);
  EXPECT_TRUE(all_close(dot(v, v), {sum(v * v).item<double>()}, 1e-5));
  EXPECT_TRUE(all_close(outer(array<float>({1, 2}), array<float>({3, 4, 5})), {3, 4, 5, 6, 8, 10}));
}

TEST(Numpy, EinsumMatchesMatmulAndLoops) {
  Array a = random_array({2, 3, 4}, DType::f32, 20);
  Array b = random_array({2, 4, 5}, DType::f32, 21);
  EXPECT_TRUE(all_close(einsum("bij,bjk->bik", a, b), matmul(a, b), 1e-5, 1e-6));
  EXPECT_TRUE(all_close(einsum("bij,bjk->bki", a, b), swapaxes(matmul(a, b), 1, 2), 1e-5, 1e-6));
  // Attention logits: [B,T,H,D] x [B,S,H,D] -> [B,H,T,S].
  Array q = random_array({2, 3, 2, 4}, DType::f32, 22);
  Array k = random_array({2, 5, 2, 4}, DType::f32, 23);
  Array logits = einsum("bthd,bshd->bhts", q, k);
  EXPECT_EQ(logits.shape(), (Shape{2, 2, 3, 5}));
  std::vector<double> qv = q.to_vector<double>(), kv = k.to_vector<double>(), lv = logits.to_vector<double>();
  for (int bi = 0; bi < 2; ++bi)
    for (int h = 0; h < 2; ++h)
      for (int t = 0; t < 3; ++t)
        for (int s = 0; s < 5; ++s) {
          double acc = 0;
          for (int d = 0; d < 4; ++d)
            acc += qv[size_t(((bi * 3 + t) * 2 + h) * 4 + d)] * kv[size_t(((bi * 5 + s) * 2 + h) * 4 + d)];
          EXPECT_NEAR(lv[size_t(((bi * 2 + h) * 3 + t) * 5 + s)], acc, 1e-5);
        }
  Array w = random_array({4, 6}, DType::f32, 24);
  EXPECT_EQ(einsum("...d,df->...f", a, w).shape(), (Shape{2, 3, 6}));
  EXPECT_TRUE(all_close(einsum("...d,df->...f", a, w), matmul(a, w), 1e-5, 1e-6));
  Array m = random_array({3, 4}, DType::f32, 25);
  EXPECT_TRUE(all_close(einsum("ij->ji", m), transpose(m), 0, 0));
  EXPECT_TRUE(all_close(einsum("ij->i", m), sum(m, 1), 1e-6, 1e-6));
  EXPECT_TRUE(all_close(einsum("ij,jk", m, w), matmul(m, w), 1e-5, 1e-6));
  EXPECT_TRUE(all_close(einsum("ij,ij->", m, m), {sum(m * m).item<double>()}, 1e-5));
  EXPECT_PAX_ERROR(einsum("ii->i", slice_along(m, 1, 0, 3)), "repeats within operand");
  EXPECT_PAX_ERROR(einsum("ij,jk->ik", m, m), "has size 4 in one operand and 3 in another");
  EXPECT_PAX_ERROR(einsum("ij->ik", m), "output label 'k' does not appear");
  EXPECT_PAX_ERROR(einsum("ijk->i", m), "names 3 axes but the array has rank 2");
}

}  // namespace
}  // namespace pax
