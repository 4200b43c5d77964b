// Experiment registry, the resolved experiment config and its validation.
#include "pax/experiments/experiment.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "pax/api/transforms.h"
#include "pax/core/error.h"
#include "pax/data/base_input.h"
#include "pax/nn/models/base_model.h"
#include "pax/ops/random.h"

namespace pax::experiments {

namespace {

std::map<std::string, ExperimentFactory>& registry() {
  static std::map<std::string, ExperimentFactory> experiments;
  return experiments;
}

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}

template <class T>
const T& typed_field(const HParamsPtr& p, const char* field, const char* expected) {
  auto* typed = dynamic_cast<const T*>(p.get());
  PAX_CHECK(typed, "experiment config: ", field, " must be a ", expected, ", got ", p ? p->type_name() : "None");
  return *typed;
}

}  // namespace

const train::Learner& ExperimentConfig::learner_hparams() const {
  return typed_field<train::Learner>(learner, "learner", "Learner");
}

const TrainSettings& ExperimentConfig::train_settings() const {
  return typed_field<TrainSettings>(train, "train", "TrainSettings");
}

Config BaseExperiment::config() const {
  Task t = task();
  Datasets d = datasets();
  auto root = std::make_shared<ExperimentConfig>();
  root->model = t.model;
  root->learner = t.learner;
  root->train = t.train;
  root->train_input = d.train;
  root->eval_inputs = d.eval;
  root->decode_inputs = d.decode;
  root->loss_aggregator = t.loss_aggregator;
  root->metrics = t.metrics;
  root->vn = t.vn;
  return Config(root);
}

void register_experiment(const std::string& name, ExperimentFactory factory) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  PAX_CHECK(!registry().count(name), "register_experiment: '", name, "' is registered twice");
  registry()[name] = std::move(factory);
}

std::vector<std::string> registered_experiments() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<std::string> names;
  for (const auto& [name, factory] : registry()) names.push_back(name);
  return names;
}

std::unique_ptr<BaseExperiment> make_experiment(const std::string& name) {
  std::vector<std::string> names = registered_experiments();
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    auto it = registry().find(name);
    if (it != registry().end()) return it->second();
  }
  std::string hint = did_you_mean(name, names);
  std::string list;
  for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
  PAX_FAIL("unknown experiment '", name, "'", hint.empty() ? "" : " (" + hint + ")", "; registered: ", list);
}

void validate(const ExperimentConfig& config) {
  PAX_CHECK(config.model, "experiment config: model is None; set it to a registered model (e.g. LanguageModel)");
  const std::unique_ptr<nn::Layer> model = nn::build_layer(config.model);
  PAX_CHECK(dynamic_cast<const nn::BaseModel*>(model.get()),
            "experiment config: model must be a model (LanguageModel, ClassificationModel), got ",
            config.model->type_name());
  const train::Learner& learner = config.learner_hparams();
  learner.make_optimizer();  // checks the optimizer and its schedule
  train::loss_terms(config.loss_aggregator, learner.loss_name);
  train::metric_rules(config.metrics);
  config.vn.check();
  if (config.vn.enabled()) {  // the regex must select a variable: checked on abstract ones
    const Tree variables = eval_shape([&](const Array& key) { return nn::init(*model, key); })(random::key(0));
    config.vn.selection(variables.contains("params") ? variables["params"] : Tree::dict());
  }
  const TrainSettings& t = config.train_settings();
  PAX_CHECK(t.num_train_steps >= 0, "train.num_train_steps must be >= 0, got ", t.num_train_steps);
  PAX_CHECK(t.save_interval_steps > 0, "train.save_interval_steps must be > 0, got ", t.save_interval_steps);
  PAX_CHECK(t.save_max_to_keep > 0, "train.save_max_to_keep must be > 0, got ", t.save_max_to_keep);
  PAX_CHECK(t.save_keep_period >= 0, "train.save_keep_period must be >= 0 (0: none), got ", t.save_keep_period);
  PAX_CHECK(t.summary_interval_steps > 0, "train.summary_interval_steps must be > 0, got ", t.summary_interval_steps);
  PAX_CHECK(t.eval_interval_steps >= 0, "train.eval_interval_steps must be >= 0 (0: never), got ",
            t.eval_interval_steps);
  PAX_CHECK(t.decode_interval_steps >= 0, "train.decode_interval_steps must be >= 0 (0: never), got ",
            t.decode_interval_steps);
  PAX_CHECK(t.early_stopping_patience >= 0, "train.early_stopping_patience must be >= 0, got ",
            t.early_stopping_patience);
  PAX_CHECK(t.early_stopping_min_delta >= 0, "train.early_stopping_min_delta must be >= 0, got ",
            t.early_stopping_min_delta);
  auto check_input = [](const HParamsPtr& p, const std::string& field) {
    auto* input = dynamic_cast<const data::BaseInput::HParams*>(p.get());
    std::string names;
    for (const std::string& n : data::registered_inputs()) names += (names.empty() ? "" : ", ") + n;
    PAX_CHECK(input, "experiment config: ", field, " must be an input (", names, "), got ",
              p ? p->type_name() : "None");
    return input;
  };
  check_input(config.train_input, "train_input");
  std::vector<std::string> eval_names;
  for (size_t i = 0; i < config.eval_inputs.size(); ++i) {
    auto* input = check_input(config.eval_inputs[i], "eval_inputs[" + std::to_string(i) + "]");
    data::eval_run_batches(*input);  // rejects the unsupported eval combination
    PAX_CHECK(!input->name.empty(), "eval_inputs[", i, "].name must be set (it names the summaries)");
    PAX_CHECK(std::find(eval_names.begin(), eval_names.end(), input->name) == eval_names.end(),
              "eval_inputs: two inputs are named '", input->name, "'");
    eval_names.push_back(input->name);
  }
  for (size_t i = 0; i < config.decode_inputs.size(); ++i) {
    auto* input = check_input(config.decode_inputs[i], "decode_inputs[" + std::to_string(i) + "]");
    data::eval_run_batches(*input);
    PAX_CHECK(!input->name.empty(), "decode_inputs[", i, "].name must be set (it names the output files)");
  }
  if (!t.early_stopping_metric.empty()) {
    size_t slash = t.early_stopping_metric.find('/');
    PAX_CHECK(slash != std::string::npos && slash > 0 && slash + 1 < t.early_stopping_metric.size(),
              "train.early_stopping_metric must be '<eval input name>/<metric>', got '", t.early_stopping_metric, "'");
    std::string input = t.early_stopping_metric.substr(0, slash);
    PAX_CHECK(std::find(eval_names.begin(), eval_names.end(), input) != eval_names.end(),
              "train.early_stopping_metric names eval input '", input, "', but the eval inputs are: ", [&] {
                std::string s;
                for (const std::string& n : eval_names) s += (s.empty() ? "" : ", ") + n;
                return s.empty() ? std::string("(none)") : s;
              }());
    PAX_CHECK(t.eval_interval_steps > 0, "train.early_stopping_metric needs train.eval_interval_steps > 0");
  }
}

PAX_REGISTER_HPARAMS(TrainSettings, "train");
PAX_REGISTER_HPARAMS(ExperimentConfig, "experiment");

}  // namespace pax::experiments
