// LayerNorm and RmsNorm against direct formulas, gradients, mixed precision.
#include "pax/nn/normalization.h"

#include <gtest/gtest.h>

#include "pax/ops/random.h"
#include "pax/testing/layer_check.h"

namespace pax::nn {
namespace {

using testing::all_close;

TEST(LayerNorm, MatchesFormulaAndGradients) {
  LayerNorm::HParams hp;
  hp.dim = 5;
  hp.dtype = hp.fprop_dtype = DType::f64;
  hp.epsilon = 1e-3;
  auto ln = build<LayerNorm>(hp);
  Tree vars = init(*ln, random::key(0));
  vars["params"]["scale"] = testing::random_array({5}, DType::f64, 1);
  vars["params"]["bias"] = testing::random_array({5}, DType::f64, 2);
  Array x = testing::random_array({3, 5}, DType::f64, 3, -2, 2);
  std::vector<double> xv = x.to_vector<double>(), s = vars["params"]["scale"].leaf().to_vector<double>(),
                      b = vars["params"]["bias"].leaf().to_vector<double>(), want;
  for (int r = 0; r < 3; ++r) {
    double m = 0, v = 0;
    for (int c = 0; c < 5; ++c) m += xv[size_t(r * 5 + c)] / 5;
    for (int c = 0; c < 5; ++c) v += (xv[size_t(r * 5 + c)] - m) * (xv[size_t(r * 5 + c)] - m) / 5;
    for (int c = 0; c < 5; ++c)
      want.push_back((xv[size_t(r * 5 + c)] - m) / std::sqrt(v + 1e-3) * s[size_t(c)] + b[size_t(c)]);
  }
  EXPECT_TRUE(all_close(apply(*ln, vars, x).output, want, 1e-12, 1e-12));
  EXPECT_TRUE(testing::check_layer_vjp(
      *ln, vars, {x}, [](const LayerNorm& l, const std::vector<Array>& in) { return l.fprop(in[0]); }));
  EXPECT_PAX_ERROR(apply(*ln, vars, zeros({3, 4}, DType::f64)), "must end in dim = 5");
}

TEST(RmsNorm, MatchesFormulaAndComputesStatisticsInF32) {
  RmsNorm::HParams hp;
  hp.dim = 4;
  auto rms = build<RmsNorm>(hp);
  Tree vars = init(*rms, random::key(0));
  Array x = testing::random_array({2, 4}, DType::f32, 4, -3, 3);
  std::vector<double> xv = x.to_vector<double>(), want;
  for (int r = 0; r < 2; ++r) {
    double ms = 0;
    for (int c = 0; c < 4; ++c) ms += xv[size_t(r * 4 + c)] * xv[size_t(r * 4 + c)] / 4;
    for (int c = 0; c < 4; ++c) want.push_back(xv[size_t(r * 4 + c)] / std::sqrt(ms + 1e-6));
  }
  EXPECT_TRUE(all_close(apply(*rms, vars, x).output, want, 1e-6, 1e-6));
  hp.fprop_dtype = DType::bf16;
  auto rms16 = build<RmsNorm>(hp);
  Array y = apply(*rms16, vars, x.astype(DType::bf16)).output;
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_TRUE(all_close(y, want, 1e-2, 1e-2));
  hp.fprop_dtype = hp.dtype = DType::f64;
  auto rms64 = build<RmsNorm>(hp);
  Tree v64 = init(*rms64, random::key(0));
  v64["params"]["scale"] = testing::random_array({4}, DType::f64, 5);
  EXPECT_TRUE(testing::check_layer_vjp(*rms64, v64, {x.astype(DType::f64)},
                                       [](const RmsNorm& l, const std::vector<Array>& in) { return l.fprop(in[0]); }));
}

}  // namespace
}  // namespace pax::nn
