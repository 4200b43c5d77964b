// TransformerFeedForward and Transformer against hand compositions of their
// parts, StackedTransformer against a loop of blocks, Repeat against the
// unrolled stack (outputs, gradients, program size), decoding with the KV
// caches, dropout, mixed precision, configs and error paths.
#include "pax/nn/transformers.h"

#include <gtest/gtest.h>

#include <cmath>

#include "pax/api/transforms.h"
#include "pax/ops/nn.h"
#include "pax/ops/random.h"
#include "pax/testing/layer_check.h"

namespace pax::nn {
namespace {

using testing::all_close;

Tree randomize(const Tree& vars, uint32_t seed, double scale = 0.5) {
  return testing::randomize_params(vars, seed, scale);
}

Array row(const Array& x, int64_t t) { return squeeze(slice_along(x, 1, t, t + 1), 1); }

// Every leaf of `a` equals the leaf at the same path of `b`.
::testing::AssertionResult trees_close(const Tree& a, const Tree& b, double tol) {
  std::vector<std::string> paths = tree_paths(a);
  std::vector<Array> leaves = tree_leaves(a);
  if (paths.size() != tree_leaves(b).size()) {
    return ::testing::AssertionFailure() << paths.size() << " leaves vs " << tree_leaves(b).size();
  }
  for (size_t i = 0; i < paths.size(); ++i) {
    auto r = all_close(leaves[i], b.at_path(paths[i]).leaf(), tol, tol);
    if (!r) return ::testing::AssertionFailure() << paths[i] << ": " << r.message();
  }
  return ::testing::AssertionSuccess();
}

// The per-layer params x_layers_0 ... x_layers_{n-1} stacked along a new axis.
Tree restack(const Tree& params, int64_t layers) {
  std::vector<Tree> per_layer;
  for (int64_t i = 0; i < layers; ++i) per_layer.push_back(params["x_layers_" + std::to_string(i)]);
  return tree_map_n([](std::span<const Array> xs) { return stack(std::vector<Array>(xs.begin(), xs.end()), 0); },
                    per_layer);
}

Tree params_only(const Tree& subtree) { return Tree::dict({{"params", subtree}}); }

std::shared_ptr<Transformer::HParams> block(int64_t D, int64_t F, int64_t N, DType dtype = DType::f64) {
  auto hp = tpl<Transformer>();
  hp->input_dims = D;
  hp->hidden_dims = F;
  hp->num_heads = N;
  hp->dtype = hp->fprop_dtype = dtype;
  return hp;
}

// A block whose attention uses rotary embeddings and grouped-query heads.
std::shared_ptr<Transformer::HParams> rotary_block(int64_t D, int64_t F, int64_t N, int64_t K,
                                                   DType dtype = DType::f64) {
  auto hp = block(D, F, N, dtype);
  auto atten = tpl<DotProductAttention>();
  atten->use_rotary_position_emb = true;
  hp->tr_atten_tpl = atten;
  hp->num_kv_heads = K;
  return hp;
}

StackedTransformer::HParams stack_hparams(int64_t L, int64_t D, int64_t F, int64_t N,
                                          std::shared_ptr<Transformer::HParams> layer, DType dtype = DType::f64) {
  StackedTransformer::HParams hp;
  hp.num_layers = L;
  hp.model_dims = D;
  hp.hidden_dims = F;
  hp.num_heads = N;
  hp.mask_self_attention = true;
  hp.transformer_layer_params_tpl = layer;
  hp.dtype = hp.fprop_dtype = dtype;
  return hp;
}

Repeat::HParams repeat_hparams(int64_t L, HParamsPtr sub, DType dtype = DType::f64) {
  Repeat::HParams hp;
  hp.sub_tpl = std::move(sub);
  hp.x_times = L;
  hp.dtype = hp.fprop_dtype = dtype;
  return hp;
}

ApplyOptions decoding() { return ApplyOptions{.mutable_collections = {"decoder_cache"}}; }

// vars with the decoder cache that layer.init_states(batch, length) writes.
template <class L>
Tree with_cache(const L& layer, const Tree& vars, int64_t batch, int64_t length) {
  Tree out = vars;
  out["decoder_cache"] = apply_with(
                             layer, vars,
                             [&](const L& l) {
                               l.init_states(batch, length);
                               return 0;
                             },
                             decoding())
                             .updates["decoder_cache"];
  return out;
}

// Decodes x (B, T, D) one position at a time; the outputs stacked (B, T, D).
template <class L>
Array decode(const L& layer, Tree state, const Array& x, bool explicit_mask = false) {
  std::vector<Array> rows;
  const int64_t T = x.dim(1);
  for (int64_t t = 0; t < T; ++t) {
    Array ts = scalar<int32_t>(int32_t(t));
    Array mask = explicit_mask ? causal_step_mask(ts, T) : Array();
    auto out = apply_with(
        layer, state, [&](const L& l) { return l.extend_step(row(x, t), ts, mask); }, decoding());
    rows.push_back(out.output);
    state["decoder_cache"] = out.updates["decoder_cache"];
  }
  return stack(rows, 1);
}

// ---------------------------------------------------------------------------
// TransformerFeedForward and Transformer

TEST(TransformerFeedForward, MatchesFormula) {
  for (const char* policy : {"pre", "post"}) {
    TransformerFeedForward::HParams hp;
    hp.input_dims = 4;
    hp.hidden_dims = 6;
    hp.activation_tpl = tpl<GELU>();
    hp.norm_policy = policy;
    hp.residual_weight = 0.5;
    hp.dtype = hp.fprop_dtype = DType::f64;
    auto ff = build<TransformerFeedForward>(hp);
    Tree vars = randomize(init(*ff, random::key(0)), 1);
    EXPECT_EQ(tree_paths(vars), (std::vector<std::string>{"params/layer_norm/scale", "params/layer_norm/bias",
                                                          "params/ffn_layer1/linear/w", "params/ffn_layer1/bias/b",
                                                          "params/ffn_layer2/linear/w", "params/ffn_layer2/bias/b"}));
    Array x = testing::random_array({2, 3, 4}, DType::f64, 2);
    Array paddings = array<double>({0, 0, 1, 0, 1, 1}, {2, 3});
    const Tree& p = vars["params"];
    auto leaf = [&](const char* path) { return p.at_path(path).leaf(); };
    auto ln = [&](const Array& v) {
      Array c = v - mean(v, -1, true);
      return c / sqrt(mean(c * c, -1, true) + 1e-6) * leaf("layer_norm/scale") + leaf("layer_norm/bias");
    };
    Array keep = 1.0 - reshape(paddings, {2, 3, 1});
    Array in = std::string(policy) == "pre" ? ln(x) : x;
    Array h = nn::gelu(matmul(in, leaf("ffn_layer1/linear/w")) + leaf("ffn_layer1/bias/b")) * keep;
    Array out = (matmul(h, leaf("ffn_layer2/linear/w")) + leaf("ffn_layer2/bias/b")) * keep;
    if (std::string(policy) == "post") out = ln(out);
    EXPECT_TRUE(all_close(apply(*ff, vars, x, paddings).output, x + out * 0.5, 1e-12, 1e-12)) << policy;
  }
}

TEST(Transformer, MatchesHandComposition) {
  auto hp = rotary_block(8, 12, 4, 2);
  auto layer = build<Transformer>(*hp);
  Tree vars = randomize(init(*layer, random::key(1)), 10);
  EXPECT_EQ(vars.at_path("params/self_attention/key/w").leaf().shape(), (Shape{8, 2, 2}));
  Array x = testing::random_array({2, 5, 8}, DType::f64, 3);
  Array paddings = array<double>({0, 0, 0, 0, 0, 0, 0, 0, 1, 1}, {2, 5});
  Array mask = combine_masks(padding_mask(paddings), causal_mask(5));
  // The same parts, built on their own.
  LayerNorm::HParams ln_hp;
  ln_hp.dim = 8;
  ln_hp.dtype = ln_hp.fprop_dtype = DType::f64;
  auto ln = build<LayerNorm>(ln_hp);
  auto atten_hp = static_cast<const DotProductAttention::HParams&>(layer->self_attention().base_hparams());
  auto atten = build<DotProductAttention>(atten_hp);
  auto ff_hp = static_cast<const TransformerFeedForward::HParams&>(layer->child("ff_layer").base_hparams());
  auto ff = build<TransformerFeedForward>(ff_hp);
  const Tree& p = vars["params"];
  Array normed = apply(*ln, params_only(p["layer_norm"]), x).output;
  Array attended = apply(*atten, params_only(p["self_attention"]), normed, mask).output;
  Array want = apply(*ff, params_only(p["ff_layer"]), x + attended, paddings).output;
  EXPECT_TRUE(all_close(apply(*layer, vars, x, paddings, mask).output, want, 1e-12, 1e-12));
  // Without a mask, the padding mask of paddings.
  Array open = apply(*atten, params_only(p["self_attention"]), normed, padding_mask(paddings)).output;
  EXPECT_TRUE(all_close(apply(*layer, vars, x, paddings).output,
                        apply(*ff, params_only(p["ff_layer"]), x + open, paddings).output, 1e-12, 1e-12));
}

TEST(Transformer, RmsNormAndPostNorm) {
  auto hp = block(4, 8, 2);
  hp->ln_tpl = tpl<RmsNorm>();
  auto ff = tpl<TransformerFeedForward>();
  ff->ln_tpl = tpl<RmsNorm>();
  hp->tr_fflayer_tpl = ff;
  auto layer = build<Transformer>(*hp);
  Tree vars = init(*layer, random::key(2));
  EXPECT_EQ(tree_paths(vars)[0], "params/layer_norm/scale");
  EXPECT_EQ(vars["params"]["layer_norm"].size(), 1u);  // no bias
  EXPECT_EQ(vars["params"]["ff_layer"]["layer_norm"].size(), 1u);
  hp->norm_policy = "post";
  auto post = build<Transformer>(*hp);
  Tree pvars = randomize(init(*post, random::key(2)), 20);
  Array x = testing::random_array({1, 3, 4}, DType::f64, 4);
  // post: x1 = x + norm(attention(x)); out = x1 + norm(ffn(x1)).
  RmsNorm::HParams rms_hp;
  rms_hp.dim = 4;
  rms_hp.dtype = rms_hp.fprop_dtype = DType::f64;
  auto rms = build<RmsNorm>(rms_hp);
  auto atten = build<DotProductAttention>(
      static_cast<const DotProductAttention::HParams&>(post->self_attention().base_hparams()));
  const Tree& p = pvars["params"];
  Array a = apply(*atten, params_only(p["self_attention"]), x, causal_mask(3)).output;
  Array x1 = x + apply(*rms, params_only(p["layer_norm"]), a).output;
  Array h = nn::relu(matmul(x1, p.at_path("ff_layer/ffn_layer1/linear/w").leaf()) +
                     p.at_path("ff_layer/ffn_layer1/bias/b").leaf());
  Array f =
      matmul(h, p.at_path("ff_layer/ffn_layer2/linear/w").leaf()) + p.at_path("ff_layer/ffn_layer2/bias/b").leaf();
  Array want = x1 + apply(*rms, params_only(p["ff_layer"]["layer_norm"]), f).output;
  EXPECT_TRUE(all_close(apply(*post, pvars, x, Array(), causal_mask(3)).output, want, 1e-12, 1e-12));
}

TEST(Transformer, Gradients) {
  auto layer = build<Transformer>(*rotary_block(4, 6, 2, 1));
  Tree vars = randomize(init(*layer, random::key(3)), 30);
  Array x = testing::random_array({2, 3, 4}, DType::f64, 5);
  Array paddings = array<double>({0, 0, 0, 0, 0, 1}, {2, 3});
  Array mask = combine_masks(padding_mask(paddings), causal_mask(3));
  EXPECT_TRUE(testing::check_layer_vjp(*layer, vars, {x}, [&](const Transformer& l, const std::vector<Array>& in) {
    return l.fprop(in[0], paddings, mask);
  }));
}

// ---------------------------------------------------------------------------
// StackedTransformer

TEST(StackedTransformer, IsALoopOfBlocksAndCausal) {
  auto hp = stack_hparams(3, 8, 12, 2, rotary_block(0, 0, 0, 1));
  hp.dim_per_head = 2;  // N * H = 4 != model_dims
  auto stack = build<StackedTransformer>(hp);
  Tree vars = randomize(init(*stack, random::key(4)), 40);
  EXPECT_EQ(vars.at_path("params/x_layers_2/self_attention/query/w").leaf().shape(), (Shape{8, 2, 2}));
  EXPECT_EQ(vars.at_path("params/x_layers_2/self_attention/key/w").leaf().shape(), (Shape{8, 1, 2}));
  const int64_t T = 5;
  Array x = testing::random_array({2, T, 8}, DType::f64, 6);
  Array paddings = array<double>({0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, {2, T});
  Array y = apply(*stack, vars, x, paddings).output;
  Array mask = combine_masks(padding_mask(paddings), causal_mask(T));
  auto one = build<Transformer>(static_cast<const Transformer::HParams&>(stack->x_layers()[0]->base_hparams()));
  Array want = x;
  for (int i = 0; i < 3; ++i) {
    want = apply(*one, params_only(vars["params"]["x_layers_" + std::to_string(i)]), want, paddings, mask).output;
  }
  EXPECT_TRUE(all_close(y, want, 1e-12, 1e-12));
  // Perturbing the inputs after position t leaves outputs up to t unchanged.
  Array later = (arange<int64_t>(T) > 2).astype(DType::f64);
  Array x2 = x + reshape(later, {1, T, 1}) * testing::random_array({2, T, 8}, DType::f64, 7);
  EXPECT_TRUE(
      all_close(slice_along(apply(*stack, vars, x2, paddings).output, 1, 0, 3), slice_along(y, 1, 0, 3), 1e-12, 1e-12));
  Array g = grad([&](const Array& in) { return sum(row(apply(*stack, vars, in, paddings).output, 2)); })(x);
  EXPECT_TRUE(all_close(slice_along(g, 1, 3), std::vector<double>(2 * 2 * 8, 0.0), 0, 0));
}

TEST(StackedTransformer, DecodingEqualsCausalForwardPass) {
  auto stack = build<StackedTransformer>(stack_hparams(2, 8, 12, 4, rotary_block(0, 0, 0, 2)));
  Tree vars = randomize(init(*stack, random::key(5)), 50);
  Array x = testing::random_array({2, 5, 8}, DType::f64, 8);
  Array full = apply(*stack, vars, x, zeros({2, 5}, DType::f64)).output;
  EXPECT_TRUE(all_close(decode(*stack, with_cache(*stack, vars, 2, 5), x), full, 1e-10, 1e-10));
  EXPECT_TRUE(all_close(decode(*stack, with_cache(*stack, vars, 2, 7), x), full, 1e-10, 1e-10));  // longer cache
  EXPECT_TRUE(all_close(decode(*stack, vars, x, true), full, 1e-10, 1e-10));  // caches made on the first step
  EXPECT_PAX_ERROR(decode(*stack, vars, x), "call init_states first or pass atten_mask");
}

// ---------------------------------------------------------------------------
// Repeat

TEST(Repeat, EqualsTheUnrolledStackWithRestackedWeights) {
  const int64_t L = 3, T = 4;
  auto layer = rotary_block(0, 0, 0, 1);
  auto stack = build<StackedTransformer>(stack_hparams(L, 8, 12, 2, layer));
  Tree svars = randomize(init(*stack, random::key(6)), 60);
  Array x = testing::random_array({2, T, 8}, DType::f64, 9);
  Array paddings = array<double>({0, 0, 0, 0, 0, 0, 1, 1}, {2, T});
  Array mask = combine_masks(padding_mask(paddings), causal_mask(T));
  Array want = apply(*stack, svars, x, paddings).output;
  auto loss_stack = [&](const Tree& v) { return sum(square(apply(*stack, v, x, paddings).output)); };
  Tree want_grads = restack(grad(loss_stack)(svars)["params"], L);

  for (CheckpointPolicy policy :
       {CheckpointPolicy::none, CheckpointPolicy::nothing_saveable, CheckpointPolicy::dots_saveable}) {
    // The stack's block, with the dims the stack gives it.
    auto sub = std::make_shared<Transformer::HParams>(*layer);
    sub->input_dims = 8;
    sub->hidden_dims = 12;
    sub->num_heads = 2;
    auto hp = repeat_hparams(L, sub);
    hp.checkpoint_policy = policy;
    auto repeat = build<Repeat>(hp);
    Tree rvars = init(*repeat, random::key(7));
    EXPECT_EQ(rvars.at_path("params/sub/self_attention/key/w").leaf().shape(), (Shape{L, 8, 1, 4}));
    EXPECT_EQ(rvars.at_path("params/sub/ff_layer/ffn_layer1/linear/w").leaf().shape(), (Shape{L, 8, 12}));
    rvars["params"]["sub"] = restack(svars["params"], L);
    EXPECT_TRUE(all_close(apply(*repeat, rvars, x, paddings, mask).output, want, 1e-12, 1e-12));
    auto loss_repeat = [&](const Tree& v) { return sum(square(apply(*repeat, v, x, paddings, mask).output)); };
    EXPECT_TRUE(trees_close(grad(loss_repeat)(rvars)["params"]["sub"], want_grads, 1e-10));
    Array gx = grad([&](const Array& in) { return sum(square(apply(*repeat, rvars, in, paddings, mask).output)); })(x);
    Array gx_want = grad([&](const Array& in) { return sum(square(apply(*stack, svars, in, paddings).output)); })(x);
    EXPECT_TRUE(all_close(gx, gx_want, 1e-10, 1e-10));
  }
  // A one-block StackedTransformer as the repeated layer computes its own masks.
  auto hp = stack_hparams(1, 8, 12, 2, layer);
  auto repeat = build<Repeat>(repeat_hparams(L, std::make_shared<StackedTransformer::HParams>(hp)));
  Tree rvars = init(*repeat, random::key(8));
  rvars["params"]["sub"] = Tree::dict({{"x_layers_0", restack(svars["params"], L)}});
  EXPECT_TRUE(all_close(apply(*repeat, rvars, x, paddings).output, want, 1e-12, 1e-12));
}

TEST(Repeat, ProgramSizeDoesNotGrowWithDepth) {
  auto count = [](const auto& layer, const Tree& vars, const Array& x, const Array& paddings) {
    return make_jaxpr([&](const Tree& v, const Array& in) { return apply(layer, v, in, paddings).output; })(vars, x)
        ->eqns.size();
  };
  Array x = testing::random_array({2, 3, 8}, DType::f32, 10);
  Array paddings = zeros({2, 3});
  std::vector<size_t> repeat_sizes, stack_sizes;
  for (int64_t L : {2, 6}) {
    auto sub = tpl<StackedTransformer>();
    *sub = stack_hparams(1, 8, 16, 2, tpl<Transformer>(), DType::f32);
    auto repeat = build<Repeat>(repeat_hparams(L, sub, DType::f32));
    repeat_sizes.push_back(count(*repeat, init(*repeat, random::key(0)), x, paddings));
    auto stack = build<StackedTransformer>(stack_hparams(L, 8, 16, 2, tpl<Transformer>(), DType::f32));
    stack_sizes.push_back(count(*stack, init(*stack, random::key(0)), x, paddings));
  }
  EXPECT_EQ(repeat_sizes[0], repeat_sizes[1]);
  EXPECT_GT(stack_sizes[1], stack_sizes[0]);
  EXPECT_LT(repeat_sizes[1], stack_sizes[1]);
}

TEST(Repeat, InitDrawsEachRepetitionIndependently) {
  auto repeat = build<Repeat>(repeat_hparams(8, block(64, 64, 4, DType::f32), DType::f32));
  Tree vars = init(*repeat, random::key(9));
  Array w = vars.at_path("params/sub/self_attention/query/w").leaf();  // (8, 64, 4, 16)
  EXPECT_EQ(w.shape(), (Shape{8, 64, 4, 16}));
  // Each slice is Xavier over one repetition's fans (64 in, 64 out).
  const double want = std::sqrt(2.0 / (64 + 64));
  for (int64_t i = 0; i < 8; ++i) {
    Array slice = slice_along(w, 0, i, i + 1);
    EXPECT_NEAR(std(slice).item<double>(), want, 0.05 * want) << i;
  }
  EXPECT_FALSE(all_close(slice_along(w, 0, 0, 1), slice_along(w, 0, 1, 2), 0.1, 0.1));
  Array ff = vars.at_path("params/sub/ff_layer/ffn_layer1/linear/w").leaf();  // (8, 64, 64)
  EXPECT_NEAR(std(ff).item<double>(), want, 0.05 * want);
  EXPECT_TRUE(all_close(vars.at_path("params/sub/layer_norm/scale").leaf(), std::vector<double>(8 * 64, 1.0), 0, 0));
  const std::string table = summary(*repeat);
  EXPECT_NE(table.find("sub/self_attention/query"), std::string::npos) << table;
  EXPECT_NE(table.find("(8, 64, 4, 16)"), std::string::npos) << table;
}

TEST(Repeat, DecodingEqualsItsForwardPass) {
  auto repeat = build<Repeat>(repeat_hparams(3, rotary_block(8, 12, 4, 2)));
  Tree vars = randomize(init(*repeat, random::key(10)), 70);
  const int64_t T = 5;
  Array x = testing::random_array({2, T, 8}, DType::f64, 11);
  Array full = apply(*repeat, vars, x, zeros({2, T}, DType::f64), causal_mask(T)).output;
  Tree state = with_cache(*repeat, vars, 2, T);
  EXPECT_EQ(state.at_path("decoder_cache/sub/self_attention/key_state").leaf().shape(), (Shape{3, 2, T, 2, 2}));
  EXPECT_TRUE(all_close(decode(*repeat, state, x), full, 1e-10, 1e-10));
  EXPECT_TRUE(all_close(decode(*repeat, vars, x, true), full, 1e-10, 1e-10));  // caches made on the first step
  // A jitted step with a traced time step.
  auto step = jit([&](const Tree& s, const Array& xt, const Array& t) {
    auto out = apply_with(
        *repeat, s, [&](const Repeat& l) { return l.extend_step(xt, t); }, decoding());
    return std::make_pair(out.output, out.updates["decoder_cache"]);
  });
  for (int64_t t = 0; t < T; ++t) {
    auto [y, cache] = step(state, row(x, t), scalar<int32_t>(int32_t(t)));
    EXPECT_TRUE(all_close(y, row(full, t), 1e-10, 1e-10)) << t;
    state["decoder_cache"] = cache;
  }
  EXPECT_PAX_ERROR(
      apply_with(*repeat, vars, [&](const Repeat& l) { return l.extend_step(row(x, 0), scalar<int32_t>(0)); }),
      "call init_states first");
}

// A repeatable test layer: x * w, with a summary, an auxiliary loss and a
// mutable counter.
class ScaleBlock : public RepeatableLayer {
 public:
  struct HParams : Layer::HParams {
    int64_t dims = 2;
    PAX_HPARAMS(TestScaleBlock, Layer::HParams, (dims, "Depth.", range::size));
  };
  Array fprop(const Array& x, const Array&, const Array&) const override {
    add_summary("mean", mean(x));
    add_aux_loss(sum(theta("w") * theta("w")));
    if (is_mutable("batch_stats")) update_variable("batch_stats", "count", variable("batch_stats", "count") + 1.0);
    return x * theta("w");
  }
  Array extend_step(const Array& x, const Array&, const Array&) const override { return x * theta("w"); }
  void init_states(int64_t, int64_t) const override {}

 protected:
  void setup() override {
    create_variable("w", WeightHParams{Shape{hparams<HParams>().dims}});
    create_variable("count", WeightHParams{Shape{}, WeightInit::constant(0.0), DType::f32, "batch_stats"});
  }
};
PAX_REGISTER_LAYER(ScaleBlock);

TEST(Repeat, CarriesSummariesAuxLossesAndMutableCollections) {
  auto sub = std::make_shared<ScaleBlock::HParams>();
  auto repeat = build<Repeat>(repeat_hparams(3, sub, DType::f32));
  Tree vars = init(*repeat, random::key(11));
  EXPECT_EQ(tree_paths(vars), (std::vector<std::string>{"params/sub/w", "batch_stats/sub/count"}));
  Array w = vars.at_path("params/sub/w").leaf();  // (3, 2)
  Array x = testing::random_array({1, 1, 2}, DType::f32, 12);
  auto out = apply(*repeat, vars, {.mutable_collections = {"batch_stats"}}, x, Array());
  EXPECT_TRUE(all_close(out.output, x * prod(w, 0), 1e-6, 1e-6));
  EXPECT_TRUE(all_close(out.aux_loss, {sum(w * w).item<double>()}, 1e-6, 1e-6));
  Array means = out.summaries["sub/mean"].leaf();  // one per repetition
  EXPECT_EQ(means.shape(), (Shape{3}));
  EXPECT_NEAR(means.to_vector<double>()[1], mean(x * slice_along(w, 0, 0, 1)).item<double>(), 1e-6);
  EXPECT_TRUE(all_close(out.updates.at_path("batch_stats/sub/count").leaf(), {1, 1, 1}, 0, 0));
  // Without the collection mutable nothing is written.
  EXPECT_TRUE(apply(*repeat, vars, x, Array()).updates.entries().empty());
}

// A repeatable test layer with a scalar gain drawn by a fan-dependent
// initialiser (fans of a scalar: 1 and 1).
class ScalarGainBlock : public RepeatableLayer {
 public:
  struct HParams : Layer::HParams {
    PAX_HPARAMS_NO_FIELDS(TestScalarGainBlock, Layer::HParams);
  };
  Array fprop(const Array& x, const Array&, const Array&) const override { return x * theta("gain"); }
  Array extend_step(const Array& x, const Array&, const Array&) const override { return x * theta("gain"); }
  void init_states(int64_t, int64_t) const override {}

 protected:
  void setup() override { create_variable("gain", WeightHParams{Shape{}, WeightInit::uniform_sqrt_fan_in()}); }
};
PAX_REGISTER_LAYER(ScalarGainBlock);

TEST(Repeat, ScalarVariablesKeepTheFansOfOneRepetition) {
  // U(-sqrt(3 / fan_in), sqrt(3 / fan_in)) with fan_in 1 for every slice,
  // through one Repeat and through a Repeat of a Repeat, not fan_in = x_times.
  auto body = std::make_shared<ScalarGainBlock::HParams>();
  auto once = build<Repeat>(repeat_hparams(64, body, DType::f32));
  auto inner = std::make_shared<Repeat::HParams>(repeat_hparams(16, body, DType::f32));
  auto twice = build<Repeat>(repeat_hparams(4, inner, DType::f32));
  const double bound = std::sqrt(3.0);
  for (const auto& [layer, shape] : {std::pair<const Repeat*, Shape>{once.get(), Shape{64}},
                                     std::pair<const Repeat*, Shape>{twice.get(), Shape{4, 16}}}) {
    Array gain =
        init(*layer, random::key(13)).at_path(shape.rank() == 1 ? "params/sub/gain" : "params/sub/sub/gain").leaf();
    EXPECT_EQ(gain.shape(), shape);
    Array largest = max(abs(gain));
    EXPECT_LE(largest.item<double>(), bound);
    EXPECT_GT(largest.item<double>(), 0.5 * bound) << "drawn with the fans of the repetition axes";
    EXPECT_NEAR(std(gain).item<double>(), 1.0, 0.25);  // the variance of U(-sqrt 3, sqrt 3)
  }
  EXPECT_PAX_ERROR(init_weight(WeightInit::xavier(), random::key(0), Shape{2}, DType::f32, {}, {}, 2),
                   "repeat_prefix_axes must be in [0, 1] for shape (2,), got 2");
}

TEST(Repeat, DropoutJitAndMixedPrecision) {
  auto sub = block(8, 16, 2, DType::f32);
  sub->residual_dropout_prob = 0.2;
  sub->atten_dropout_prob = 0.1;
  auto repeat = build<Repeat>(repeat_hparams(2, sub, DType::f32));
  Tree vars = init(*repeat, random::key(12));
  Array x = testing::random_array({2, 4, 8}, DType::f32, 13);
  Array paddings = zeros({2, 4});
  Array eval = apply(*repeat, vars, x, paddings).output;
  auto jitted = jit([&](const Tree& v, const Array& in) { return apply(*repeat, v, in, paddings).output; });
  EXPECT_TRUE(all_close(jitted(vars, x), eval, 1e-5, 1e-5));
  ApplyOptions train{.rngs = {{"dropout", random::key(3)}}, .train = true};
  Array a = apply(*repeat, vars, train, x, paddings).output;
  Array b = apply(*repeat, vars, train, x, paddings).output;
  EXPECT_TRUE(all_close(a, b, 0, 0));
  EXPECT_FALSE(all_close(a, eval, 1e-3, 1e-3));
  EXPECT_PAX_ERROR(apply(*repeat, vars, ApplyOptions{.train = true}, x, paddings),
                   "needs a random key for stream 'dropout'");
  // bf16 computation with the f32 variables.
  auto hp16 = repeat_hparams(2, block(8, 16, 2, DType::f32), DType::f32);
  hp16.fprop_dtype = DType::bf16;
  auto repeat16 = build<Repeat>(hp16);
  Array y16 = apply(*repeat16, vars, x.astype(DType::bf16), paddings).output;
  EXPECT_EQ(y16.dtype(), DType::bf16);
  EXPECT_TRUE(all_close(
      y16, apply(*build<Repeat>(repeat_hparams(2, block(8, 16, 2, DType::f32), DType::f32)), vars, x, paddings).output,
      0.1, 0.1));
  Tree g = grad([&](const Tree& v) {
    return sum(apply(*repeat16, v, x.astype(DType::bf16), paddings).output.astype(DType::f32));
  })(vars);
  EXPECT_EQ(g.at_path("params/sub/self_attention/query/w").leaf().dtype(), DType::f32);
}

TEST(Repeat, VmapOverExamples) {
  auto repeat = build<Repeat>(repeat_hparams(2, rotary_block(4, 8, 2, 1)));
  Tree vars = randomize(init(*repeat, random::key(15)), 90);
  Array x = testing::random_array({3, 4, 4}, DType::f64, 16);
  auto one = [&](const Array& xi) {
    return squeeze(apply(*repeat, vars, expand_dims(xi, {0}), Array(), causal_mask(4)).output, 0);
  };
  EXPECT_TRUE(all_close(vmap(one)(x), apply(*repeat, vars, x, Array(), causal_mask(4)).output, 1e-12, 1e-12));
}

TEST(Repeat, GradientCheck) {
  auto repeat = build<Repeat>(repeat_hparams(2, block(4, 4, 2)));
  Tree vars = randomize(init(*repeat, random::key(13)), 80);
  Array x = testing::random_array({1, 3, 4}, DType::f64, 14);
  EXPECT_TRUE(testing::check_layer_vjp(*repeat, vars, {x}, [](const Repeat& l, const std::vector<Array>& in) {
    return l.fprop(in[0], Array(), causal_mask(3));
  }));
}

// ---------------------------------------------------------------------------
// configs and errors

TEST(Transformers, ConfigRoundTrip) {
  auto cfg = Config::make("Repeat");
  cfg.apply_overrides({"x_times=2", "checkpoint_policy=dots_saveable", "sub_tpl.input_dims=8", "sub_tpl.hidden_dims=16",
                       "sub_tpl.num_heads=2", "sub_tpl.ln_tpl=RmsNorm",
                       "sub_tpl.tr_atten_tpl.use_rotary_position_emb=true",
                       "sub_tpl.tr_fflayer_tpl.activation_tpl=GELU"});
  auto repeat = build<Repeat>(Config::from_json(cfg.to_json()));
  Tree vars = init(*repeat, random::key(14));
  EXPECT_EQ(vars.at_path("params/sub/layer_norm/scale").leaf().shape(), (Shape{2, 8}));
  EXPECT_EQ(repeat->hparams<Repeat::HParams>().checkpoint_policy, CheckpointPolicy::dots_saveable);
  Array x = testing::random_array({1, 3, 8}, DType::f32, 15);
  EXPECT_EQ(apply(*repeat, vars, x, Array()).output.shape(), (Shape{1, 3, 8}));
  EXPECT_PAX_ERROR(cfg.set("checkpoint_policy", "dots_savable"), "did you mean 'dots_saveable'?");
}

TEST(Transformers, Errors) {
  auto hp = block(8, 16, 3);
  EXPECT_PAX_ERROR(build<Transformer>(*hp), "num_heads = 3 must divide hidden_dim = 8");
  hp = block(8, 16, 2);
  hp->norm_policy = "primer_hybrid";
  EXPECT_PAX_ERROR(build<Transformer>(*hp), "norm_policy must be \"pre\" or \"post\"");
  hp = block(8, 16, 2);
  hp->ln_tpl = tpl<Linear>();
  EXPECT_PAX_ERROR(build<Transformer>(*hp), "ln_tpl must be a LayerNorm or RmsNorm, got Linear");
  hp = block(8, 16, 2);
  hp->residual_dropout_prob = 1.0;
  EXPECT_PAX_ERROR(build<Transformer>(*hp), "residual_dropout_prob must be in [0, 1)");
  TransformerFeedForward::HParams ff;
  ff.input_dims = 4;
  ff.hidden_dims = 8;
  ff.output_dims = 6;
  EXPECT_PAX_ERROR(build<TransformerFeedForward>(ff), "add_skip_connection needs output_dims == input_dims");
  EXPECT_PAX_ERROR(build<Repeat>(repeat_hparams(0, block(8, 16, 2))), "x_times must be > 0");
  EXPECT_PAX_ERROR(build<Repeat>(repeat_hparams(2, tpl<Linear>())), "Linear");
  auto lin = tpl<Linear>();
  lin->input_dims = lin->output_dims = 2;
  EXPECT_PAX_ERROR(build<Repeat>(repeat_hparams(2, lin)), "sub_tpl must be a layer Repeat can stack");
  EXPECT_PAX_ERROR(build_layer(Config::make("RepeatedVariables")), "created by Repeat");
  auto stack_hp = stack_hparams(2, 8, 16, 2, tpl<Transformer>());
  stack_hp.transformer_layer_params_tpl = tpl<LayerNorm>();
  EXPECT_PAX_ERROR(build<StackedTransformer>(stack_hp), "transformer_layer_params_tpl must be a Transformer");

  auto layer = build<Transformer>(*block(8, 16, 2));
  Tree vars = init(*layer, random::key(0));
  EXPECT_PAX_ERROR(apply(*layer, vars, zeros({2, 3, 6}, DType::f64), zeros({2, 3})),
                   "Transformer '': inputs f64[2,3,6] must be (batch, time, 8)");
  EXPECT_PAX_ERROR(apply(*layer, vars, zeros({2, 3, 8}, DType::f64), zeros({2, 4})),
                   "paddings f32[2,4] must be (batch, time)");
  auto stack = build<StackedTransformer>(stack_hparams(2, 8, 16, 2, tpl<Transformer>()));
  Tree svars = init(*stack, random::key(0));
  EXPECT_PAX_ERROR(apply(*stack, svars, zeros({2, 3, 8}, DType::f64), zeros({3, 3})),
                   "StackedTransformer '': paddings f32[3,3] must be (batch, time)");
  auto repeat = build<Repeat>(repeat_hparams(2, block(8, 16, 2)));
  Tree rvars = init(*repeat, random::key(0));
  EXPECT_PAX_ERROR(apply(*repeat, rvars, zeros({2, 8}, DType::f64), Array()), "Repeat '': inputs f64[2,8]");
  EXPECT_PAX_ERROR(apply(*repeat, rvars, zeros({2, 3, 6}, DType::f64), Array()), "must be (batch, time, 8)");
  Tree missing = rvars;
  missing["params"]["sub"] = Tree::dict();
  EXPECT_PAX_ERROR(apply(*repeat, missing, zeros({2, 3, 8}, DType::f64), Array()), "is missing from the variables");
}

}  // namespace
}  // namespace pax::nn
