// RotaryPositionalEmbedding: the formula (first half / second half pairs),
// the relative-position property, decoding steps, dtypes and errors.
#include "pax/nn/rotary.h"

#include <gtest/gtest.h>

#include <cmath>

#include "pax/api/transforms.h"
#include "pax/ops/random.h"
#include "pax/testing/testing.h"

namespace pax::nn {
namespace {

using testing::all_close;

std::unique_ptr<RotaryPositionalEmbedding> make_rotary(int64_t dims, DType dtype = DType::f64,
                                                       double max_timescale = 10000.0) {
  RotaryPositionalEmbedding::HParams hp;
  hp.embedding_dims = dims;
  hp.max_timescale = max_timescale;
  hp.dtype = hp.fprop_dtype = dtype;
  return build<RotaryPositionalEmbedding>(hp);
}

Array rotate(const RotaryPositionalEmbedding& rope, const Array& x, const Array& positions = Array()) {
  return apply_with(rope, Tree::dict(), [&](const RotaryPositionalEmbedding& l) { return l.fprop(x, positions); })
      .output;
}

// y[i] = x[i] cos - x[i + H/2] sin, y[i + H/2] = x[i + H/2] cos + x[i] sin,
// angle = position / 10000^(2i / H).
std::vector<double> reference(const Array& x, const std::vector<double>& positions, int64_t pos_batch) {
  const int64_t B = x.dim(0), T = x.dim(1), N = x.dim(2), H = x.dim(3), half = H / 2;
  std::vector<double> xv = x.to_vector<double>(), out(xv.size());
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const double pos = positions[size_t((pos_batch == 1 ? 0 : b) * T + t)];
      for (int64_t n = 0; n < N; ++n) {
        const size_t base = size_t(((b * T + t) * N + n) * H);
        for (int64_t i = 0; i < half; ++i) {
          const double angle = pos / std::pow(10000.0, 2.0 * double(i) / double(H));
          const double x1 = xv[base + size_t(i)], x2 = xv[base + size_t(i + half)];
          out[base + size_t(i)] = x1 * std::cos(angle) - x2 * std::sin(angle);
          out[base + size_t(i + half)] = x2 * std::cos(angle) + x1 * std::sin(angle);
        }
      }
    }
  }
  return out;
}

TEST(RotaryPositionalEmbedding, MatchesFormula) {
  auto rope = make_rotary(8);
  Array x = testing::random_array({2, 5, 3, 8}, DType::f64, 1);
  EXPECT_TRUE(all_close(rotate(*rope, x), reference(x, {0, 1, 2, 3, 4}, 1), 1e-12, 1e-12));
  // Explicit per-example positions (e.g. packed or offset sequences).
  std::vector<double> pos = {3, 4, 5, 6, 7, 100, 0, 2, 9, 1};
  Array y = rotate(*rope, x, array(pos, {2, 5}));
  EXPECT_TRUE(all_close(y, reference(x, pos, 2), 1e-12, 1e-12));
  EXPECT_TRUE(all_close(rotate(*rope, x, array<int32_t>({3, 4, 5, 6, 7, 100, 0, 2, 9, 1}, {2, 5})), y, 0, 0));
  // Position 0 is the identity; rotation keeps each pair's norm.
  EXPECT_TRUE(all_close(slice_along(rotate(*rope, x), 1, 0, 1), slice_along(x, 1, 0, 1), 0, 0));
  Array sq = square(y);
  Array pair_norms = slice_along(sq, -1, 0, 4) + slice_along(sq, -1, 4, 8);
  Array sqx = square(x);
  EXPECT_TRUE(all_close(pair_norms, slice_along(sqx, -1, 0, 4) + slice_along(sqx, -1, 4, 8), 1e-12, 1e-12));
}

// <rot(q, m), rot(k, n)> depends on m - n only.
TEST(RotaryPositionalEmbedding, DotProductsDependOnRelativePosition) {
  auto rope = make_rotary(16);
  Array q = testing::random_array({1, 1, 1, 16}, DType::f64, 2),
        k = testing::random_array({1, 1, 1, 16}, DType::f64, 3);
  auto at = [&](const Array& v, double pos) { return rotate(*rope, v, array<double>({pos}, {1, 1})); };
  for (double offset : {1.0, 3.0, 17.0}) {
    const double want = sum(at(q, 5.0 + offset) * at(k, 5.0)).item<double>();
    for (double m : {0.0, 2.0, 11.0, 250.0}) {
      EXPECT_NEAR(sum(at(q, m + offset) * at(k, m)).item<double>(), want, 1e-10) << offset << " " << m;
    }
    // Different offsets give different products.
    EXPECT_GT(std::fabs(sum(at(q, 5.0 + offset + 1) * at(k, 5.0)).item<double>() - want), 1e-6);
  }
}

TEST(RotaryPositionalEmbedding, ExtendStepMatchesFprop) {
  auto rope = make_rotary(4);
  Array x = testing::random_array({3, 2, 4}, DType::f64, 4);  // (B, N, H)
  auto step = [&](const Array& pos) {
    return apply_with(*rope, Tree::dict(), [&](const RotaryPositionalEmbedding& l) { return l.extend_step(x, pos); })
        .output;
  };
  Array want = squeeze(rotate(*rope, expand_dims(x, {1}), array<double>({7, 7, 7}, {3, 1})), 1);
  EXPECT_TRUE(all_close(step(scalar<int32_t>(7)), want, 1e-12, 1e-12));
  Array per_example = step(array<int32_t>({1, 2, 3}));
  EXPECT_TRUE(all_close(per_example, reference(expand_dims(x, {1}), {1, 2, 3}, 3), 1e-12, 1e-12));
  // Under jit with a traced position.
  auto jitted = jit([&](const Array& pos) { return step(pos); });
  EXPECT_TRUE(all_close(jitted(scalar<int32_t>(7)), want, 1e-12, 1e-12));
}

TEST(RotaryPositionalEmbedding, ComputesAnglesInF32For16BitInputs) {
  auto rope = make_rotary(8, DType::bf16);
  Array x = testing::random_array({1, 64, 1, 8}, DType::f64, 5);
  std::vector<double> pos(64);
  for (size_t i = 0; i < 64; ++i) pos[i] = double(i) * 50;  // large positions: bf16 angles would be far off
  Array y = rotate(*rope, x.astype(DType::bf16), array(pos, {1, 64}));
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_TRUE(all_close(y, reference(x.astype(DType::bf16), pos, 1), 2e-2, 2e-2));
}

TEST(RotaryPositionalEmbedding, Errors) {
  EXPECT_PAX_ERROR(make_rotary(5), "embedding_dims must be positive and even");
  EXPECT_PAX_ERROR(make_rotary(4, DType::f64, 0.0), "must be > 0");
  auto rope = make_rotary(4);
  EXPECT_PAX_ERROR(rotate(*rope, zeros({2, 3, 4})), "inputs f32[2,3,4] must be (batch, time, heads, 4)");
  EXPECT_PAX_ERROR(rotate(*rope, zeros({2, 3, 1, 6})), "must be (batch, time, heads, 4)");
  EXPECT_PAX_ERROR(rotate(*rope, zeros({2, 3, 1, 4}), zeros({2, 4})), "positions f32[2,4] must be (2 or 1, 3)");
  EXPECT_PAX_ERROR(apply_with(*rope, Tree::dict(),
                              [](const RotaryPositionalEmbedding& l) {
                                return l.extend_step(zeros({2, 1, 4}), zeros({3}));
                              }),
                   "position f32[3] must be a scalar or (2,)");
}

}  // namespace
}  // namespace pax::nn
