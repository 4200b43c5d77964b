// Ports of the paxml configs the Pax README runs (tasks/lm/params/lm_cloud.py
// and c4.py): the same layer counts, dims, heads, vocabulary, sequence
// length, global batch and learning-rate schedule, on SyntheticInput instead
// of C4 (which needs the network). They are meant for `paxcc --mode=inspect`
// (parameter counts and FLOPs without allocating a weight) and train when
// scaled down with --set, e.g.
//   paxcc --exp=lm.C4Spmd1BAdam4Replicas --set model.lm_tpl.stacked_transformer_tpl.num_layers=2 ...
// What has no counterpart here: SPMD meshes (the whole global batch goes to
// one host), rematerialisation policies, repeated layers.
#include "pax/data/synthetic.h"
#include "pax/experiments/adam_rampup.h"
#include "pax/experiments/experiment.h"
#include "pax/experiments/lm/transformer_lm_config.h"

namespace pax::experiments {
namespace {

struct SeedConfig {
  TransformerLmShape shape;
  int64_t seq_length, global_batch;
  // Adam
  double learning_rate, beta1, beta2, epsilon, weight_decay, clip_gradient_norm;
  // Linear rampup then exponential (or cosine) decay to max * min_ratio.
  bool cosine_decay;
  int64_t warmup_steps, decay_end;
  int64_t checkpoint_every, summary_every, eval_every;
};

Task seed_task(const SeedConfig& c) {
  Task t;
  t.model = transformer_lm_model(c.shape);
  auto adam = adam_with_rampup(c.learning_rate, c.warmup_steps, c.decay_end, 0.1,
                               c.cosine_decay ? RampupDecay::cosine : RampupDecay::exponential);
  adam->beta1 = c.beta1;
  adam->beta2 = c.beta2;
  adam->epsilon = c.epsilon;
  adam->weight_decay = c.weight_decay;
  t.learner->optimizer = adam;
  t.learner->clip_gradient_norm_to_value = c.clip_gradient_norm;
  t.train->num_train_steps = c.decay_end;
  t.train->save_interval_steps = c.checkpoint_every;
  t.train->save_max_to_keep = 10;
  t.train->summary_interval_steps = c.summary_every;
  t.train->eval_interval_steps = c.eval_every;
  return t;
}

Datasets seed_datasets(const SeedConfig& c) {
  auto input = [&](const std::string& name) {
    auto p = std::make_shared<data::SyntheticInput::HParams>();
    p->name = name;
    p->task = data::SyntheticTask::lm;
    p->seq_length = c.seq_length;
    p->vocab_size = c.shape.vocab_size;
    p->batch_size = c.global_batch;
    if (name != "train") {
      p->input_random_seed = 4321;
      p->num_batches = 1;
      p->repeat = false;
      p->reset_for_eval = true;
    }
    return p;
  };
  Datasets d;
  d.train = input("train");
  d.eval = {input("validation")};
  return d;
}

class SeedExperiment : public BaseExperiment {
 public:
  SeedExperiment(SeedConfig config, std::string description)
      : config_(std::move(config)), description_(std::move(description)) {}
  Task task() const override { return seed_task(config_); }
  Datasets datasets() const override { return seed_datasets(config_); }
  std::string description() const override { return description_; }

 private:
  SeedConfig config_;
  std::string description_;
};

// Shared by the lm_cloud and C4 Adam configs: GELU, pre-LN, combined QKV,
// tied embedding, softmax cap 30, attention-logit cap 50, bf16 compute.
TransformerLmShape spmd_shape(int64_t vocab, int64_t dims, int64_t layers, int64_t heads) {
  TransformerLmShape s;
  s.vocab_size = vocab, s.model_dims = dims, s.num_layers = layers, s.num_heads = heads;
  s.hidden_dims = 4 * dims, s.dim_per_head = 128;
  s.activation = "GELU";
  s.soft_cap_logits = 30.0, s.atten_logit_cap = 50.0;
  s.fprop_dtype = DType::bf16;
  return s;
}

// lm_cloud.LmCloudSpmd2B: 18 x 3072, 24 heads, 8 per core x 4 chips.
SeedConfig lm_cloud_2b() {
  // clang-format off
  return {.shape = spmd_shape(32000, 3072, 18, 24), .seq_length = 1024, .global_batch = 32,
          .learning_rate = 2.5e-4, .beta1 = 0.9, .beta2 = 0.99, .epsilon = 1e-6, .weight_decay = 1e-3,
          .clip_gradient_norm = 5.0, .cosine_decay = false, .warmup_steps = 4000, .decay_end = 300000,
          .checkpoint_every = 5000, .summary_every = 100, .eval_every = 100};
  // clang-format on
}

// c4.C4Spmd1BAdam4Replicas: 13 x 2560, 20 heads, 32 per core x 4 chips.
SeedConfig c4_1b() {
  // clang-format off
  return {.shape = spmd_shape(32000, 2560, 13, 20), .seq_length = 1024, .global_batch = 128,
          .learning_rate = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .epsilon = 1e-6, .weight_decay = 1e-3,
          .clip_gradient_norm = 5.0, .cosine_decay = false, .warmup_steps = 4000, .decay_end = 300000,
          .checkpoint_every = 1000, .summary_every = 10, .eval_every = 100};
  // clang-format on
}

// c4.C4Spmd16BAdam32Replicas: 36 x 6144, 48 heads, 16 per core x 32 chips.
SeedConfig c4_16b() {
  SeedConfig c = c4_1b();
  c.shape = spmd_shape(32000, 6144, 36, 48);
  c.global_batch = 512;
  return c;
}

// c4.C4SpmdGpt3AdamOrgHP: GPT-3 175B with the paper's hyperparameters —
// 96 x 12288, 96 heads, vocabulary 50257, 2048 tokens, batch 1536, learnt
// position embeddings, f32, Adam(0.9, 0.95, 1e-8), weight decay 0.1, clip 1,
// learning rate 6e-5 with 265 warmup steps and cosine decay to step 108600.
SeedConfig c4_gpt3() {
  TransformerLmShape s = spmd_shape(50257, 12288, 96, 96);
  s.soft_cap_logits = 30.0, s.atten_logit_cap = 0.0;
  s.trainable_position_emb_length = 16384;
  s.fprop_dtype = DType::f32;
  // clang-format off
  return {.shape = s, .seq_length = 2048, .global_batch = 1536, .learning_rate = 6e-5, .beta1 = 0.9,
          .beta2 = 0.95, .epsilon = 1e-8, .weight_decay = 0.1, .clip_gradient_norm = 1.0, .cosine_decay = true,
          .warmup_steps = 265, .decay_end = 108600, .checkpoint_every = 100, .summary_every = 10,
          .eval_every = 100};
  // clang-format on
}

}  // namespace

// Registered like PAX_REGISTER_EXPERIMENT, one instance per config.
static const bool seed_configs_registered = [] {
  auto add = [](const char* name, SeedConfig (*config)(), const char* description) {
    register_experiment(name, [=] { return std::make_unique<SeedExperiment>(config(), description); });
  };
  add("lm.LmCloudSpmd2B", lm_cloud_2b, "paxml lm_cloud.LmCloudSpmd2B (2B parameters) on synthetic data");
  add("lm.C4Spmd1BAdam4Replicas", c4_1b, "paxml c4.C4Spmd1BAdam4Replicas (1B parameters) on synthetic data");
  add("lm.C4Spmd16BAdam32Replicas", c4_16b, "paxml c4.C4Spmd16BAdam32Replicas (16B parameters) on synthetic data");
  add("lm.C4SpmdGpt3AdamOrgHP", c4_gpt3, "paxml c4.C4SpmdGpt3AdamOrgHP (GPT-3 175B) on synthetic data");
  return true;
}();

}  // namespace pax::experiments
