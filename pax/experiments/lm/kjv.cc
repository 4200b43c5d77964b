// Language models on the King James Bible (prepared from Debian's
// bible-kjv-text on first use): lm.KjvTransformer, the main job — a small
// decoder that shows a falling loss and readable samples within minutes on
// two cores — and lm.KjvTransformerTiny, a byte-level one for tests.
#include "pax/data/prompts.h"
#include "pax/data/text_lm.h"
#include "pax/experiments/adam_rampup.h"
#include "pax/experiments/experiment.h"
#include "pax/experiments/lm/transformer_lm_config.h"
#include "pax/nn/models/language_model.h"

namespace pax::experiments {
namespace {

struct KjvSettings {
  std::string tokenizer;
  int64_t seq_length, batch_size;
  double validation_fraction;  // of the verses, held out and read whole by every evaluation
  int64_t model_dims, num_layers, num_heads, vocab_size;
  double learning_rate;
  int64_t warmup_steps, num_train_steps;
  int64_t save_interval, summary_interval, eval_interval;
  int64_t max_decode_length;
};

std::shared_ptr<data::TextLmInput::HParams> kjv_input(const KjvSettings& k, const std::string& name,
                                                      data::TextSplit split) {
  auto p = std::make_shared<data::TextLmInput::HParams>();
  p->name = name;
  p->source = data::TextSource::kjv;
  p->tokenizer = k.tokenizer;
  p->seq_length = k.seq_length;
  p->batch_size = k.batch_size;
  p->split = split;
  p->document_unit = data::DocumentUnit::line;  // one verse per document
  p->validation_fraction = k.validation_fraction;
  if (split == data::TextSplit::train) {
    p->shuffle = true;
    p->repeat = true;
  } else {
    // Every evaluation reads the held-out verses once (Pax's one epoch per run).
    p->repeat = false;
    p->reset_for_eval = true;
  }
  return p;
}

Task kjv_task(const KjvSettings& k) {
  TransformerLmShape shape;
  shape.vocab_size = k.vocab_size;
  shape.model_dims = k.model_dims;
  shape.num_layers = k.num_layers;
  shape.num_heads = k.num_heads;
  shape.max_decode_length = k.max_decode_length;
  Task t;
  auto model = std::static_pointer_cast<nn::LanguageModel::HParams>(transformer_lm_model(shape));
  // Greedy decoding of a small model loops on its likeliest phrase; top-k
  // sampling at a lower temperature reads better.
  model->sampling = nn::Sampling::top_k;
  model->top_k = 20;
  model->temperature = 0.8;
  t.model = model;
  auto adam = adam_with_rampup(k.learning_rate, k.warmup_steps, k.num_train_steps, 0.1);
  adam->options.b2 = 0.99;
  adam->weight_decay = 0.01;
  t.learner->optimizer = adam;
  t.learner->clip_gradient_norm_to_value = 1.0;
  t.train->num_train_steps = k.num_train_steps;
  t.train->save_interval_steps = k.save_interval;
  t.train->summary_interval_steps = k.summary_interval;
  t.train->eval_interval_steps = k.eval_interval;
  t.train->decode_interval_steps = k.num_train_steps;
  return t;
}

Datasets kjv_datasets(const KjvSettings& k) {
  Datasets d;
  d.train = kjv_input(k, "train", data::TextSplit::train);
  d.eval = {kjv_input(k, "validation", data::TextSplit::validation)};
  auto prompts = std::make_shared<data::PromptInput::HParams>();
  prompts->name = "samples";
  prompts->tokenizer = k.tokenizer;
  prompts->batch_size = 4;
  prompts->prompts = {"In the beginning", "And God said",       "The LORD is my shepherd",
                      "Blessed are the",  "And Jesus answered", "For God so loved"};
  d.decode = {prompts};
  return d;
}

// The main job: about 5M parameters (4 layers, d = 256, a 4096-piece
// SentencePiece vocabulary), 128-token rows of packed verses.
const KjvSettings kKjv = {.tokenizer = "kjv_spm:4096",
                          .seq_length = 128,
                          .batch_size = 16,
                          .validation_fraction = 0.02,
                          .model_dims = 256,
                          .num_layers = 4,
                          .num_heads = 4,
                          .vocab_size = 4096,
                          .learning_rate = 2e-3,
                          .warmup_steps = 50,
                          .num_train_steps = 600,
                          .save_interval = 200,
                          .summary_interval = 25,
                          .eval_interval = 200,
                          .max_decode_length = 40};

// Seconds, not minutes: byte-level, 2 layers of d = 64.
const KjvSettings kKjvTiny = {.tokenizer = "bytes",
                              .seq_length = 64,
                              .batch_size = 8,
                              .validation_fraction = 0.002,
                              .model_dims = 64,
                              .num_layers = 2,
                              .num_heads = 2,
                              .vocab_size = 259,
                              .learning_rate = 3e-3,
                              .warmup_steps = 10,
                              .num_train_steps = 60,
                              .save_interval = 20,
                              .summary_interval = 10,
                              .eval_interval = 30,
                              .max_decode_length = 32};

class KjvTransformer : public BaseExperiment {
 public:
  Task task() const override { return kjv_task(kKjv); }
  Datasets datasets() const override { return kjv_datasets(kKjv); }
  std::string description() const override {
    return "4-layer d=256 decoder LM on the King James Bible (SentencePiece 4096); the main job";
  }
};

class KjvTransformerTiny : public BaseExperiment {
 public:
  Task task() const override { return kjv_task(kKjvTiny); }
  Datasets datasets() const override { return kjv_datasets(kKjvTiny); }
  std::string description() const override { return "2-layer d=64 byte-level LM on the KJV, for tests (seconds)"; }
};

}  // namespace

PAX_REGISTER_EXPERIMENT("lm.KjvTransformer", KjvTransformer);
PAX_REGISTER_EXPERIMENT("lm.KjvTransformerTiny", KjvTransformerTiny);

}  // namespace pax::experiments
