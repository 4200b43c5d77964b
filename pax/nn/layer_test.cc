// The layer base: building from configs, init / apply over collections,
// shared children, dtype inheritance and mixed precision, random keys,
// summaries, auxiliary losses, weight initialisers and the summary table.
#include "pax/nn/layer.h"

#include <gtest/gtest.h>

#include <cmath>

#include "pax/api/transforms.h"
#include "pax/nn/linears.h"
#include "pax/ops/nn.h"
#include "pax/ops/random.h"
#include "pax/testing/testing.h"

namespace pax::nn {
namespace {

using testing::all_close;

// A test layer that touches every fprop-time facility.
class Probe : public Layer {
 public:
  struct HParams : Layer::HParams {
    int64_t dims = 3;
    HParamsPtr first = tpl<Linear>();
    HParamsPtr second = tpl<Linear>();
    PAX_HPARAMS(TestProbe, Layer::HParams, (dims, "Depth.", range::size), (first, "First projection."),
                (second, "Second projection (the same object as first: shared)."));
  };
  Array fprop(const Array& x) const {
    Array y = second_->fprop(first_->fprop(x));
    if (is_mutable("batch_stats")) update_variable("batch_stats", "count", variable("batch_stats", "count") + 1.0);
    add_summary("mean", mean(y));
    add_aux_loss(sum(y * y), 0.5);
    return y;
  }
  Array noise() const { return random::uniform(next_prng_key(), {2}); }

 protected:
  void setup() override {
    const auto& hp = hparams<HParams>();
    for (const HParamsPtr& t : {hp.first, hp.second}) {
      auto& l = static_cast<Linear::HParams&>(*t);
      l.input_dims = l.output_dims = hp.dims;
    }
    first_ = &create_child<Linear>("first", hp.first);
    second_ = &create_child<Linear>("second", hp.second);
    create_variable("count", WeightHParams{Shape{}, WeightInit::constant(0.0), DType::f32, "batch_stats"});
  }

 private:
  const Linear* first_ = nullptr;
  const Linear* second_ = nullptr;
};
PAX_REGISTER_LAYER(Probe);

// The seed's `fdl_partial = Linear.HParams.partial(input_dims=1)` with its
// output_dims left to fill: not buildable until complete() supplies it.
TEST(Layer, PartialConfigBuildsOnceComplete) {
  Config partial = Config::partial("Linear", {"input_dims=1"}, {"output_dims"});
  EXPECT_PAX_ERROR(build<Linear>(partial),
                   "build_layer: the Linear config is partial: 1 field is missing: output_dims (an integer)");
  auto linear = build<Linear>(partial.complete({"output_dims=4"}));
  EXPECT_EQ(init(*linear, random::key(0)).at_path("params/w").leaf().shape(), (Shape{1, 4}));
  EXPECT_PAX_ERROR(build_layer(partial.root()), "output_dims (an integer)");
}

TEST(Layer, BuildInitApply) {
  auto cfg = Config::make("MLPBlock");
  cfg.apply_overrides({"input_dims=4", "hidden_dims=8", "output_dims=2", "num_layers=2"});
  auto model = build<MLPBlock>(cfg);
  Array x = testing::random_array({5, 4}, DType::f32, 1);
  Tree vars = init(*model, random::key(0), x);
  EXPECT_EQ(tree_paths(vars), (std::vector<std::string>{"params/mlp_0/linear/w", "params/mlp_0/bias/b",
                                                        "params/mlp_1/linear/w", "params/mlp_1/bias/b"}));
  EXPECT_EQ(vars.at_path("params/mlp_0/linear/w").leaf().shape(), (Shape{4, 8}));
  auto out = apply(*model, vars, x);
  // The direct formula: relu(x w0 + b0) w1 + b1.
  const Tree& p = vars["params"];
  Array want = matmul(nn::relu(matmul(x, p.at_path("mlp_0/linear/w").leaf()) + p.at_path("mlp_0/bias/b").leaf()),
                      p.at_path("mlp_1/linear/w").leaf()) +
               p.at_path("mlp_1/bias/b").leaf();
  EXPECT_TRUE(all_close(out.output, want, 1e-6, 1e-6));
  // The same key gives the same variables; another key others.
  EXPECT_TRUE(all_close(init(*model, random::key(0))["params"].at_path("mlp_0/linear/w").leaf(),
                        p.at_path("mlp_0/linear/w").leaf(), 0, 0));
  EXPECT_FALSE(all_close(init(*model, random::key(1))["params"].at_path("mlp_0/linear/w").leaf(),
                         p.at_path("mlp_0/linear/w").leaf(), 0, 0));
  EXPECT_PAX_ERROR(apply(*model, vars, zeros({5, 3})),
                   "Linear 'mlp_0/linear': input f32[5,3] must end in input_dims = 4");
  EXPECT_PAX_ERROR(model->fprop(x), "only available inside nn::init / nn::apply");
}

TEST(Layer, SharedChildrenCollectionsSummariesAndKeys) {
  auto hp = Probe::HParams();
  hp.second = hp.first;  // one template object: one layer, one set of weights
  auto probe = build<Probe>(hp);
  Tree vars = init(*probe, random::key(0));
  EXPECT_EQ(tree_paths(vars), (std::vector<std::string>{"params/first/w", "batch_stats/count"}));
  Array x = testing::random_array({2, 3}, DType::f32, 2);
  auto out =
      apply_with(*probe, vars, [&](const Probe& l) { return l.fprop(x); }, {.mutable_collections = {"batch_stats"}});
  Array w = vars.at_path("params/first/w").leaf();
  EXPECT_TRUE(all_close(out.output, matmul(matmul(x, w), w), 1e-6, 1e-6));
  EXPECT_EQ(out.updates.at_path("batch_stats/count").leaf().item<float>(), 1.0f);
  EXPECT_TRUE(all_close(out.summaries["mean"].leaf(), {mean(out.output).item<double>()}, 1e-6));
  EXPECT_TRUE(all_close(out.aux_loss, {0.5 * sum(out.output * out.output).item<double>()}, 1e-5));
  // Without the collection marked mutable the update is refused.
  EXPECT_TRUE(apply(*probe, vars, x).updates.entries().empty());
  // Random keys: per stream, required, deterministic per key, different per call.
  EXPECT_PAX_ERROR(apply_with(*probe, vars, [](const Probe& l) { return l.noise(); }),
                   "needs a random key for stream 'dropout'");
  ApplyOptions with_key{.rngs = {{"dropout", random::key(5)}}};
  Array a = apply_with(
                *probe, vars, [](const Probe& l) { return l.noise(); }, with_key)
                .output;
  Array b = apply_with(
                *probe, vars, [](const Probe& l) { return l.noise(); }, with_key)
                .output;
  EXPECT_TRUE(all_close(a, b, 0, 0));
  auto two = apply_with(
                 *probe, vars,
                 [](const Probe& l) {
                   return concatenate({l.noise(), l.noise()});
                 },
                 with_key)
                 .output;
  EXPECT_FALSE(all_close(slice_along(two, 0, 0, 2), slice_along(two, 0, 2, 4), 0, 0));
  const std::string table = summary(*probe);
  EXPECT_NE(table.find("second"), std::string::npos) << table;
  EXPECT_NE(table.find("(shared with first)"), std::string::npos) << table;
  EXPECT_NE(table.find("total params: 9"), std::string::npos) << table;
  EXPECT_EQ(count_parameters(*probe), 9);
}

TEST(Layer, MixedPrecisionAndDtypeInheritance) {
  auto hp = MLPBlock::HParams();
  hp.input_dims = 4;
  hp.hidden_dims = 4;
  hp.output_dims = 4;
  hp.fprop_dtype = DType::bf16;
  auto model = build<MLPBlock>(hp);
  Tree vars = init(*model, random::key(0));
  EXPECT_EQ(vars.at_path("params/mlp_0/linear/w").leaf().dtype(), DType::f32);  // f32 master weights
  Array y = apply(*model, vars, ones({2, 4})).output;
  EXPECT_EQ(y.dtype(), DType::bf16);  // bf16 compute, inherited by every child
  // Gradients flow to the f32 weights through the bf16 computation.
  Tree g = grad([&](const Tree& v) { return sum(apply(*model, v, ones({2, 4})).output.astype(DType::f32)); })(vars);
  EXPECT_EQ(g.at_path("params/mlp_1/linear/w").leaf().dtype(), DType::f32);
}

TEST(Layer, ConfigErrorsAndJsonRebuild) {
  EXPECT_PAX_ERROR(Config::make("MLPBlok", "layer"), "unknown layer type 'MLPBlok'; did you mean 'MLPBlock'?");
  auto cfg = Config::make("FeedForward");
  EXPECT_PAX_ERROR(cfg.set("activation_tpl", "Gelu"), "did you mean 'GELU'?");
  cfg.apply_overrides({"input_dims=3", "output_dims=2", "activation_tpl=GELU", "activation_tpl.approximate=false"});
  auto ff = build_layer(cfg);
  Tree vars = init(*ff, random::key(3));
  auto loaded = build_layer(Config::from_json(cfg.to_json()));
  Array x = testing::random_array({4, 3}, DType::f32, 4);
  auto run = [&](const Layer& l) {
    return apply_with(static_cast<const FeedForward&>(l), vars, [&](const FeedForward& f) { return f.fprop(x); })
        .output;
  };
  EXPECT_TRUE(all_close(run(*loaded), run(*ff), 0, 0));
  EXPECT_TRUE(all_close(
      run(*ff),
      nn::gelu(matmul(x, vars.at_path("params/linear/w").leaf()) + vars.at_path("params/bias/b").leaf(), false), 1e-6,
      1e-6));
  auto bad = Config::make("FeedForward");
  bad.set("linear_tpl", "Bias");
  EXPECT_PAX_ERROR(build_layer(bad), "linear_tpl must be a Linear, got Bias");
  bad.set("linear_tpl", "None");  // an emptied template is an error, not a crash
  EXPECT_PAX_ERROR(build_layer(bad), "linear_tpl must be a Linear, got None");
  auto mlp = Config::make("MLPBlock");
  mlp.set("ff_tpl", "None");
  EXPECT_PAX_ERROR(build_layer(mlp), "ff_tpl must be a FeedForward, got None");
  EXPECT_PAX_ERROR(build_layer(Config::make("Linear")), "input_dims and output_dims must be > 0");
}

// Mean and standard deviation of a large draw against each initialiser's spec.
TEST(WeightInit, StatisticsMatchTheSpec) {
  const Shape shape{400, 600};  // fan_in 400, fan_out 600
  struct Case {
    WeightInit init;
    double mean, stddev;
  };
  const double fin = 400, fout = 600;
  std::vector<Case> cases = {
      {WeightInit::constant(0.3), 0.3, 0.0},
      {WeightInit::uniform(0.5), 0, 0.5 / std::sqrt(3.0)},
      {WeightInit::gaussian(0.2), 0, 0.2},
      {WeightInit::truncated_gaussian(1.0), 0, 0.87962566},
      {WeightInit::xavier(), 0, std::sqrt(2.0 / (fin + fout))},
      {WeightInit::gaussian_sqrt_fan_in(2.0), 0, 2.0 / std::sqrt(fin)},
      {WeightInit::gaussian_sqrt_fan_out(), 0, 1.0 / std::sqrt(fout)},
      {WeightInit::gaussian_sqrt_fan_avg(), 0, 1.0 / std::sqrt((fin + fout) / 2)},
      {WeightInit::uniform_sqrt_fan_in(), 0, 1.0 / std::sqrt(fin)},
      {WeightInit::uniform_sqrt_fan_out(), 0, 1.0 / std::sqrt(fout)},
      {WeightInit::uniform_sqrt_fan_avg(), 0, 1.0 / std::sqrt((fin + fout) / 2)},
      {WeightInit::lecun_normal(), 0, std::sqrt(1.0 / fin)},
      {WeightInit::lecun_uniform(), 0, std::sqrt(1.0 / fin)},
      {WeightInit::he_normal(), 0, std::sqrt(2.0 / fin)},
      {WeightInit::he_uniform(), 0, std::sqrt(2.0 / fin)},
  };
  for (const Case& c : cases) {
    Array w = init_weight(c.init, random::key(7), shape, DType::f32);
    const std::string name = pax_enum_names(static_cast<InitMethod*>(nullptr)).names[size_t(c.init.method)];
    EXPECT_NEAR(mean(w).item<double>(), c.mean, 0.02 * std::max(c.stddev, 0.01) + 1e-6) << name;
    EXPECT_NEAR(std(w).item<double>(), c.stddev, 0.02 * c.stddev + 1e-5) << name;
  }
  // Fan axes: a conv kernel (kh, kw, in, out) has fan_in = kh * kw * in.
  auto [fi, fo] = fans({3, 3, 16, 32}, {}, {});
  EXPECT_EQ(fi, 3 * 3 * 16);
  EXPECT_EQ(fo, 3 * 3 * 32);
  auto [fi2, fo2] = fans({8, 5, 7}, {0, 1}, {2});
  EXPECT_EQ(fi2, 40);
  EXPECT_EQ(fo2, 7);
}

// A repeated stack beyond one random draw (2^32 - 2 bits: the stacked QKV of
// a 22B model, 48 x (6144, 3, 24, 256)) is drawn one repetition at a time.
TEST(WeightInit, StacksLargerThanOneDrawAreDrawnPerRepetition) {
  const Shape big({48, 6144, 3, 24, 256});
  auto draw = [&](int64_t prefix) {
    return eval_shape([&](const Array& key) {
      return init_weight(WeightInit::gaussian(1.0), key, big, DType::bf16, {}, {}, prefix);
    })(random::key(0));
  };
  EXPECT_EQ(draw(1).shape(), big);
  EXPECT_PAX_ERROR(draw(0), "2^32 - 2");
}

}  // namespace
}  // namespace pax::nn
