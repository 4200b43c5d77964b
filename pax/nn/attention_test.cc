// DotProductAttention against a direct softmax formula (loops in f64), masks,
// grouped-query and combined projections, causality, the KV cache, logit
// capping, gradients, jit, mixed precision and error paths.
#include "pax/nn/attention.h"

#include <gtest/gtest.h>

#include <cmath>

#include "pax/api/transforms.h"
#include "pax/ops/random.h"
#include "pax/testing/layer_check.h"

namespace pax::nn {
namespace {

using testing::all_close;

Tree randomize(const Tree& vars, uint32_t seed, double scale = 1.0) {
  return testing::randomize_params(vars, seed, scale);
}

std::vector<double> host(const Tree& params, const std::string& path) {
  return params.at_path(path).leaf().to_vector<double>();
}

// The attention output, directly: per-head projections, softmax over
// (q . k) / sqrt(H) (capped, masked), the weighted values, the output
// projection. Query head n reads key/value head n / (N / K).
std::vector<double> reference_attention(const Array& query_vec, const Array& key_vec, const Array& value_vec,
                                        const Tree& p, int64_t N, int64_t K, int64_t H, const Array& mask,
                                        double cap = 0.0) {
  const int64_t B = query_vec.dim(0), T = query_vec.dim(1), S = key_vec.dim(1), D = query_vec.dim(2), G = N / K;
  auto project = [&](const Array& x, int64_t rows, const std::string& name, int64_t heads) {
    std::vector<double> xv = x.to_vector<double>(), w = host(p, name + "/w"), b = host(p, name + "/b");
    std::vector<double> y(size_t(rows * heads * H));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < heads * H; ++j) {
        double s = b[size_t(j)];
        for (int64_t d = 0; d < D; ++d) s += xv[size_t(r * D + d)] * w[size_t(d * heads * H + j)];
        y[size_t(r * heads * H + j)] = s;
      }
    }
    return y;
  };
  std::vector<double> q = project(query_vec, B * T, "query", N), k = project(key_vec, B * S, "key", K),
                      v = project(value_vec, B * S, "value", K);
  std::vector<double> m = mask.defined() ? mask.to_vector<double>() : std::vector<double>();
  auto mdim = [&](int i) { return mask.defined() ? mask.dim(i) : 1; };
  std::vector<double> enc(size_t(B * T * N * H), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> logits(static_cast<size_t>(S));
        double mx = -INFINITY;
        for (int64_t s = 0; s < S; ++s) {
          double l = 0;
          for (int64_t h = 0; h < H; ++h) {
            l += q[size_t(((b * T + t) * N + n) * H + h)] * k[size_t(((b * S + s) * K + n / G) * H + h)];
          }
          l /= std::sqrt(double(H));
          if (cap > 0) l = cap * std::tanh(l / cap);
          if (mask.defined()) {
            const int64_t idx =
                (((mdim(0) == 1 ? 0 : b) * mdim(1) + (mdim(1) == 1 ? 0 : n)) * mdim(2) + (mdim(2) == 1 ? 0 : t)) * S +
                s;
            l = std::max(l + m[size_t(idx)], large_negative_number(DType::f64));
          }
          logits[size_t(s)] = l;
          mx = std::max(mx, l);
        }
        double z = 0;
        for (double& l : logits) z += (l = std::exp(l - mx));
        for (int64_t s = 0; s < S; ++s) {
          for (int64_t h = 0; h < H; ++h) {
            enc[size_t(((b * T + t) * N + n) * H + h)] +=
                logits[size_t(s)] / z * v[size_t(((b * S + s) * K + n / G) * H + h)];
          }
        }
      }
    }
  }
  std::vector<double> wo = host(p, "post/w"), bo = host(p, "post/b"), out(size_t(B * T * D));
  for (int64_t r = 0; r < B * T; ++r) {
    for (int64_t d = 0; d < D; ++d) {
      double s = bo[size_t(d)];
      for (int64_t j = 0; j < N * H; ++j) s += enc[size_t(r * N * H + j)] * wo[size_t(j * D + d)];
      out[size_t(r * D + d)] = s;
    }
  }
  return out;
}

DotProductAttention::HParams f64_hparams(int64_t D, int64_t N, int64_t H, int64_t K = 0) {
  DotProductAttention::HParams hp;
  hp.input_dim = D;
  hp.hidden_dim = N * H;
  hp.num_heads = N;
  hp.num_kv_heads = K;
  hp.dtype = hp.fprop_dtype = DType::f64;
  return hp;
}

Array row(const Array& x, int64_t t) { return squeeze(slice_along(x, 1, t, t + 1), 1); }

TEST(AttentionMasks, Values) {
  const double big = double(float(large_negative_number(DType::f32)));
  EXPECT_TRUE(all_close(causal_mask(3), {0, big, big, 0, 0, big, 0, 0, 0}, 0, 0));
  EXPECT_EQ(causal_mask(3).shape(), (Shape{1, 1, 3, 3}));
  Array pad = padding_mask(array<float>({0, 0, 1, 0, 1, 1}, {2, 3}));
  EXPECT_EQ(pad.shape(), (Shape{2, 1, 1, 3}));
  EXPECT_TRUE(all_close(pad, {0, 0, big, 0, big, big}, 0, 0));
  Array both = combine_masks(pad, causal_mask(3));  // (2, 1, 3, 3)
  EXPECT_EQ(both.shape(), (Shape{2, 1, 3, 3}));
  EXPECT_TRUE(all_close(slice_along(both, 0, 0, 1), {0, big, big, 0, 0, big, 0, 0, big}, 0, 0));
  EXPECT_TRUE(all_close(causal_step_mask(scalar<int32_t>(1), 4), {0, 0, big, big}, 0, 0));
  EXPECT_EQ(large_negative_number(DType::f64), -0.7 * std::numeric_limits<double>::max());
  EXPECT_PAX_ERROR(padding_mask(zeros({3})), "must be (batch, length)");
  EXPECT_PAX_ERROR(causal_step_mask(scalar<float>(1), 4), "integer scalar");
}

TEST(DotProductAttention, MatchesDirectFormulaWithPaddingMask) {
  auto layer = build<DotProductAttention>(f64_hparams(6, 2, 3));
  Tree vars = randomize(init(*layer, random::key(0)), 10);
  EXPECT_EQ(tree_paths(vars),
            (std::vector<std::string>{"params/query/w", "params/query/b", "params/key/w", "params/key/b",
                                      "params/value/w", "params/value/b", "params/post/w", "params/post/b"}));
  EXPECT_EQ(vars.at_path("params/query/w").leaf().shape(), (Shape{6, 2, 3}));
  EXPECT_EQ(vars.at_path("params/post/w").leaf().shape(), (Shape{2, 3, 6}));
  Array q = testing::random_array({2, 3, 6}, DType::f64, 1), k = testing::random_array({2, 4, 6}, DType::f64, 2),
        v = testing::random_array({2, 4, 6}, DType::f64, 3);
  Array paddings = array<double>({0, 0, 0, 1, 0, 0, 1, 1}, {2, 4});
  Array mask = padding_mask(paddings);
  Array y = apply_with(*layer, vars, [&](const DotProductAttention& l) { return l.fprop(q, k, v, mask); }).output;
  EXPECT_EQ(y.shape(), (Shape{2, 3, 6}));
  EXPECT_TRUE(all_close(y, reference_attention(q, k, v, vars["params"], 2, 2, 3, mask), 1e-10, 1e-10));
  // No mask: attend everywhere.
  Array open = apply_with(*layer, vars, [&](const DotProductAttention& l) { return l.fprop(q, k, v); }).output;
  EXPECT_TRUE(all_close(open, reference_attention(q, k, v, vars["params"], 2, 2, 3, Array()), 1e-10, 1e-10));
  // Padded keys and values do not matter.
  Array pad3 = reshape(paddings, {2, 4, 1});
  Array k2 = k + pad3 * 5.0, v2 = v - pad3 * 3.0;
  Array y2 = apply_with(*layer, vars, [&](const DotProductAttention& l) { return l.fprop(q, k2, v2, mask); }).output;
  EXPECT_TRUE(all_close(y2, y, 1e-12, 1e-12));
  // A per-head, per-query mask (1, N, T, S).
  const double big = large_negative_number(DType::f32);
  std::vector<double> hm(2 * 3 * 4, 0.0);
  for (int t = 0; t < 3; ++t) hm[size_t(12 + t * 4 + t)] = big;  // head 1, query t: not key t
  Array head_mask = array(hm, {1, 2, 3, 4});
  Array y3 = apply_with(*layer, vars, [&](const DotProductAttention& l) { return l.fprop(q, k, v, head_mask); }).output;
  EXPECT_TRUE(all_close(y3, reference_attention(q, k, v, vars["params"], 2, 2, 3, head_mask), 1e-10, 1e-10));
  EXPECT_FALSE(all_close(y3, open, 1e-6, 1e-6));
}

TEST(DotProductAttention, FullyMaskedRowsAttendUniformly) {
  auto layer = build<DotProductAttention>(f64_hparams(4, 1, 4));
  Tree vars = randomize(init(*layer, random::key(0)), 20);
  Array x = testing::random_array({1, 3, 4}, DType::f64, 5);
  Array all_masked = full({1, 1, 3, 3}, large_negative_number(DType::f32));
  Array y = apply(*layer, vars, x, all_masked).output;
  EXPECT_TRUE(all_close(isfinite(y).astype(DType::f64), std::vector<double>(12, 1.0), 0, 0));
  // In the reference too, the masked logits all round to the same value.
  EXPECT_TRUE(all_close(y, reference_attention(x, x, x, vars["params"], 1, 1, 4, all_masked), 1e-10, 1e-10));
  Array values = apply_with(*layer, vars, [&](const DotProductAttention& l) { return l.fprop(x, all_masked); }).output;
  EXPECT_TRUE(all_close(slice_along(values, 1, 0, 1), slice_along(values, 1, 2, 3), 1e-12, 1e-12));
}

// The attention_entropy summary: with zero query weights every logit is 0,
// so under a causal mask query t attends uniformly to t + 1 keys and its
// entropy is log(t + 1); the summary is their mean. No summary when the
// apply collects none.
TEST(DotProductAttention, EntropySummary) {
  auto layer = build<DotProductAttention>(f64_hparams(4, 2, 2));
  Tree vars = randomize(init(*layer, random::key(0)), 21);
  vars = tree_map_with_path(
      [](const std::string& path, const Array& v) { return path.starts_with("params/query") ? zeros_like(v) : v; },
      vars);
  Array x = testing::random_array({3, 4, 4}, DType::f64, 6);
  auto run = [&](bool summaries) {
    return apply_with(*layer, vars, [&](const DotProductAttention& l) { return l.fprop(x, causal_mask(4)); },
                      {.summaries = summaries});
  };
  const auto out = run(true);
  ASSERT_TRUE(out.summaries.contains("attention_entropy")) << out.summaries.str();
  const double want = (std::log(1.0) + std::log(2.0) + std::log(3.0) + std::log(4.0)) / 4;
  EXPECT_NEAR(out.summaries["attention_entropy"].leaf().item<double>(), want, 1e-6);
  EXPECT_TRUE(run(false).summaries.is_none() || run(false).summaries.size() == 0);
}

// In f32 the layer runs the attention primitive and takes the entropy from
// its log-sum-exp (H = lse - E_p[x]); with a logit cap too large to change
// the logits it runs the composite over the [T, S] probabilities. Both give
// the same output and entropy, a fully padded example (every key masked:
// uniform rows, entropy log S) and grouped heads included.
// f32 runs the primitive; f64 (logits in f64) the probabilities. With and
// without a logit cap (which bends these logits: scale 3 weights).
TEST(DotProductAttention, PrimitivePathEqualsTheProbabilitiesPath) {
  for (double cap : {0.0, 0.5}) {
    SCOPED_TRACE(cap);
    auto hp = f64_hparams(8, 4, 4, 2);
    hp.atten_logit_cap = cap;
    auto composite = build<DotProductAttention>(hp);
    hp.dtype = hp.fprop_dtype = DType::f32;
    auto fused = build<DotProductAttention>(hp);
    const Tree vars = randomize(init(*fused, random::key(0)), 31, 3.0);
    const Tree vars64 = tree_map([](const Array& v) { return v.astype(DType::f64); }, vars);
    const Array x = testing::random_array({3, 5, 8}, DType::f32, 7);
    // Example 2 is all padding.
    const Array paddings = array(std::vector<float>{0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1}, Shape{3, 5});
    const Array mask = combine_masks(padding_mask(paddings), causal_mask(5));
    auto run = [&](const DotProductAttention& layer, const Tree& v, const Array& in) {
      return apply_with(layer, v, [&](const DotProductAttention& l) { return l.fprop(in, mask); }, {});
    };
    const auto a = run(*fused, vars, x), b = run(*composite, vars64, x.astype(DType::f64));
    EXPECT_TRUE(all_close(a.output.astype(DType::f64), b.output, 1e-4, 1e-4));
    EXPECT_NEAR(a.summaries["attention_entropy"].leaf().item<double>(),
                b.summaries["attention_entropy"].leaf().item<double>(), 1e-5);
    // The gradients of the primitive's backward against the probabilities'.
    auto loss = [&](const DotProductAttention& layer, const Array& in) {
      return [&layer, in, &mask](const Tree& v) {
        return sum(square(apply(layer, v, in, mask).output.astype(DType::f64)));
      };
    };
    const Tree ga = grad(loss(*fused, x))(vars), gb = grad(loss(*composite, x.astype(DType::f64)))(vars64);
    for (const std::string& path : {"params/query/w", "params/key/w", "params/value/w"}) {
      SCOPED_TRACE(path);
      EXPECT_TRUE(all_close(ga.at_path(path).leaf().astype(DType::f64), gb.at_path(path).leaf(), 1e-3, 1e-3));
    }
  }
}

TEST(DotProductAttention, GroupedQueryAttentionEqualsRepeatedHeads) {
  const int64_t D = 8, N = 4, K = 2, H = 2, G = N / K;
  auto gqa = build<DotProductAttention>(f64_hparams(D, N, H, K));
  Tree vars = randomize(init(*gqa, random::key(1)), 30);
  EXPECT_EQ(vars.at_path("params/key/w").leaf().shape(), (Shape{D, K, H}));
  Array x = testing::random_array({2, 5, D}, DType::f64, 6);
  Array mask = causal_mask(5);
  Array y = apply(*gqa, vars, x, mask).output;
  EXPECT_TRUE(all_close(y, reference_attention(x, x, x, vars["params"], N, K, H, mask), 1e-10, 1e-10));
  // Standard attention whose key/value heads repeat each KV head G times.
  auto mha = build<DotProductAttention>(f64_hparams(D, N, H));
  Tree mvars = init(*mha, random::key(2));
  Tree& p = mvars["params"];
  for (const char* name : {"query", "post"}) p[name] = vars["params"][name];
  for (const char* name : {"key", "value"}) {
    const Tree& g = vars["params"][name];
    Ints rep_w, rep_b;
    for (int64_t k = 0; k < K; ++k) {
      for (int64_t i = 0; i < G; ++i) rep_w.push_back(k);
    }
    p[name]["w"] = take(g["w"].leaf(), array(rep_w).astype(DType::i32), 1);
    p[name]["b"] = take(g["b"].leaf(), array(rep_w).astype(DType::i32), 0);
  }
  EXPECT_TRUE(all_close(apply(*mha, mvars, x, mask).output, y, 1e-12, 1e-12));
}

TEST(DotProductAttention, CombinedProjectionEqualsSeparateOnes) {
  auto separate = build<DotProductAttention>(f64_hparams(6, 3, 2));
  Tree vars = randomize(init(*separate, random::key(3)), 40);
  auto hp = f64_hparams(6, 3, 2);
  hp.combine_qkv = true;
  auto combined = build<DotProductAttention>(hp);
  Tree cvars = init(*combined, random::key(4));
  EXPECT_EQ(cvars.at_path("params/combined_qkv/w").leaf().shape(), (Shape{6, 3, 3, 2}));
  EXPECT_EQ(cvars.at_path("params/combined_qkv/b").leaf().shape(), (Shape{3, 3, 2}));
  const Tree& p = vars["params"];
  cvars["params"]["combined_qkv"]["w"] =
      stack({p.at_path("query/w").leaf(), p.at_path("key/w").leaf(), p.at_path("value/w").leaf()}, 1);
  cvars["params"]["combined_qkv"]["b"] =
      stack({p.at_path("query/b").leaf(), p.at_path("key/b").leaf(), p.at_path("value/b").leaf()}, 0);
  cvars["params"]["post"] = p["post"];
  Array x = testing::random_array({2, 4, 6}, DType::f64, 7);
  EXPECT_TRUE(all_close(apply(*combined, cvars, x, causal_mask(4)).output,
                        apply(*separate, vars, x, causal_mask(4)).output, 1e-12, 1e-12));
  // The combined projection reads one input: cross-attention is refused.
  Array other = x + 1.0;
  EXPECT_PAX_ERROR(apply_with(*combined, cvars, [&](const DotProductAttention& l) { return l.fprop(x, other, other); }),
                   "combine_qkv projects query_vec only");
}

TEST(DotProductAttention, CausalMaskMakesOutputsIndependentOfLaterInputs) {
  auto hp = f64_hparams(4, 2, 2);
  hp.use_rotary_position_emb = true;
  auto layer = build<DotProductAttention>(hp);
  Tree vars = randomize(init(*layer, random::key(5)), 50);
  const int64_t T = 5;
  Array x = testing::random_array({2, T, 4}, DType::f64, 8);
  auto f = [&](const Array& in) { return apply(*layer, vars, in, causal_mask(T)).output; };
  Array y = f(x);
  for (int64_t t = 0; t < T - 1; ++t) {
    // Perturb every position after t.
    Array later = (arange<int64_t>(T) > t).astype(DType::f64);
    Array perturbed = x + reshape(later, {1, T, 1}) * testing::random_array({2, T, 4}, DType::f64, 9);
    EXPECT_TRUE(all_close(slice_along(f(perturbed), 1, 0, t + 1), slice_along(y, 1, 0, t + 1), 1e-12, 1e-12)) << t;
    // d out[:, t] / d x[:, s] = 0 for s > t.
    Array g = grad([&](const Array& in) { return sum(row(f(in), t)); })(x);
    EXPECT_TRUE(all_close(slice_along(g, 1, t + 1), std::vector<double>(size_t(2 * (T - t - 1) * 4), 0.0), 0, 0)) << t;
    EXPECT_GT(max(abs(slice_along(g, 1, 0, t + 1))).item<double>(), 0.0);
  }
}

TEST(DotProductAttention, LogitCap) {
  auto hp = f64_hparams(4, 2, 2);
  hp.atten_logit_cap = 0.5;
  auto layer = build<DotProductAttention>(hp);
  Tree vars = randomize(init(*layer, random::key(6)), 60, 3.0);  // large logits, so the cap matters
  Array x = testing::random_array({2, 3, 4}, DType::f64, 10, -2, 2);
  Array y = apply(*layer, vars, x, causal_mask(3)).output;
  EXPECT_TRUE(all_close(y, reference_attention(x, x, x, vars["params"], 2, 2, 2, causal_mask(3), 0.5), 1e-10, 1e-10));
  EXPECT_FALSE(all_close(y, reference_attention(x, x, x, vars["params"], 2, 2, 2, causal_mask(3)), 1e-3, 1e-3));
}

TEST(DotProductAttention, Gradients) {
  for (int64_t K : {int64_t(0), int64_t(1)}) {
    for (bool rotary : {false, true}) {
      auto hp = f64_hparams(4, 2, 2, K);
      hp.use_rotary_position_emb = rotary;
      hp.atten_logit_cap = rotary ? 2.0 : 0.0;
      auto layer = build<DotProductAttention>(hp);
      Tree vars = randomize(init(*layer, random::key(7)), 70);
      Array x = testing::random_array({2, 3, 4}, DType::f64, 11);
      Array mask = combine_masks(causal_mask(3), padding_mask(array<double>({0, 0, 0, 0, 0, 1}, {2, 3})));
      EXPECT_TRUE(testing::check_layer_vjp(
          *layer, vars, {x},
          [&](const DotProductAttention& l, const std::vector<Array>& in) { return l.fprop(in[0], mask); }))
          << "K " << K << " rotary " << rotary;
    }
  }
}

// Decoding one position at a time with the KV cache gives the rows of the
// full causal pass.
TEST(DotProductAttention, KvCacheDecodingEqualsCausalForwardPass) {
  for (bool combine : {false, true}) {
    auto hp = f64_hparams(8, 4, 2, combine ? 0 : 2);
    hp.use_rotary_position_emb = true;
    hp.combine_qkv = combine;
    auto layer = build<DotProductAttention>(hp);
    Tree vars = randomize(init(*layer, random::key(8)), 80);
    const int64_t B = 2, T = 5;
    Array x = testing::random_array({B, T, 8}, DType::f64, 12);
    Array full_pass = apply(*layer, vars, x, causal_mask(T)).output;
    ApplyOptions mut{.mutable_collections = {"decoder_cache"}};
    // Cache from init_states.
    Tree state = vars;
    state["decoder_cache"] = apply_with(
                                 *layer, vars,
                                 [&](const DotProductAttention& l) {
                                   l.init_states(B, T);
                                   return 0;
                                 },
                                 mut)
                                 .updates["decoder_cache"];
    EXPECT_EQ(state.at_path("decoder_cache/key_state").leaf().shape(), (Shape{B, T, layer->num_kv_heads(), 2}));
    // And the cache created on the first step.
    Tree fresh = vars;
    for (int64_t t = 0; t < T; ++t) {
      Array t_arr = scalar<int32_t>(int32_t(t));
      auto step = [&](const DotProductAttention& l) {
        return l.extend_step(row(x, t), causal_step_mask(t_arr, T), t_arr);
      };
      auto out = apply_with(*layer, state, step, mut);
      EXPECT_TRUE(all_close(out.output, row(full_pass, t), 1e-10, 1e-10)) << "combine " << combine << " step " << t;
      state["decoder_cache"] = out.updates["decoder_cache"];
      auto out2 = apply_with(*layer, fresh, step, mut);
      EXPECT_TRUE(all_close(out2.output, out.output, 0, 0));
      fresh["decoder_cache"] = out2.updates["decoder_cache"];
    }
  }
}

TEST(DotProductAttention, JittedDecodingStepWithTracedTimeStep) {
  auto hp = f64_hparams(4, 2, 2);
  hp.use_rotary_position_emb = true;
  auto layer = build<DotProductAttention>(hp);
  Tree vars = randomize(init(*layer, random::key(9)), 90);
  const int64_t T = 4;
  Array x = testing::random_array({1, T, 4}, DType::f64, 13);
  Array full_pass = apply(*layer, vars, x, causal_mask(T)).output;
  auto step = jit([&](const Tree& state, const Array& xt, const Array& t) {
    auto out = apply_with(*layer, state,
                          [&](const DotProductAttention& l) { return l.extend_step(xt, causal_step_mask(t, T), t); },
                          {.mutable_collections = {"decoder_cache"}});
    return std::make_pair(out.output, out.updates["decoder_cache"]);
  });
  Tree state = vars;
  state["decoder_cache"] = apply_with(*layer, vars,
                                      [&](const DotProductAttention& l) {
                                        l.init_states(1, T);
                                        return 0;
                                      },
                                      {.mutable_collections = {"decoder_cache"}})
                               .updates["decoder_cache"];
  for (int64_t t = 0; t < T; ++t) {
    auto [y, cache] = step(state, row(x, t), scalar<int32_t>(int32_t(t)));
    EXPECT_TRUE(all_close(y, row(full_pass, t), 1e-10, 1e-10)) << t;
    state["decoder_cache"] = cache;
  }
}

TEST(DotProductAttention, JitEqualsEagerAndMixedPrecision) {
  DotProductAttention::HParams hp;
  hp.input_dim = 16;
  hp.hidden_dim = 16;
  hp.num_heads = 4;
  hp.num_kv_heads = 2;
  hp.use_rotary_position_emb = true;
  auto layer = build<DotProductAttention>(hp);
  Tree vars = init(*layer, random::key(10));
  Array x = testing::random_array({2, 6, 16}, DType::f32, 14);
  Array eager = apply(*layer, vars, x, causal_mask(6)).output;
  auto jitted = jit([&](const Tree& v, const Array& in) { return apply(*layer, v, in, causal_mask(6)).output; });
  EXPECT_TRUE(all_close(jitted(vars, x), eager, 1e-5, 1e-5));
  // The same in f64.
  auto hp64 = hp;
  hp64.dtype = hp64.fprop_dtype = DType::f64;
  Tree vars64 = vars;
  vars64["params"] = tree_map([](const Array& a) { return a.astype(DType::f64); }, vars["params"]);
  EXPECT_TRUE(all_close(apply(*build<DotProductAttention>(hp64), vars64, x, causal_mask(6)).output, eager, 1e-5, 1e-5));
  // bf16 computation with the same f32 variables.
  hp.fprop_dtype = DType::bf16;
  auto layer16 = build<DotProductAttention>(hp);
  Array y16 = apply(*layer16, vars, x.astype(DType::bf16), causal_mask(6)).output;
  EXPECT_EQ(y16.dtype(), DType::bf16);
  EXPECT_TRUE(all_close(y16, eager, 5e-2, 5e-2));
  Tree g = grad([&](const Tree& v) {
    return sum(apply(*layer16, v, x.astype(DType::bf16), causal_mask(6)).output.astype(DType::f32));
  })(vars);
  EXPECT_EQ(g.at_path("params/query/w").leaf().dtype(), DType::f32);
  // The bf16 backward (probabilities kept in bf16) stays close to f32's.
  Tree g32 = grad([&](const Tree& v) { return sum(apply(*layer, v, x, causal_mask(6)).output); })(vars);
  for (const char* path : {"params/query/w", "params/key/w", "params/value/w", "params/post/w"}) {
    const Array a = g.at_path(path).leaf(), b = g32.at_path(path).leaf();
    auto l2 = [](const Array& v) { return std::sqrt(sum(v * v).item<double>()); };
    EXPECT_LT(l2(a - b), 0.03 * l2(b) + 1e-3) << path;
  }
}

TEST(DotProductAttention, VmapOverExamples) {
  auto hp = f64_hparams(4, 2, 2, 1);
  hp.use_rotary_position_emb = true;
  auto layer = build<DotProductAttention>(hp);
  Tree vars = randomize(init(*layer, random::key(12)), 100);
  Array x = testing::random_array({3, 4, 4}, DType::f64, 15);
  auto one = [&](const Array& xi) {
    return squeeze(apply(*layer, vars, expand_dims(xi, {0}), causal_mask(4)).output, 0);
  };
  EXPECT_TRUE(all_close(vmap(one)(x), apply(*layer, vars, x, causal_mask(4)).output, 1e-12, 1e-12));
}

TEST(DotProductAttention, ProjectionInitialisation) {
  DotProductAttention::HParams hp;
  hp.input_dim = 256;
  hp.hidden_dim = 512;
  hp.num_heads = 8;
  auto layer = build<DotProductAttention>(hp);
  Tree vars = init(*layer, random::key(11));
  // Xavier over fan_in = D and fan_out = N * H (reversed for the output).
  const double want = std::sqrt(2.0 / (256 + 512));
  for (const char* path : {"params/query/w", "params/post/w"}) {
    Array w = vars.at_path(path).leaf();
    EXPECT_NEAR(mean(w).item<double>(), 0.0, 0.02 * want) << path;
    EXPECT_NEAR(std(w).item<double>(), want, 0.02 * want) << path;
  }
  EXPECT_TRUE(all_close(vars.at_path("params/query/b").leaf(), std::vector<double>(512, 0.0), 0, 0));
}

TEST(DotProductAttention, Errors) {
  auto hp = f64_hparams(6, 4, 0);
  hp.hidden_dim = 6;
  EXPECT_PAX_ERROR(build<DotProductAttention>(hp), "num_heads = 4 must divide hidden_dim = 6");
  hp = f64_hparams(8, 4, 2, 3);
  EXPECT_PAX_ERROR(build<DotProductAttention>(hp), "num_kv_heads = 3 must divide num_heads = 4");
  hp = f64_hparams(8, 4, 2, 2);
  hp.combine_qkv = true;
  EXPECT_PAX_ERROR(build<DotProductAttention>(hp), "combine_qkv needs num_kv_heads == num_heads");
  hp = f64_hparams(8, 4, 2);
  hp.use_rotary_position_emb = true;
  hp.dim_per_head = 3;
  EXPECT_PAX_ERROR(build<DotProductAttention>(hp), "embedding_dims must be positive and even");
  hp = f64_hparams(8, 4, 2);
  auto layer = build<DotProductAttention>(hp);
  Tree vars = init(*layer, random::key(0));
  Array x = zeros({2, 3, 8}, DType::f64);
  EXPECT_PAX_ERROR(apply(*layer, vars, zeros({2, 3, 7}, DType::f64)), "query_vec f64[2,3,7] must be (batch, time, 8)");
  EXPECT_PAX_ERROR(apply_with(*layer, vars,
                              [&](const DotProductAttention& l) {
                                return l.fprop(x, zeros({3, 3, 8}, DType::f64), zeros({3, 3, 8}, DType::f64));
                              }),
                   "key_vec f64[3,3,8] must be (2, source length, 8)");
  EXPECT_PAX_ERROR(apply(*layer, vars, x, zeros({2, 1, 3, 4})), "atten_mask f32[2,1,3,4] must be a float");
  EXPECT_PAX_ERROR(apply(*layer, vars, x, zeros({2, 3, 3})), "atten_mask f32[2,3,3]");
  // Decoding without a cache and without a mutable collection.
  auto step = [&](const DotProductAttention& l) {
    return l.extend_step(zeros({2, 8}, DType::f64), zeros({1, 1, 4}), scalar<int32_t>(0));
  };
  EXPECT_PAX_ERROR(apply_with(*layer, vars, step), "call init_states first");
  ApplyOptions mut{.mutable_collections = {"decoder_cache"}};
  EXPECT_PAX_ERROR(apply_with(
                       *layer, vars,
                       [&](const DotProductAttention& l) {
                         return l.extend_step(zeros({2, 8}, DType::f64), zeros({1, 1, 4}), scalar<int32_t>(4));
                       },
                       mut),
                   "time_step 4 is outside the cache of length 4");
  EXPECT_PAX_ERROR(apply_with(
                       *layer, vars,
                       [&](const DotProductAttention& l) {
                         return l.extend_step(zeros({2, 3, 8}, DType::f64), zeros({1, 1, 4}), scalar<int32_t>(0));
                       },
                       mut),
                   "extend_step query_vec f64[2,3,8] must be (batch, 8)");
  Tree cache = apply_with(
                   *layer, vars,
                   [&](const DotProductAttention& l) {
                     l.init_states(2, 6);
                     return 0;
                   },
                   mut)
                   .updates;
  Tree state = vars;
  state["decoder_cache"] = cache["decoder_cache"];
  EXPECT_PAX_ERROR(apply_with(*layer, state, step, mut), "does not match the step");
}

}  // namespace
}  // namespace pax::nn
