// Ports of the paxml configs the Pax README runs (tasks/lm/params/lm_cloud.py,
// c4.py and c4_multislice.py): the same layer counts, dims, heads,
// vocabulary, sequence length, per-device batch, learning-rate schedule and
// mesh shapes, on SyntheticInput instead of C4 (which needs the network).
// As in paxml, the batch is PERCORE_BATCH_SIZE per device: the global batch
// is that x the mesh's devices (ICI x DCN), and each input's batch_size is
// the rows one data shard (a process of the replica and data axes) reads of
// it (percore_batch in experiment.h); `--mode=inspect` prints both.
// Registered as lm.<class> with paxml's module path as an alias
// (--exp=tasks.lm.params.c4.C4Spmd1BAdam4Replicas). Where paxml sets
// USE_REPEATED_LAYER the blocks are a Repeat with remat (SAVE_NOTHING:
// nothing_saveable). They are meant for `paxcc --mode=inspect` (parameter
// counts, FLOPs, the mesh and the memory per process, without allocating a
// weight) and train when scaled down with --set, the mesh included, e.g.
//   paxcc --exp=lm.C4Spmd1BAdam4Replicas --set train.ici_mesh_shape=[1,1,1]
//         --set model.lm_tpl.stacked_transformer_tpl.x_times=2 ...
// Every mesh axis runs: replica (data parallel), data (fully sharded), mdl
// (tensor parallel) and, for the pipelined config, stage.
#include "pax/data/synthetic.h"
#include "pax/experiments/adam_rampup.h"
#include "pax/experiments/experiment.h"
#include "pax/experiments/lm/transformer_lm_config.h"

namespace pax::experiments {
namespace {

struct SeedConfig {
  TransformerLmShape shape;
  int64_t seq_length;
  double percore_batch_size;  // paxml's PERCORE_BATCH_SIZE: rows per device (a fraction allowed)
  // Adam
  double learning_rate, beta1, beta2, epsilon, weight_decay, clip_gradient_norm;
  // Linear rampup then exponential (or cosine) decay to max * min_ratio.
  bool cosine_decay;
  int64_t warmup_steps, decay_end;
  int64_t checkpoint_every, summary_every, eval_every;
  std::vector<int64_t> ici_mesh = {}, dcn_mesh = {};  // paxml's ICI_MESH_SHAPE, DCN_MESH_SHAPE
  int64_t num_train_steps = 0;                        // 0: decay_end
  int64_t save_max_to_keep = 10;
};

Task seed_task(const SeedConfig& c) {
  Task t;
  t.model = transformer_lm_model(c.shape);
  auto adam = adam_with_rampup(c.learning_rate, c.warmup_steps, c.decay_end, 0.1,
                               c.cosine_decay ? RampupDecay::cosine : RampupDecay::exponential);
  adam->options.b1 = c.beta1;
  adam->options.b2 = c.beta2;
  adam->options.eps = c.epsilon;
  adam->weight_decay = c.weight_decay;
  t.learner->optimizer = adam;
  t.learner->clip_gradient_norm_to_value = c.clip_gradient_norm;
  t.train->num_train_steps = c.num_train_steps > 0 ? c.num_train_steps : c.decay_end;
  t.train->save_interval_steps = c.checkpoint_every;
  t.train->save_max_to_keep = c.save_max_to_keep;
  t.train->ici_mesh_shape = c.ici_mesh;
  t.train->dcn_mesh_shape = c.dcn_mesh;
  t.train->summary_interval_steps = c.summary_every;
  t.train->eval_interval_steps = c.eval_every;
  return t;
}

Datasets seed_datasets(const SeedConfig& c) {
  TrainSettings mesh;
  mesh.ici_mesh_shape = c.ici_mesh;
  mesh.dcn_mesh_shape = c.dcn_mesh;
  // Train and eval alike, as paxml's datasets without PERCORE_EVAL_BATCH_SIZE.
  const int64_t batch_size = percore_batch(c.percore_batch_size, mesh).per_shard;
  auto input = [&](const std::string& name) {
    auto p = std::make_shared<data::SyntheticInput::HParams>();
    p->name = name;
    p->task = data::SyntheticTask::lm;
    p->seq_length = c.seq_length;
    p->vocab_size = c.shape.vocab_size;
    p->batch_size = batch_size;
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
// tied embedding, softmax cap 30, attention-logit cap 50, bf16 compute,
// repeated layers (USE_REPEATED_LAYER, SAVE_NOTHING).
TransformerLmShape spmd_shape(int64_t vocab, int64_t dims, int64_t layers, int64_t heads) {
  TransformerLmShape s;
  s.vocab_size = vocab, s.model_dims = dims, s.num_layers = layers, s.num_heads = heads;
  s.hidden_dims = 4 * dims, s.dim_per_head = 128;
  s.activation = "GELU";
  s.soft_cap_logits = 30.0, s.atten_logit_cap = 50.0;
  s.fprop_dtype = DType::bf16;
  s.repeated_layers = true;
  return s;
}

// lm_cloud.LmCloudSpmd2B: 18 x 3072, 24 heads, 8 per core x 4 chips (ICI [1, 4, 1]).
SeedConfig lm_cloud_2b() {
  // clang-format off
  return {.shape = spmd_shape(32000, 3072, 18, 24), .seq_length = 1024, .percore_batch_size = 8,
          .learning_rate = 2.5e-4, .beta1 = 0.9, .beta2 = 0.99, .epsilon = 1e-6, .weight_decay = 1e-3,
          .clip_gradient_norm = 5.0, .cosine_decay = false, .warmup_steps = 4000, .decay_end = 300000,
          .checkpoint_every = 5000, .summary_every = 100, .eval_every = 100, .ici_mesh = {1, 4, 1}};
  // clang-format on
}

// lm_cloud.LmCloudSpmd2BLimitSteps: LmCloudSpmd2B for 300 steps (the
// schedule unchanged), the Pax README's pjit example.
SeedConfig lm_cloud_2b_limit_steps() {
  SeedConfig c = lm_cloud_2b();
  c.num_train_steps = 300;
  return c;
}

// lm_cloud.LmCloudTransformerAdamLimitSteps, the README's pmap example
// (model_params.TransformerLmPmapAdam): 10 x 1024, 16 heads of 64, ReLU, no
// attention biases, attention-logit cap 50, f32; 16 per core x 4 chips;
// set_default_adam (lr 1e-3, weight decay 1e-3, clip 5, rampup 4000 then
// exponential decay to step 300000); 2000 steps. pmap has no mesh: the
// global batch is 16 x the processes of the run.
SeedConfig lm_cloud_transformer_adam_limit_steps() {
  TransformerLmShape s;
  s.vocab_size = 32000, s.model_dims = 1024, s.num_layers = 10, s.num_heads = 16, s.hidden_dims = 4096;
  s.atten_logit_cap = 50.0;
  s.attention_bias = false;
  // clang-format off
  return {.shape = s, .seq_length = 1024, .percore_batch_size = 16, .learning_rate = 1e-3, .beta1 = 0.9,
          .beta2 = 0.99, .epsilon = 1e-6, .weight_decay = 1e-3, .clip_gradient_norm = 5.0, .cosine_decay = false,
          .warmup_steps = 4000, .decay_end = 300000, .checkpoint_every = 5000, .summary_every = 100,
          .eval_every = 100, .num_train_steps = 2000};
  // clang-format on
}

// c4.C4Spmd1BAdam4Replicas: 13 x 2560, 20 heads, 32 per core x 4 chips (ICI [1, 4, 1]).
SeedConfig c4_1b() {
  // clang-format off
  return {.shape = spmd_shape(32000, 2560, 13, 20), .seq_length = 1024, .percore_batch_size = 32,
          .learning_rate = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .epsilon = 1e-6, .weight_decay = 1e-3,
          .clip_gradient_norm = 5.0, .cosine_decay = false, .warmup_steps = 4000, .decay_end = 300000,
          .checkpoint_every = 1000, .summary_every = 10, .eval_every = 100, .ici_mesh = {1, 4, 1}};
  // clang-format on
}

// c4.C4Spmd16BAdam32Replicas: 36 x 6144, 48 heads, 16 per core x 32 chips
// (ICI [1, 16, 2]: 2-way tensor parallel): a global batch of 512, 32 rows
// per data shard, each shard's 2 mdl processes reading the same rows.
SeedConfig c4_16b() {
  SeedConfig c = c4_1b();
  c.shape = spmd_shape(32000, 6144, 36, 48);
  c.percore_batch_size = 16;
  c.ici_mesh = {1, 16, 2};
  return c;
}

// c4_multislice.C4Spmd22BAdam2xv4_128 (the seed's MaxText table): 48 x 6144,
// hidden 24576, 24 heads of 256, vocabulary 32768, bf16, repeated layers,
// 16 per core over 2 slices of 64 chips (ICI [1, 64, 1], DCN [2, 1, 1]).
SeedConfig c4_22b_2x_v4_128() {
  SeedConfig c = c4_1b();
  c.shape = spmd_shape(32768, 6144, 48, 24);
  c.shape.hidden_dims = 24576, c.shape.dim_per_head = 256;
  c.percore_batch_size = 16;
  c.ici_mesh = {1, 64, 1};
  c.dcn_mesh = {2, 1, 1};
  return c;
}

// c4.C4SpmdGpt3AdamOrgHP: GPT-3 175B with the paper's hyperparameters —
// 96 x 12288, 96 heads, vocabulary 50257, 2048 tokens, learnt position
// embeddings, f32, Adam(0.9, 0.95, 1e-8), weight decay 0.1, clip 1, learning
// rate 6e-5 with 265 warmup steps and cosine decay to step 108600; 2 per
// core x 768 chips (C4SpmdGpt3Adam's ICI [1, 64, 12]): a global batch of 1536.
SeedConfig c4_gpt3() {
  TransformerLmShape s = spmd_shape(50257, 12288, 96, 96);
  s.soft_cap_logits = 30.0, s.atten_logit_cap = 0.0;
  s.trainable_position_emb_length = 16384;
  s.fprop_dtype = DType::f32;
  // clang-format off
  return {.shape = s, .seq_length = 2048, .percore_batch_size = 2, .learning_rate = 6e-5, .beta1 = 0.9,
          .beta2 = 0.95, .epsilon = 1e-8, .weight_decay = 0.1, .clip_gradient_norm = 1.0, .cosine_decay = true,
          .warmup_steps = 265, .decay_end = 108600, .checkpoint_every = 100, .summary_every = 10,
          .eval_every = 100, .ici_mesh = {1, 64, 12}};
  // clang-format on
}

// c4.C4SpmdPipelineGpt3SmallAdam64Replicas, the README's "GPT-3 XL" on
// v4-128 (its docstring says 1.3B parameters; its dims make 2.9B):
// C4SpmdPipelineGpt3AdamOrgHP's GPT-3 settings with 24 x 3072, 24 heads of
// 128, bf16, learning rate 2e-4, 8 per core x 64 chips, ICI
// [4, 1, 4, 4] ([stage, replica, data, mdl]: 4 stages, microbatches of 16).
// Its layers are a pipelined Repeat (nn/pipeline.h): each stage holds 6 of
// the 24 blocks, split over mdl by heads and widths and over data by fsdp,
// and runs the 128 rows of its data shard as 8 microbatches of 16.
SeedConfig c4_pipeline_gpt3_small_64() {
  SeedConfig c = c4_gpt3();
  c.shape.num_layers = 24, c.shape.model_dims = 3072, c.shape.num_heads = 24;
  c.shape.hidden_dims = 4 * 3072, c.shape.dim_per_head = 128;
  c.shape.fprop_dtype = DType::bf16;
  c.shape.pipeline_microbatch_size = 16;
  c.learning_rate = 2e-4;
  c.percore_batch_size = 8;
  c.ici_mesh = {4, 1, 4, 4};
  c.save_max_to_keep = 1000, c.eval_every = 100, c.summary_every = 1, c.checkpoint_every = 200;
  return c;
}

}  // namespace

// Registered like PAX_REGISTER_EXPERIMENT, one instance per config, with
// paxml's module path as an alias.
static const bool seed_configs_registered = [] {
  auto add = [](const std::string& paxml_name, SeedConfig (*config)(), const std::string& description) {
    const std::string cls = paxml_name.substr(paxml_name.rfind('.') + 1);
    const std::string name = "lm." + cls;
    register_experiment(name, [=] { return std::make_unique<SeedExperiment>(config(), description); });
    register_experiment_alias(paxml_name, name);
  };
  add("tasks.lm.params.lm_cloud.LmCloudSpmd2B", lm_cloud_2b, "paxml LmCloudSpmd2B (2B parameters) on synthetic data");
  add("tasks.lm.params.lm_cloud.LmCloudSpmd2BLimitSteps", lm_cloud_2b_limit_steps,
      "paxml LmCloudSpmd2BLimitSteps (LmCloudSpmd2B for 300 steps) on synthetic data");
  add("tasks.lm.params.lm_cloud.LmCloudTransformerAdamLimitSteps", lm_cloud_transformer_adam_limit_steps,
      "paxml LmCloudTransformerAdamLimitSteps (10 layers x 1024, 2000 steps) on synthetic data");
  add("tasks.lm.params.c4.C4Spmd1BAdam4Replicas", c4_1b,
      "paxml C4Spmd1BAdam4Replicas (1B parameters) on synthetic data");
  add("tasks.lm.params.c4.C4Spmd16BAdam32Replicas", c4_16b,
      "paxml C4Spmd16BAdam32Replicas (16B parameters) on synthetic data");
  add("tasks.lm.params.c4.C4SpmdGpt3AdamOrgHP", c4_gpt3, "paxml C4SpmdGpt3AdamOrgHP (GPT-3 175B) on synthetic data");
  add("tasks.lm.params.c4.C4SpmdPipelineGpt3SmallAdam64Replicas", c4_pipeline_gpt3_small_64,
      "paxml C4SpmdPipelineGpt3SmallAdam64Replicas (24 x 3072, 2.9B; 4 pipeline stages) on synthetic data");
  add("tasks.lm.params.c4_multislice.C4Spmd22BAdam2xv4_128", c4_22b_2x_v4_128,
      "paxml C4Spmd22BAdam2xv4_128 (22B parameters, 2 slices) on synthetic data");
  return true;
}();

}  // namespace pax::experiments
