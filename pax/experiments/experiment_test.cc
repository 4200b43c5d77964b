// The experiment registry and the shipped experiments: lookup with
// suggestions, every registered config resolves, validates and round-trips
// through JSON, overrides edit it, validate() names bad fields and unknown
// metric keys, and the seed ports' batch is Pax's per-device batch.
#include "pax/experiments/experiment.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "pax/data/base_input.h"
#include "pax/data/prompts.h"
#include "pax/experiments/runner.h"
#include "pax/nn/models/language_model.h"
#include "pax/testing/testing.h"

namespace pax::experiments {
namespace {

TEST(Experiments, RegistryListsTheShippedExperiments) {
  std::vector<std::string> names = registered_experiments();
  for (const char* name :
       {"lm.KjvTransformer", "lm.KjvTransformerTiny", "vision.FashionMnistMlp", "vision.FashionMnistCnn"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), name), names.end()) << name;
  }
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
}

TEST(Experiments, UnknownNameSuggestsCloseOnes) {
  try {
    make_experiment("lm.KjvTransfomer");
    FAIL() << "no error";
  } catch (const Error& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("unknown experiment 'lm.KjvTransfomer'"), std::string::npos) << msg;
    EXPECT_NE(msg.find("did you mean"), std::string::npos) << msg;
    EXPECT_NE(msg.find("lm.KjvTransformer"), std::string::npos) << msg;
  }
}

// paxml's module paths of the ported configs, as the seed passes them to
// --exp, and (as paxml's registry does) "paxml." + path and its dotted suffixes.
TEST(Experiments, PaxmlNamesAreAliases) {
  for (const auto& [alias, name] : std::vector<std::pair<std::string, std::string>>{
           {"tasks.lm.params.c4.C4Spmd1BAdam4Replicas", "lm.C4Spmd1BAdam4Replicas"},
           {"tasks.lm.params.c4.C4Spmd16BAdam32Replicas", "lm.C4Spmd16BAdam32Replicas"},
           {"tasks.lm.params.c4.C4SpmdGpt3AdamOrgHP", "lm.C4SpmdGpt3AdamOrgHP"},
           {"tasks.lm.params.c4.C4SpmdPipelineGpt3SmallAdam64Replicas", "lm.C4SpmdPipelineGpt3SmallAdam64Replicas"},
           {"tasks.lm.params.c4_multislice.C4Spmd22BAdam2xv4_128", "lm.C4Spmd22BAdam2xv4_128"},
           {"tasks.lm.params.lm_cloud.LmCloudSpmd2B", "lm.LmCloudSpmd2B"},
           {"tasks.lm.params.lm_cloud.LmCloudSpmd2BLimitSteps", "lm.LmCloudSpmd2BLimitSteps"},
           {"tasks.lm.params.lm_cloud.LmCloudTransformerAdamLimitSteps", "lm.LmCloudTransformerAdamLimitSteps"}}) {
    SCOPED_TRACE(alias);
    EXPECT_EQ(resolve_experiment_name(alias), name);
    EXPECT_EQ(resolve_experiment_name("paxml." + alias), name);
    EXPECT_EQ(resolve_experiment_name(alias.substr(alias.find("params.") + 7)), name);  // c4.C4Spmd...
    EXPECT_EQ(experiment_aliases(name), std::vector<std::string>{alias});
    EXPECT_EQ(make_experiment(alias)->config().to_json(), make_experiment(name)->config().to_json());
  }
  EXPECT_EQ(resolve_experiment_name("lm.KjvTransformer"), "lm.KjvTransformer");
  EXPECT_TRUE(experiment_aliases("vision.FashionMnistMlp").empty());
  // A suffix must be a whole dotted part: "params.c4" does not end "params.c4_multislice".
  EXPECT_PAX_ERROR(resolve_experiment_name("ams.c4.C4Spmd1BAdam4Replicas"), "unknown experiment");
  EXPECT_PAX_ERROR(register_experiment_alias("tasks.x.Y", "lm.NoSuchExperiment"), "which is not registered");
  EXPECT_PAX_ERROR(register_experiment_alias("lm.KjvTransformer", "lm.KjvTransformerTiny"), "already an experiment");
}

TEST(Experiments, UnknownPaxmlNameSuggestsTheCloseAlias) {
  EXPECT_PAX_ERROR(make_experiment("tasks.lm.params.c4.C4Spmd1BAdam4Replica"),
                   "unknown experiment 'tasks.lm.params.c4.C4Spmd1BAdam4Replica' (did you mean "
                   "'tasks.lm.params.c4.C4Spmd1BAdam4Replicas'");
}

TEST(Experiments, ASuffixSharedByTwoAliasesIsAmbiguous) {
  register_experiment_alias("tests.one.TwinName", "lm.KjvTransformerTiny");
  register_experiment_alias("tests.two.TwinName", "lm.KjvTransformer");
  EXPECT_EQ(resolve_experiment_name("one.TwinName"), "lm.KjvTransformerTiny");
  EXPECT_PAX_ERROR(resolve_experiment_name("TwinName"),
                   "'TwinName' is ambiguous: it ends 2 paxml names (tests.one.TwinName, tests.two.TwinName)");
}

TEST(Experiments, EveryConfigValidatesAndRoundTripsThroughJson) {
  for (const std::string& name : registered_experiments()) {
    SCOPED_TRACE(name);
    Config cfg = make_experiment(name)->config();
    EXPECT_STREQ(cfg.type_name(), "Experiment");
    validate(cfg.as<ExperimentConfig>());
    Config back = Config::from_json(cfg.to_json());
    EXPECT_EQ(back.to_json(), cfg.to_json());
    EXPECT_FALSE(make_experiment(name)->description().empty());
  }
}

TEST(Experiments, OverridesEditTheResolvedConfig) {
  Config cfg = make_experiment("lm.KjvTransformerTiny")->config();
  cfg.apply_overrides({"model.lm_tpl.model_dims=32", "train.num_train_steps=7", "train_input.batch_size=3",
                       "learner.optimizer.learning_rate=0.5"});
  const auto& exp = cfg.as<ExperimentConfig>();
  EXPECT_EQ(exp.train_settings().num_train_steps, 7);
  EXPECT_EQ(std::static_pointer_cast<data::BaseInput::HParams>(exp.train_input)->batch_size, 3);
  EXPECT_EQ(exp.learner_hparams().optimizer_hparams().learning_rate, 0.5);
  EXPECT_EQ(cfg.get("model.lm_tpl.model_dims"), "32");
  EXPECT_PAX_ERROR(cfg.apply_overrides({"train.num_train_step=7"}), "num_train_steps");
}

TEST(Experiments, ValidateNamesTheBadField) {
  auto check = [](const std::string& override_text, const std::string& expected) {
    Config cfg = make_experiment("lm.KjvTransformerTiny")->config();
    cfg.apply_overrides({override_text});
    EXPECT_PAX_ERROR(validate(cfg.as<ExperimentConfig>()), expected);
  };
  check("train.save_interval_steps=0", "train.save_interval_steps must be > 0");
  check("train.num_train_steps=-1", "train.num_train_steps must be >= 0");
  check("train.early_stopping_metric=log_pplx", "'<eval input name>/<metric>'");
  check("train.early_stopping_metric=test/log_pplx", "eval input 'test'");
  // Pax's eval table, cell by cell: the shipped config reads one epoch, N
  // with it is ignored with a warning, rolling runs need a repeating input,
  // and the last cell is refused.
  Config ignored_n = make_experiment("lm.KjvTransformerTiny")->config();
  ignored_n.apply_overrides({"eval_inputs[0].eval_loop_num_batches=4"});  // Pax ignores N here: a warning
  validate(ignored_n.as<ExperimentConfig>());
  const std::vector<std::string> warnings = config_warnings(ignored_n.as<ExperimentConfig>());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("eval_inputs[0] TextLmInput 'validation': reset_for_eval = true reads one whole epoch "
                             "per eval run; eval_loop_num_batches = 4 is ignored"),
            std::string::npos)
      << warnings[0];
  check("eval_inputs[0].reset_for_eval=false",
        "reset_for_eval = false with eval_loop_num_batches None is not supported");
  Config rolling = make_experiment("lm.KjvTransformerTiny")->config();
  rolling.apply_overrides({"eval_inputs[0].reset_for_eval=false", "eval_inputs[0].eval_loop_num_batches=4"});
  EXPECT_PAX_ERROR(validate(rolling.as<ExperimentConfig>()), "must repeat indefinitely");
  rolling.apply_overrides({"eval_inputs[0].repeat=true"});
  validate(rolling.as<ExperimentConfig>());
  Config one_epoch = make_experiment("lm.KjvTransformerTiny")->config();
  const auto& eval = dynamic_cast<const data::BaseInput::HParams&>(*one_epoch.as<ExperimentConfig>().eval_inputs[0]);
  EXPECT_TRUE(eval.reset_for_eval && !eval.repeat && !eval.eval_loop_num_batches);
  validate(one_epoch.as<ExperimentConfig>());
}

TEST(Experiments, TinyLmShape) {
  Config cfg = make_experiment("lm.KjvTransformerTiny")->config();
  const auto& exp = cfg.as<ExperimentConfig>();
  auto model = nn::build_layer(exp.model);
  auto* lm = dynamic_cast<const nn::LanguageModel*>(model.get());
  ASSERT_NE(lm, nullptr);
  EXPECT_EQ(lm->lm().num_layers(), 2);
  auto decode = std::static_pointer_cast<data::PromptInput::HParams>(exp.decode_inputs.at(0));
  EXPECT_FALSE(decode->prompts.empty());
  EXPECT_EQ(decode->tokenizer, "bytes");
}

// An unknown metric key (or loss key) is refused before training, naming
// the key and the metrics the model reports; a reported one validates.
TEST(Experiments, AMetricKeyTheModelDoesNotReportIsRefusedAtSetup) {
  Config cfg = make_experiment("lm.KjvTransformerTiny")->config();
  cfg.apply_overrides({"metrics=MaxMetrics", "metrics.metric_keys=[max_logit]"});
  EXPECT_PAX_ERROR(validate(cfg.as<ExperimentConfig>()),
                   "metrics.metric_keys[0] 'max_logit' is not a metric of LanguageModel, so nothing would be logged "
                   "for it; its metrics: total_loss, avg_xent, fraction_of_correct_next_step_preds, num_predictions, "
                   "log_pplx");
  cfg.apply_overrides({"metrics.metric_keys=[log_pplx]"});
  validate(cfg.as<ExperimentConfig>());
  cfg.apply_overrides({"loss_aggregator=MultiLossAggregator", "loss_aggregator.loss_keys=[avg_xent, aux]"});
  EXPECT_PAX_ERROR(validate(cfg.as<ExperimentConfig>()),
                   "loss_aggregator.loss_keys[1] 'aux' is not a metric of LanguageModel; its metrics: total_loss");
}

// Pax's batch: PERCORE_BATCH_SIZE x the mesh's devices, split over the data
// shards (replica x data); a fraction works when the products come out whole.
TEST(Experiments, PercoreBatchFollowsPax) {
  TrainSettings t;
  t.ici_mesh_shape = {1, 4, 1};
  PercoreBatch b = percore_batch(32, t);
  EXPECT_EQ(b.devices, 4);
  EXPECT_EQ(b.data_shards, 4);
  EXPECT_EQ(b.global, 128);
  EXPECT_EQ(b.per_shard, 32);
  // 2 mdl processes per data shard read the same rows.
  t.ici_mesh_shape = {1, 16, 2};
  b = percore_batch(16, t);
  EXPECT_EQ(b.global, 512);
  EXPECT_EQ(b.per_shard, 32);
  // A fractional per-device batch: 0.5 x 4 devices = 2 rows, one per data shard.
  t.ici_mesh_shape = {1, 2, 2};
  b = percore_batch(0.5, t);
  EXPECT_EQ(b.devices, 4);
  EXPECT_EQ(b.global, 2);
  EXPECT_EQ(b.data_shards, 2);
  EXPECT_EQ(b.per_shard, 1);
  // Across slices: ICI [1, 2, 2] x DCN [2, 1, 1] is 8 devices in 4 data shards.
  t.dcn_mesh_shape = {2, 1, 1};
  b = percore_batch(0.5, t);
  EXPECT_EQ(b.devices, 8);
  EXPECT_EQ(b.data_shards, 4);
  EXPECT_EQ(b.global, 4);
  EXPECT_EQ(b.per_shard, 1);
  t.dcn_mesh_shape = {};
  t.ici_mesh_shape = {1, 4, 1};
  EXPECT_PAX_ERROR(percore_batch(0.3, t),
                   "per-device batch 0.3 x 4 devices (ICI [1, 4, 1] x DCN [] = [1, 4, 1] (replica, data, mdl): 4 "
                   "processes) = 1.2 rows: the global batch must be a whole number");
  EXPECT_PAX_ERROR(percore_batch(0.5, t),
                   "per-device batch 0.5 x 4 devices = global batch 2, which does not split over the 4 data shards");
  EXPECT_PAX_ERROR(percore_batch(0, t), "must be > 0, got 0");
  // No mesh: one device, one shard.
  b = percore_batch(16, TrainSettings());
  EXPECT_EQ(b.global, 16);
  EXPECT_EQ(b.per_shard, 16);
}

// The seed ports carry paxml's per-device batch: each input reads the rows
// of one data shard, and the global batch is paxml's on any process count.
TEST(Experiments, SeedPortsHaveThePaxGlobalBatch) {
  struct Port {
    const char* name;
    int64_t per_process, global;
  };
  for (const Port& p : std::vector<Port>{{"lm.C4Spmd1BAdam4Replicas", 32, 128},
                                         {"lm.C4Spmd16BAdam32Replicas", 32, 512},
                                         {"lm.C4SpmdGpt3AdamOrgHP", 24, 1536},
                                         {"lm.C4SpmdPipelineGpt3SmallAdam64Replicas", 128, 512},
                                         {"lm.C4Spmd22BAdam2xv4_128", 16, 2048},
                                         {"lm.LmCloudSpmd2B", 8, 32},
                                         {"lm.LmCloudSpmd2BLimitSteps", 8, 32}}) {
    SCOPED_TRACE(p.name);
    const Config cfg = make_experiment(p.name)->config();
    const auto& exp = cfg.as<ExperimentConfig>();
    for (int64_t processes : {1, 2}) {
      const StepBatch b = step_batch(exp.train_settings(), exp.train_input, processes);
      EXPECT_EQ(b.per_process, p.per_process);
      EXPECT_EQ(b.global, p.global);
    }
    EXPECT_EQ(std::static_pointer_cast<data::BaseInput::HParams>(exp.eval_inputs.at(0))->batch_size, p.per_process);
  }
  // pmap's port has no mesh: 16 per process, x the processes of the run.
  const Config pmap = make_experiment("lm.LmCloudTransformerAdamLimitSteps")->config();
  const auto& exp = pmap.as<ExperimentConfig>();
  EXPECT_EQ(step_batch(exp.train_settings(), exp.train_input, 1).global, 16);
  EXPECT_EQ(step_batch(exp.train_settings(), exp.train_input, 4).global, 64);
}

// --mode=inspect on one process prints the per-process and the global batch
// of the seed's mesh, and the FLOPs of that global batch.
TEST(Experiments, InspectOfASeedPortGivesThePaxGlobalBatch) {
  const std::string text = inspect_experiment(make_experiment("lm.C4Spmd1BAdam4Replicas")->config());
  EXPECT_NE(text.find("batch: 32 per process x 4 data shards = global batch 128 (the mesh's 4 devices)\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("(global batch 128 x 1024 tokens)"), std::string::npos) << text;
  const std::string mdl = inspect_experiment(make_experiment("lm.C4Spmd16BAdam32Replicas")->config());
  EXPECT_NE(mdl.find("batch: 32 per process x 16 data shards = global batch 512 (the mesh's 32 devices, whose "
                     "processes differing only on mdl or stage read the same rows)"),
            std::string::npos)
      << mdl;
  const std::string tiny = inspect_experiment(make_experiment("lm.KjvTransformerTiny")->config());
  EXPECT_NE(tiny.find(" per process x 1 process = global batch "), std::string::npos) << tiny;
}

}  // namespace
}  // namespace pax::experiments
