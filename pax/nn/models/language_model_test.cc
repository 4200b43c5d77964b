// TransformerLm / LanguageModel: loss and metrics against the logits,
// causality, packed inputs, gradients, KV-cache decoding against the full
// forward pass (greedy, per-example prefixes, EOS, sampling), Repeat stacks,
// FLOPs and config round trips.
#include "pax/nn/models/language_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "pax/api/transforms.h"
#include "pax/ops/nn.h"
#include "pax/ops/random.h"
#include "pax/testing/layer_check.h"

namespace pax::nn {
namespace {

using testing::all_close;

Config tiny_lm(int64_t vocab = 11, int64_t dims = 8, int64_t layers = 2, DType dtype = DType::f32) {
  Config c = Config::make("LanguageModel");
  c.set("lm_tpl.model_dims", std::to_string(dims));
  c.set("lm_tpl.vocab_size", std::to_string(vocab));
  c.set("lm_tpl.stacked_transformer_tpl.num_layers", std::to_string(layers));
  c.set("lm_tpl.stacked_transformer_tpl.hidden_dims", std::to_string(2 * dims));
  c.set("lm_tpl.stacked_transformer_tpl.num_heads", "2");
  c.set("dtype", dtype_name(dtype));
  c.set("fprop_dtype", dtype_name(dtype));
  return c;
}

Tree random_vars(const Layer& model, uint32_t seed, double scale = 0.5) {
  return testing::randomize_params(init(model, random::key(0)), seed, scale);
}

Tree lm_batch(const Array& ids, const Array& labels, const Array& paddings) {
  return Tree::dict({{"ids", ids}, {"labels", labels}, {"paddings", paddings}});
}

// The logits (B, T, V) of `batch` ({ids, paddings, ...}).
Array lm_logits(const LanguageModel& model, const Tree& vars, const Tree& batch) {
  return apply_with(model, vars, [&](const LanguageModel& m) { return m.compute_predictions(batch); })
      .output["logits"]
      .leaf();
}

// Changing the tokens from position 3 on leaves the logits before it as they
// were and changes those at position 3.
void expect_causal(const LanguageModel& model, const Tree& vars) {
  Array zeros6 = zeros({1, 6});
  Array a =
      lm_logits(model, vars, Tree::dict({{"ids", array<int32_t>({1, 2, 3, 4, 5, 6}, {1, 6})}, {"paddings", zeros6}}));
  Array b =
      lm_logits(model, vars, Tree::dict({{"ids", array<int32_t>({1, 2, 3, 9, 9, 9}, {1, 6})}, {"paddings", zeros6}}));
  EXPECT_TRUE(all_close(slice_along(a, 1, 0, 3), slice_along(b, 1, 0, 3), 1e-6, 1e-6));
  EXPECT_FALSE(all_close(slice_along(a, 1, 3, 4), slice_along(b, 1, 3, 4), 1e-6, 1e-6));
}

TEST(LanguageModel, LossAndMetricsFollowTheLogits) {
  auto model = build<LanguageModel>(tiny_lm());
  Tree vars = random_vars(*model, 1);
  Array ids = array<int32_t>({3, 4, 5, 6, 7, 2, 9, 1}, {2, 4});
  Array labels = array<int32_t>({4, 5, 6, 7, 2, 9, 1, 0}, {2, 4});
  Array paddings = array<float>({0, 0, 0, 0, 0, 0, 1, 1}, {2, 4});
  auto out = apply_with(*model, vars, [&](const LanguageModel& m) {
    Tree pred = m.compute_predictions(lm_batch(ids, labels, paddings));
    return std::make_pair(pred, m.compute_loss(pred, lm_batch(ids, labels, paddings)).first);
  });
  std::vector<double> lg = out.output.first["logits"].leaf().to_vector<double>();
  std::vector<int> lab = {4, 5, 6, 7, 2, 9, 1, 0};
  std::vector<double> w = {1, 1, 1, 1, 1, 1, 0, 0};
  double loss = 0, correct = 0;
  for (int t = 0; t < 8; ++t) {
    double mx = -1e30, z = 0;
    int best = 0;
    for (int v = 0; v < 11; ++v) {
      mx = std::max(mx, lg[size_t(t * 11 + v)]);
      if (lg[size_t(t * 11 + v)] > lg[size_t(t * 11 + best)]) best = v;
    }
    for (int v = 0; v < 11; ++v) z += std::exp(lg[size_t(t * 11 + v)] - mx);
    loss += w[size_t(t)] * -(lg[size_t(t * 11 + lab[size_t(t)])] - mx - std::log(z));
    correct += w[size_t(t)] * (best == lab[size_t(t)]);
  }
  const Tree& metrics = out.output.second;
  EXPECT_TRUE(all_close(metric_value(metrics, "total_loss"), {loss / 6}, 1e-5));
  EXPECT_TRUE(all_close(metric_value(metrics, "log_pplx"), {loss / 6}, 1e-5));
  EXPECT_TRUE(all_close(metric_value(metrics, "fraction_of_correct_next_step_preds"), {correct / 6}, 1e-6));
  EXPECT_TRUE(all_close(metric_value(metrics, "num_predictions"), {6}));
  EXPECT_TRUE(all_close(metric_weight(metrics, "avg_xent"), {6}));
}

TEST(LanguageModel, CausalAndPackedInputs) {
  auto model = build<LanguageModel>(tiny_lm());
  Tree vars = random_vars(*model, 2);
  auto logits = [&](const Tree& batch) { return lm_logits(*model, vars, batch); };
  expect_causal(*model, vars);
  Array ids = array<int32_t>({1, 2, 3, 4, 5, 6}, {1, 6});
  Array zeros6 = zeros({1, 6});
  // Packed: two segments in one row equal the two sequences run alone.
  Tree packed = Tree::dict({{"ids", ids},
                            {"paddings", zeros6},
                            {"segment_ids", array<int32_t>({1, 1, 1, 2, 2, 2}, {1, 6})},
                            {"segment_pos", array<int32_t>({0, 1, 2, 0, 1, 2}, {1, 6})}});
  Array both = logits(packed);
  Array first = logits(Tree::dict({{"ids", slice_along(ids, 1, 0, 3)}, {"paddings", zeros({1, 3})}}));
  Array second = logits(Tree::dict({{"ids", slice_along(ids, 1, 3, 6)}, {"paddings", zeros({1, 3})}}));
  EXPECT_TRUE(all_close(slice_along(both, 1, 0, 3), first, 1e-5, 1e-5));
  EXPECT_TRUE(all_close(slice_along(both, 1, 3, 6), second, 1e-5, 1e-5));
}

// A Repeat of a bare Transformer (Repeat's default sub_tpl), at any depth,
// gets model_dims and the causal mask from the LM: position t does not see
// the tokens after it, and decoding through the KV cache agrees.
TEST(LanguageModel, RepeatOfBareTransformersIsCausal) {
  for (const std::string& stack :
       {std::string("lm_tpl.stacked_transformer_tpl"), std::string("lm_tpl.stacked_transformer_tpl.sub_tpl")}) {
    Config cfg = tiny_lm();
    cfg.set("lm_tpl.stacked_transformer_tpl", "Repeat");
    cfg.set("lm_tpl.stacked_transformer_tpl.x_times", "2");
    if (stack != "lm_tpl.stacked_transformer_tpl") {
      cfg.set("lm_tpl.stacked_transformer_tpl.sub_tpl", "Repeat");
      cfg.set(stack + ".x_times", "2");
    }
    cfg.set(stack + ".sub_tpl", "Transformer");  // input_dims left unset: the LM's model_dims
    cfg.set(stack + ".sub_tpl.hidden_dims", "16");
    cfg.set(stack + ".sub_tpl.num_heads", "2");
    cfg.set("max_decode_length", "6");
    cfg.set("eos_id", "-1");
    auto model = build<LanguageModel>(cfg);
    Tree vars = random_vars(*model, 8, 1.0);
    SCOPED_TRACE(stack);
    auto logits = [&](const Array& ids, const Array& paddings) {
      return lm_logits(*model, vars, Tree::dict({{"ids", ids}, {"paddings", paddings}}));
    };
    expect_causal(*model, vars);
    Array zeros6 = zeros({1, 6});
    Array a = logits(array<int32_t>({1, 2, 3, 4, 5, 6}, {1, 6}), zeros6);
    // Padded positions are not attended to: a padded tail changes nothing before it.
    Array padded = array<float>({0, 0, 0, 0, 1, 1}, {1, 6});
    Array c = logits(array<int32_t>({1, 2, 3, 4, 7, 7}, {1, 6}), padded);
    EXPECT_TRUE(all_close(slice_along(c, 1, 0, 4), slice_along(a, 1, 0, 4), 1e-6, 1e-6));
    // Greedy decoding through the caches equals the full pass on its output.
    Tree decoded = apply_with(*model, vars,
                              [&](const LanguageModel& m) {
                                return m.decode(Tree::dict({{"prefix", array<int32_t>({3, 5}, {1, 2})},
                                                            {"prefix_lengths", array<int32_t>({2})}}));
                              },
                              {.mutable_collections = {"decoder_cache"}})
                       .output;
    Array tokens = decoded["output_ids"].leaf();  // (1, 6)
    std::vector<int> t = tokens.to_vector<int>();
    Array full = argmax(logits(tokens, zeros6), -1);  // (1, 6): the greedy choice after each position
    std::vector<int> next = full.to_vector<int>();
    for (size_t i = 2; i < t.size(); ++i) EXPECT_EQ(t[i], next[i - 1]) << "position " << i;
  }
}

TEST(LanguageModel, GradientsMatchFiniteDifferences) {
  auto model = build<LanguageModel>(tiny_lm(7, 4, 1, DType::f64));
  Tree vars = random_vars(*model, 3);
  Tree batch =
      lm_batch(array<int32_t>({1, 2, 3, 4}, {1, 4}), array<int32_t>({2, 3, 4, 5}, {1, 4}), zeros({1, 4}, DType::f64));
  EXPECT_TRUE(testing::check_layer_vjp(*model, vars, {}, [&](const LanguageModel& m, const std::vector<Array>&) {
    return metric_value(m.fprop_batch(batch).first, "total_loss");
  }));
}

// Greedy decoding through the KV cache agrees with the full forward pass
// run on the decoded sequence (teacher forcing), step by step.
TEST(LanguageModel, KvCacheDecodingEqualsTheFullPass) {
  Config cfg = tiny_lm();
  cfg.set("max_decode_length", "8");
  cfg.set("eos_id", "-1");
  auto model = build<LanguageModel>(cfg);
  Tree vars = random_vars(*model, 4, 1.0);
  Tree batch =
      Tree::dict({{"prefix", array<int32_t>({3, 5, 7, 2, 0, 0}, {2, 3})}, {"prefix_lengths", array<int32_t>({3, 1})}});
  ApplyOptions decoding{.mutable_collections = {"decoder_cache"}};
  Tree out = apply_with(
                 *model, vars, [&](const LanguageModel& m) { return m.decode(batch); }, decoding)
                 .output;
  Array tokens = out["output_ids"].leaf();  // (2, 8)
  EXPECT_EQ(tokens.shape(), (Shape{2, 8}));
  std::vector<int> t = tokens.to_vector<int>();
  EXPECT_EQ(t[0], 3);
  EXPECT_EQ(t[1], 5);
  EXPECT_EQ(t[2], 7);  // the first example's whole prefix
  EXPECT_EQ(t[8], 2);  // the second's single prefix token
  Array full = apply_with(*model, vars,
                          [&](const LanguageModel& m) {
                            return m.compute_predictions(Tree::dict({{"ids", tokens}, {"paddings", zeros({2, 8})}}));
                          })
                   .output["logits"]
                   .leaf();
  std::vector<int> want = argmax(full, -1).to_vector<int>();
  for (int b = 0; b < 2; ++b) {
    const int prefix = b == 0 ? 3 : 1;
    for (int i = prefix; i < 8; ++i) EXPECT_EQ(t[size_t(b * 8 + i)], want[size_t(b * 8 + i - 1)]) << b << " " << i;
  }
  EXPECT_EQ(out["decode_lengths"].leaf().to_vector<int>(), (std::vector<int>{8, 8}));
  // EOS: stop the first example at the token it produces at position 4.
  cfg.set("eos_id", std::to_string(t[4]));
  auto with_eos = build<LanguageModel>(cfg);
  Tree out2 = apply_with(
                  *with_eos, vars, [&](const LanguageModel& m) { return m.decode(batch); }, decoding)
                  .output;
  std::vector<int> t2 = out2["output_ids"].leaf().to_vector<int>();
  int stop = 3;  // the first generated position holding the EOS token
  while (t[size_t(stop)] != t[4]) ++stop;
  EXPECT_EQ(out2["decode_lengths"].leaf().to_vector<int>()[0], stop + 1);
  for (int i = 0; i <= stop; ++i) EXPECT_EQ(t2[size_t(i)], t[size_t(i)]);
  for (int i = stop + 1; i < 8; ++i) EXPECT_EQ(t2[size_t(i)], 0);
}

TEST(LanguageModel, SamplingIsKeyedAndTopOneIsGreedy) {
  Config cfg = tiny_lm();
  cfg.set("max_decode_length", "6");
  cfg.set("eos_id", "-1");
  auto greedy = build<LanguageModel>(cfg);
  Tree vars = random_vars(*greedy, 5, 1.0);
  Tree batch = Tree::dict({{"prefix", array<int32_t>({4}, {1, 1})}});
  auto run = [&](const LanguageModel& m, uint64_t seed) {
    ApplyOptions o{.rngs = {{"decode", random::key(int64_t(seed))}}, .mutable_collections = {"decoder_cache"}};
    return apply_with(
               m, vars, [&](const LanguageModel& l) { return l.decode(batch); }, o)
        .output["output_ids"]
        .leaf();
  };
  cfg.set("sampling", "top_k");
  cfg.set("top_k", "1");
  auto top1 = build<LanguageModel>(cfg);
  EXPECT_TRUE(all_close(run(*top1, 1), run(*greedy, 1), 0, 0));
  cfg.set("sampling", "temperature");
  cfg.set("temperature", "5");
  auto hot = build<LanguageModel>(cfg);
  EXPECT_TRUE(all_close(run(*hot, 7), run(*hot, 7), 0, 0));
  bool differs = false;
  for (uint64_t s = 8; s < 14 && !differs; ++s) differs = !all_close(run(*hot, s), run(*hot, 7), 0, 0);
  EXPECT_TRUE(differs);
  EXPECT_PAX_ERROR(apply_with(*hot, vars, [&](const LanguageModel& l) { return l.decode(batch); },
                              {.mutable_collections = {"decoder_cache"}}),
                   "needs a random key for stream 'decode'");
  cfg.set("temperature", "0");
  EXPECT_PAX_ERROR(build<LanguageModel>(cfg), "temperature must be > 0");
}

TEST(LanguageModel, RepeatStackFlopsAndJsonRoundTrip) {
  Config cfg = tiny_lm(13, 8, 1);
  cfg.set("lm_tpl.stacked_transformer_tpl", "Repeat");
  cfg.set("lm_tpl.stacked_transformer_tpl.x_times", "3");
  cfg.set("lm_tpl.stacked_transformer_tpl.sub_tpl", "StackedTransformer");
  cfg.set("lm_tpl.stacked_transformer_tpl.sub_tpl.num_layers", "1");
  cfg.set("lm_tpl.stacked_transformer_tpl.sub_tpl.hidden_dims", "16");
  cfg.set("lm_tpl.stacked_transformer_tpl.sub_tpl.num_heads", "2");
  auto model = build<LanguageModel>(cfg);
  EXPECT_EQ(model->lm().num_layers(), 3);
  {
    // A Repeat of a Repeat counts every block (the FLOPs and MFU use it).
    Config nested = tiny_lm(13, 8, 1);
    nested.set("lm_tpl.stacked_transformer_tpl", "Repeat");
    nested.set("lm_tpl.stacked_transformer_tpl.x_times", "2");
    nested.set("lm_tpl.stacked_transformer_tpl.sub_tpl", "Repeat");
    nested.set("lm_tpl.stacked_transformer_tpl.sub_tpl.x_times", "3");
    nested.set("lm_tpl.stacked_transformer_tpl.sub_tpl.sub_tpl", "StackedTransformer");
    nested.set("lm_tpl.stacked_transformer_tpl.sub_tpl.sub_tpl.num_layers", "2");
    nested.set("lm_tpl.stacked_transformer_tpl.sub_tpl.sub_tpl.hidden_dims", "16");
    nested.set("lm_tpl.stacked_transformer_tpl.sub_tpl.sub_tpl.num_heads", "2");
    auto deep = build<LanguageModel>(nested);
    EXPECT_EQ(deep->lm().num_layers(), 12);
    EXPECT_EQ(deep->lm().attention_dims(), model->lm().attention_dims());
  }
  Tree vars = random_vars(*model, 6);
  Tree batch = lm_batch(array<int32_t>({1, 2, 3, 4}, {1, 4}), array<int32_t>({2, 3, 4, 5}, {1, 4}), zeros({1, 4}));
  auto loss = [&](const LanguageModel& m, const Tree& v) {
    return metric_value(apply_with(m, v, [&](const LanguageModel& l) { return l.fprop_batch(batch); }).output.first,
                        "total_loss");
  };
  auto rebuilt = build<LanguageModel>(Config::from_json(cfg.to_json()));
  EXPECT_TRUE(all_close(loss(*rebuilt, vars), loss(*model, vars), 0, 0));
  // 6 N + 6 L H T per token (the causal half of PaLM's attention term).
  const double n = double(count_parameters(*model));
  EXPECT_DOUBLE_EQ(model->flops_per_token(4), 6 * n + 6 * 3 * 8 * 4);
  EXPECT_DOUBLE_EQ(model->flops_per_example(batch), 4 * (6 * n + 6 * 3 * 8 * 4));
  // Training end to end: a few SGD steps under jit reduce the loss.
  auto step = jit([&](const Tree& v) {
    Tree g = grad([&](const Tree& w) { return loss(*model, w); })(v);
    return tree_map([](const Array& p, const Array& d) { return p - 0.5 * d; }, v, g);
  });
  Tree trained = vars;
  for (int i = 0; i < 5; ++i) trained = step(trained);
  EXPECT_LT(loss(*model, trained).item<float>(), loss(*model, vars).item<float>());
  EXPECT_PAX_ERROR(
      apply_with(*model, vars,
                 [&](const LanguageModel& l) {
                   return l.compute_loss(l.compute_predictions(batch), Tree::dict({{"ids", batch["ids"]}}));
                 }),
      "the batch has no 'labels'");
}

}  // namespace
}  // namespace pax::nn
