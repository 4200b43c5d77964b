// Experiments (paxml's experiment_registry and base_experiment): a registered
// class returns the task — the model config, the learner and the train
// settings — and the datasets. The paxcc command looks experiments up by
// name ("lm.KjvTransformer") or by an alias (paxml's module path of a ported
// config, "tasks.lm.params.c4.C4Spmd1BAdam4Replicas"), resolves them into one Config (so that
// `--set model.lm_tpl.model_dims=512` or `--set train_input.batch_size=16`
// edit any field, with typo detection), saves it as JSON and runs it.
//
//   class KjvTransformer : public BaseExperiment {
//     Task task() const override;              // model, learner, train settings
//     Datasets datasets() const override;      // train, eval and decode inputs
//   };
//   PAX_REGISTER_EXPERIMENT("lm.KjvTransformer", KjvTransformer);
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pax/config/config.h"
#include "pax/train/learner.h"
#include "pax/train/loss_aggregator.h"
#include "pax/train/metrics_aggregator.h"
#include "pax/train/variational_noise.h"

namespace pax::experiments {

// How long and how a training run goes (paxml's TrainHParams).
struct TrainSettings : BaseHParams {
  int64_t num_train_steps = 1000;
  int64_t save_interval_steps = 500;
  int64_t save_max_to_keep = 3;
  int64_t save_keep_period = 0;
  bool async_checkpoint = true;
  int64_t summary_interval_steps = 100;
  bool layer_summaries = true;
  int64_t eval_interval_steps = 0;
  int64_t decode_interval_steps = 0;
  int64_t random_seed = 1234;
  std::string early_stopping_metric;
  bool early_stopping_higher_is_better = false;
  double early_stopping_min_delta = 0.0;
  int64_t early_stopping_patience = 3;
  std::vector<int64_t> ici_mesh_shape;
  std::vector<int64_t> dcn_mesh_shape;
  int64_t fsdp_min_elements = int64_t(1) << 14;
  std::string init_from;
  PAX_HPARAMS(TrainSettings, BaseHParams, (num_train_steps, "Train until this global step.", range::steps),
              (save_interval_steps, "Save a checkpoint every this many steps (and at the end).",
               range::closed(1, 1e15)),
              (save_max_to_keep, "Checkpoints kept (the newest).", range::steps),
              (save_keep_period, "Also keep every checkpoint whose step is a multiple of this (0: none).",
               range::steps),
              (async_checkpoint, "Write checkpoints on a background thread."),
              (summary_interval_steps, "Write train summaries and a console line every this many steps.",
               range::closed(1, 1e15)),
              (layer_summaries,
               "Collect the layers' summaries (attention entropy, activation and weight norms, histograms) in "
               "the train step."),
              (eval_interval_steps, "Evaluate on the eval inputs every this many steps and at the end (0: never).",
               range::steps),
              (decode_interval_steps, "Decode the decode inputs every this many steps and at the end (0: never).",
               range::steps),
              (random_seed, "Seed of the parameter initialisation and of dropout.", range::seed),
              (early_stopping_metric,
               "Stop when this eval metric ('<input name>/<metric>', e.g. 'validation/log_pplx') stops improving "
               "('': never)."),
              (early_stopping_higher_is_better, "The early-stopping metric improves upwards (accuracy)."),
              (early_stopping_min_delta, "Smallest change that counts as an improvement.", range::non_negative),
              (early_stopping_patience, "Evaluations without improvement before stopping.", range::steps),
              (ici_mesh_shape,
               "Device mesh within a slice, Pax's axis order [replica, data, mdl] ([stage, replica, data, mdl] for "
               "pipelined configs); its product times dcn_mesh_shape's is the process count ([]: not set).",
               range::count),
              (dcn_mesh_shape, "Mesh across slices, in ici_mesh_shape's axis order ([]: one slice).", range::count),
              (fsdp_min_elements,
               "With the mesh's data axis above 1, parameters of fewer elements stay whole on every process "
               "(the larger ones are split over it).",
               range::closed(1, 1e18)),
              (init_from,
               "Params to start from instead of the random initialisation ('': none): a Flax msgpack file "
               "(paxcc export's), or an Orbax or Pax checkpoint directory (names as README's table maps them); "
               "a job that resumes from its own checkpoint ignores it."));
};

// The resolved experiment: everything a run needs, editable by path.
struct ExperimentConfig : BaseHParams {
  HParamsPtr model;
  HParamsPtr learner = std::make_shared<train::Learner>();
  HParamsPtr train = std::make_shared<TrainSettings>();
  HParamsPtr train_input;
  std::vector<HParamsPtr> eval_inputs;
  std::vector<HParamsPtr> decode_inputs;
  HParamsPtr loss_aggregator = std::make_shared<train::LossAggregator>();
  HParamsPtr metrics = std::make_shared<train::MeanMetrics>();
  train::VariationalNoise vn;
  PAX_HPARAMS(Experiment, BaseHParams, (model, "The model (a registered BaseModel, e.g. LanguageModel)."),
              (learner, "Loss, optimizer and gradient handling (a Learner)."),
              (train, "Steps, checkpoint, summary, eval and decode intervals (TrainSettings)."),
              (train_input, "The training input."), (eval_inputs, "Inputs evaluated every eval_interval_steps."),
              (decode_inputs, "Inputs decoded every decode_interval_steps."),
              (loss_aggregator,
               "Which metrics are the loss (LossAggregator: one, learner.loss_name by default; "
               "MultiLossAggregator: a weighted sum)."),
              (metrics, "Which metrics are logged and how they combine (MeanMetrics, MaxMetrics, CompositeMetrics)."),
              (vn, "Variational weight noise during training (VariationalNoise)."));

  const train::Learner& learner_hparams() const;
  const TrainSettings& train_settings() const;
};

// What an experiment class returns.
// (paxml's SingleTask: model, learner, train settings, loss aggregator,
// metrics aggregator, variational noise.)
struct Task {
  HParamsPtr model;
  std::shared_ptr<train::Learner> learner = std::make_shared<train::Learner>();
  std::shared_ptr<TrainSettings> train = std::make_shared<TrainSettings>();
  HParamsPtr loss_aggregator = std::make_shared<train::LossAggregator>();
  HParamsPtr metrics = std::make_shared<train::MeanMetrics>();
  train::VariationalNoise vn;
};
struct Datasets {
  HParamsPtr train;
  std::vector<HParamsPtr> eval;
  std::vector<HParamsPtr> decode;
};

class BaseExperiment {
 public:
  virtual ~BaseExperiment() = default;
  virtual Task task() const = 0;
  virtual Datasets datasets() const = 0;
  // One line for `paxcc --list`.
  virtual std::string description() const { return ""; }
  // The task and datasets as one editable Config.
  Config config() const;
};

// ---------------------------------------------------------------------------
// Registry.

using ExperimentFactory = std::function<std::unique_ptr<BaseExperiment>()>;
void register_experiment(const std::string& name, ExperimentFactory factory);
// Makes `alias` (paxml's module path of a ported config, e.g.
// "tasks.lm.params.c4.C4Spmd1BAdam4Replicas") name the registered `name`.
// As in paxml's registry, "paxml." + alias and every dotted suffix of it
// ("c4.C4Spmd1BAdam4Replicas") resolve too, when they name one experiment.
void register_experiment_alias(const std::string& alias, const std::string& name);
// Sorted names.
std::vector<std::string> registered_experiments();
// The aliases registered for `name` (sorted; empty when none).
std::vector<std::string> experiment_aliases(const std::string& name);
// The registered name that a name or alias stands for. Throws pax::Error for
// an unknown one, suggesting close names and aliases, and for a suffix that
// several aliases share, listing them.
std::string resolve_experiment_name(const std::string& name_or_alias);
// make_experiment(resolve_experiment_name(name_or_alias)).
std::unique_ptr<BaseExperiment> make_experiment(const std::string& name_or_alias);

// Checks a resolved config before any work: every part present and of the
// right kind, settings in range. Throws pax::Error naming the field. When
// the metrics aggregator lists metric_keys (or the loss aggregator names its
// keys), one example of the train input is read and the model traced on it
// abstractly, so that a key the model does not report is refused here; where
// the input cannot be read, the first train step refuses it instead.
void validate(const ExperimentConfig& config);
// What a valid config asks for that runs otherwise than it reads, one line
// each (an eval input's eval_loop_num_batches that reset_for_eval ignores,
// as Pax ignores it). paxcc prints them as warnings before any work.
std::vector<std::string> config_warnings(const ExperimentConfig& config);

// Pax's batch from a per-device batch (PERCORE_BATCH_SIZE, which may be a
// fraction such as 0.5): the global batch is percore_batch_size x the mesh's
// devices (the product of ICI and DCN; 1 without a mesh) and must come out
// whole, and each data shard (the processes of the replica and data axes:
// those that differ only on mdl or stage read the same rows) reads
// global / data_shards of it, an input's batch_size. Throws pax::Error
// naming the numbers when either is not whole.
struct PercoreBatch {
  int64_t devices = 1;
  int64_t data_shards = 1;
  int64_t global = 0;
  int64_t per_shard = 0;
};
PercoreBatch percore_batch(double percore_batch_size, const TrainSettings& t);

// The batch a run reads per step from `input` (a BaseInput config):
// batch_size rows on each of `data_shards` readers, `global` in all. With a
// mesh the readers are its replica x data processes (the run must have the
// mesh's process count); without one, num_infeed_hosts when set above 1,
// else each of `processes`.
struct StepBatch {
  int64_t per_process = 0;
  int64_t data_shards = 1;
  int64_t global = 0;
};
StepBatch step_batch(const TrainSettings& t, const HParamsPtr& input, int64_t processes);

}  // namespace pax::experiments

#define PAX_EXPERIMENT_CONCAT_(a, b) a##b
#define PAX_EXPERIMENT_NAME_(line) PAX_EXPERIMENT_CONCAT_(pax_experiment_registered_, line)
// Registers an experiment class under a dotted name (in a .cc file).
#define PAX_REGISTER_EXPERIMENT(name, Cls)                                                                  \
  static const bool PAX_EXPERIMENT_NAME_(__LINE__) = [] {                                                   \
    ::pax::experiments::register_experiment(                                                                \
        name, [] { return std::unique_ptr<::pax::experiments::BaseExperiment>(std::make_unique<Cls>()); }); \
    return true;                                                                                            \
  }()
