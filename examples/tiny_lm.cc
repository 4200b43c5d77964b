// A byte-level Transformer language model in the Praxis style: configured
// through a Config tree (dotted-path overrides, as on the paxcc command
// line), built from registered layers, initialised and applied purely, trained
// with a jitted SGD step, and sampled greedily through the KV cache.
#include <cstdio>
#include <string>
#include <vector>

#include "pax/pax.h"

using namespace pax;

int main() {
  const std::string text = "in the beginning was the word, and the word was pure. ";
  const int64_t seq = int64_t(text.size()) - 1;

  // The model's configuration: defaults of every field, edited by path.
  Config cfg = Config::make("LanguageModel");
  cfg.apply_overrides({
      "lm_tpl.vocab_size=256",
      "lm_tpl.model_dims=64",
      "lm_tpl.stacked_transformer_tpl.num_layers=2",
      "lm_tpl.stacked_transformer_tpl.num_heads=4",
      "lm_tpl.stacked_transformer_tpl.hidden_dims=256",
      "max_decode_length=60",
      "eos_id=-1",
  });
  auto model = nn::build<nn::LanguageModel>(cfg);
  std::printf("%s\n", nn::summary(*model).c_str());

  // One training batch: predict every next byte of the text.
  std::vector<int32_t> bytes(text.begin(), text.end());
  Array ids = array<int32_t>(std::vector<int32_t>(bytes.begin(), bytes.end() - 1), {1, seq});  // (1, T)
  Array labels = array<int32_t>(std::vector<int32_t>(bytes.begin() + 1, bytes.end()), {1, seq});
  Tree batch = Tree::dict({{"ids", ids}, {"labels", labels}, {"paddings", zeros({1, seq})}});

  Tree variables = nn::init(*model, random::key(0));
  auto loss_fn = [&](const Tree& params, const Tree& b) {
    Tree vars = Tree::dict({{"params", params}});
    auto out = nn::apply_with(*model, vars, [&](const nn::LanguageModel& m) { return m.fprop_batch(b).first; });
    return nn::metric_value(out.output, "total_loss");
  };
  const float learning_rate = 0.05f;
  auto train_step = jit([&](const Tree& params, const Tree& b) {
    auto [loss, grads] = value_and_grad(loss_fn)(params, b);
    Tree updated = tree_map([&](const Array& p, const Array& g) { return p - learning_rate * g; }, params, grads);
    return std::make_pair(updated, loss);
  });

  Tree params = variables["params"];
  for (int step = 0; step <= 150; ++step) {
    auto [updated, loss] = train_step(params, batch);
    params = updated;
    if (step % 25 == 0) std::printf("step %3d  loss %.4f\n", step, loss.item<float>());
  }

  // Greedy continuation of a two-byte prefix through the KV cache.
  Tree prompt =
      Tree::dict({{"prefix", array<int32_t>({'i', 'n'}, {1, 2})}, {"prefix_lengths", array<int32_t>({2}, {1})}});
  Tree decoded = nn::apply_with(*model, Tree::dict({{"params", params}}),
                                [&](const nn::LanguageModel& m) { return m.decode(prompt); },
                                {.mutable_collections = {"decoder_cache"}})
                     .output;
  std::string sample;
  for (int32_t t : decoded["output_ids"].leaf().to_vector<int32_t>()) sample += t >= 32 && t < 127 ? char(t) : '?';
  std::printf("sample: \"%s\"\n", sample.c_str());
  return 0;
}
