// Linear, Bias, FeedForward, MLPBlock, the activations and the containers:
// outputs against direct formulas, gradients against finite differences,
// init statistics, jit against eager.
#include "pax/nn/linears.h"

#include <gtest/gtest.h>

#include <cmath>

#include "pax/api/transforms.h"
#include "pax/nn/containers.h"
#include "pax/ops/nn.h"
#include "pax/ops/random.h"
#include "pax/testing/layer_check.h"

namespace pax::nn {
namespace {

using testing::all_close;

template <class L>
std::unique_ptr<L> build64(typename L::HParams hp) {
  hp.dtype = hp.fprop_dtype = DType::f64;
  return build<L>(hp);
}

auto call_fprop = [](const Layer& l, const std::vector<Array>& in) { return l.fprop(in[0]); };

TEST(Linears, LinearAndBiasMatchFormulasAndGradients) {
  Linear::HParams lp;
  lp.input_dims = 3;
  lp.output_dims = 4;
  auto linear = build64<Linear>(lp);
  Tree lv = testing::randomize_params(init(*linear, random::key(0)), 1);
  Array x = testing::random_array({2, 5, 3}, DType::f64, 2);
  EXPECT_TRUE(all_close(apply(*linear, lv, x).output, matmul(x, lv.at_path("params/w").leaf()), 1e-12, 1e-12));
  EXPECT_TRUE(testing::check_layer_vjp(*linear, lv, {x}, call_fprop));
  Bias::HParams bp;
  bp.dims = 3;
  auto bias = build64<Bias>(bp);
  Tree bv = init(*bias, random::key(0));
  EXPECT_TRUE(all_close(bv.at_path("params/b").leaf(), {0, 0, 0}));  // zeros at init
  bv = testing::randomize_params(bv, 3);
  EXPECT_TRUE(all_close(apply(*bias, bv, x).output, x + bv.at_path("params/b").leaf(), 1e-12, 1e-12));
  EXPECT_TRUE(testing::check_layer_vjp(*bias, bv, {x}, call_fprop));
  // Xavier statistics of the default weight init: U(+-sqrt(6 / (in + out))).
  lp.input_dims = 300;
  lp.output_dims = 500;
  Array w = init(*build<Linear>(lp), random::key(4)).at_path("params/w").leaf();
  EXPECT_NEAR(std(w).item<double>(), std::sqrt(2.0 / 800), 0.02 * std::sqrt(2.0 / 800));
}

TEST(Linears, ActivationsMatchTheirFunctions) {
  Array x = testing::random_array({3, 4}, DType::f64, 5, -3, 3);
  struct Case {
    const char* type;
    std::function<Array(const Array&)> want;
  };
  std::vector<Case> cases = {
      {"ReLU", [](const Array& v) { return pax::nn::relu(v); }},
      {"GELU", [](const Array& v) { return pax::nn::gelu(v, true); }},
      {"SiLU", [](const Array& v) { return pax::nn::silu(v); }},
      {"Tanh", [](const Array& v) { return tanh(v); }},
      {"Sigmoid", [](const Array& v) { return pax::nn::sigmoid(v); }},
      {"Identity", [](const Array& v) { return v; }},
  };
  for (const Case& c : cases) {
    Config cfg = Config::make(c.type);
    cfg.set("fprop_dtype", "float64");
    auto layer = build_layer(cfg);
    EXPECT_TRUE(all_close(apply_with(*layer, Tree::dict(), [&](const Layer& l) { return l.fprop(x); }).output,
                          c.want(x), 1e-12, 1e-12))
        << c.type;
  }
  Config exact = Config::make("GELU");
  exact.set("approximate", "false");
  exact.set("fprop_dtype", "float64");
  auto gelu = build_layer(exact);
  EXPECT_TRUE(all_close(apply_with(*gelu, Tree::dict(), [&](const Layer& l) { return l.fprop(x); }).output,
                        pax::nn::gelu(x, false), 1e-12, 1e-12));
}

TEST(Linears, FeedForwardAndMlpBlockFormulasGradientsAndJit) {
  FeedForward::HParams fp;
  fp.input_dims = 3;
  fp.output_dims = 2;
  fp.activation_tpl = tpl<Tanh>();
  auto ff = build64<FeedForward>(fp);
  Tree fv = testing::randomize_params(init(*ff, random::key(0)), 6);
  Array x = testing::random_array({4, 3}, DType::f64, 7);
  Array want = tanh(matmul(x, fv.at_path("params/linear/w").leaf()) + fv.at_path("params/bias/b").leaf());
  EXPECT_TRUE(all_close(apply(*ff, fv, x).output, want, 1e-12, 1e-12));
  EXPECT_TRUE(testing::check_layer_vjp(*ff, fv, {x}, call_fprop));
  fp.has_bias = false;
  EXPECT_EQ(tree_paths(init(*build<FeedForward>(fp), random::key(0))), (std::vector<std::string>{"params/linear/w"}));

  MLPBlock::HParams mp;
  mp.input_dims = 3;
  mp.hidden_dims = 5;
  mp.output_dims = 2;
  mp.num_layers = 3;
  auto mlp = build64<MLPBlock>(mp);
  Tree mv = testing::randomize_params(init(*mlp, random::key(1)), 8);
  EXPECT_TRUE(testing::check_layer_vjp(*mlp, mv, {x}, call_fprop));
  auto jitted = jit([&](const Tree& v, const Array& in) { return apply(*mlp, v, in).output; });
  EXPECT_TRUE(all_close(jitted(mv, x), apply(*mlp, mv, x).output, 1e-12, 1e-12));
  mp.num_layers = 0;
  EXPECT_PAX_ERROR(build<MLPBlock>(mp), "num_layers must be >= 1");
}

TEST(Containers, SequentialAndFlatten) {
  Config cfg = Config::make("Sequential");
  auto& hp = cfg.as<Sequential::HParams>();
  auto linear = tpl<Linear>();
  linear->input_dims = 6;
  linear->output_dims = 2;
  hp.layers = {tpl<Flatten>(), linear, tpl<ReLU>()};
  cfg.set("dtype", "float64");
  cfg.set("fprop_dtype", "float64");
  auto seq = build_layer(cfg);
  Tree vars = testing::randomize_params(init(*seq, random::key(0)), 9);
  EXPECT_EQ(tree_paths(vars), (std::vector<std::string>{"params/layers_1/w"}));
  Array x = testing::random_array({4, 2, 3}, DType::f64, 10);
  Array y = apply_with(*seq, vars, [&](const Layer& l) { return l.fprop(x); }).output;
  EXPECT_TRUE(
      all_close(y, pax::nn::relu(matmul(reshape(x, {4, 6}), vars.at_path("params/layers_1/w").leaf())), 1e-12, 1e-12));
  EXPECT_TRUE(testing::check_layer_vjp(*seq, vars, {x}, call_fprop));
  EXPECT_PAX_ERROR(build_layer(Config::make("Sequential")), "needs at least one layer");
  hp.layers = {tpl<Flatten>(), tpl<Sequential>()};
  hp.layers[1] = nullptr;
  EXPECT_PAX_ERROR(build_layer(cfg), "is None");
}

}  // namespace
}  // namespace pax::nn
