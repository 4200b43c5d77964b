// Experiment registry, the resolved experiment config and its validation.
#include "pax/experiments/experiment.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>

#include "pax/api/transforms.h"
#include "pax/core/error.h"
#include "pax/data/base_input.h"
#include "pax/data/text_lm.h"
#include "pax/experiments/mesh.h"
#include "pax/nn/layer.h"
#include "pax/nn/models/base_model.h"
#include "pax/ops/random.h"
#include "pax/train/seqio_metrics.h"

namespace pax::experiments {

namespace {

std::map<std::string, ExperimentFactory>& registry() {
  static std::map<std::string, ExperimentFactory> experiments;
  return experiments;
}

// alias -> registered name.
std::map<std::string, std::string>& aliases() {
  static std::map<std::string, std::string> a;
  return a;
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

// The names of the metrics `model`'s compute_loss reports on a batch of
// `input`: one example read (no prefetching, this process alone) and the
// model traced on it abstractly, nothing computed. nullopt when the input
// cannot be read here or the model not traced on one example (a pipelined
// batch, say): the run reports those itself, and the first train step
// checks the keys.
std::optional<std::vector<std::string>> reported_metrics(const nn::BaseModel& model, const HParamsPtr& input) {
  if (!input) return std::nullopt;
  HParamsPtr one = input->clone();
  auto* in = dynamic_cast<data::BaseInput::HParams*>(one.get());
  if (!in) return std::nullopt;
  in->batch_size = 1;
  in->prefetch_batches = 0;
  in->num_infeed_hosts = 1;
  in->infeed_host_index = 0;
  try {
    const Tree batch = data::build_input(one)->get_next();
    const Tree metrics = eval_shape([&](const Array& key) {
      const Tree variables = nn::init(model, key);
      return nn::apply_with(model, variables, [&](const nn::BaseModel& m) { return m.fprop_batch(batch).first; },
                            {.summaries = false})
          .output;
    })(random::key(0));
    std::vector<std::string> names;
    if (metrics.is_dict())
      for (const auto& [name, entry] : metrics.entries()) names.push_back(name);
    return names;
  } catch (const std::exception&) {  // unreadable data, memory: the first step checks the keys instead
    return std::nullopt;
  }
}

// Whether the loss aggregator names its metrics (rather than taking the
// learner's loss_name, which the first step checks).
bool names_loss_keys(const HParamsPtr& loss_aggregator) {
  if (dynamic_cast<const train::MultiLossAggregator*>(loss_aggregator.get())) return true;
  auto* single = dynamic_cast<const train::LossAggregator*>(loss_aggregator.get());
  return single && !single->loss_key.empty();
}

std::string mesh_text(const TrainSettings& t) {
  return t.ici_mesh_shape.empty() && t.dcn_mesh_shape.empty() ? std::string("no mesh") : describe_mesh(t);
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

void register_experiment_alias(const std::string& alias, const std::string& name) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  PAX_CHECK(registry().count(name), "register_experiment_alias: '", alias, "' names '", name,
            "', which is not registered (register the experiment first)");
  PAX_CHECK(!registry().count(alias), "register_experiment_alias: '", alias, "' is already an experiment's name");
  PAX_CHECK(!aliases().count(alias), "register_experiment_alias: '", alias, "' is registered twice");
  aliases()[alias] = name;
}

std::vector<std::string> registered_experiments() {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<std::string> names;
  for (const auto& [name, factory] : registry()) names.push_back(name);
  return names;
}

std::vector<std::string> experiment_aliases(const std::string& name) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  std::vector<std::string> out;
  for (const auto& [alias, target] : aliases())
    if (target == name) out.push_back(alias);
  return out;
}

std::string resolve_experiment_name(const std::string& key) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  if (registry().count(key)) return key;
  // paxml's secondary keys: "paxml." + alias and each of its dotted suffixes.
  std::vector<std::string> matches;
  for (const auto& [alias, target] : aliases()) {
    const std::string full = "paxml." + alias;
    const bool suffix = full.size() > key.size() && full.compare(full.size() - key.size(), key.size(), key) == 0 &&
                        full[full.size() - key.size() - 1] == '.';
    if (key == full || suffix) matches.push_back(alias);
  }
  if (matches.size() == 1) return aliases()[matches[0]];
  auto joined = [](const std::vector<std::string>& v) {
    std::string s;
    for (const std::string& n : v) s += (s.empty() ? "" : ", ") + n;
    return s;
  };
  PAX_CHECK(matches.empty(), "experiment '", key, "' is ambiguous: it ends ", matches.size(), " paxml names (",
            joined(matches), "); pass more of the module path");
  std::vector<std::string> names, candidates;
  for (const auto& [name, factory] : registry()) names.push_back(name);
  candidates = names;
  for (const auto& [alias, target] : aliases()) candidates.push_back(alias);
  const std::string hint = did_you_mean(key, candidates);
  // did_you_mean ends in a space, to run on into a sentence; here it sits in parentheses.
  PAX_FAIL("unknown experiment '", key, "'", hint.empty() ? "" : " (" + hint.substr(0, hint.size() - 1) + ")",
           "; registered: ", joined(names), " (paxcc --list shows them with their paxml names)");
}

std::unique_ptr<BaseExperiment> make_experiment(const std::string& name_or_alias) {
  const std::string name = resolve_experiment_name(name_or_alias);
  std::lock_guard<std::mutex> lock(registry_mutex());
  return registry().at(name)();
}

std::vector<std::string> config_warnings(const ExperimentConfig& config) {
  std::vector<std::string> warnings;
  auto add = [&](const std::vector<HParamsPtr>& inputs, const char* field) {
    for (size_t i = 0; i < inputs.size(); ++i)
      if (auto* input = dynamic_cast<const data::BaseInput::HParams*>(inputs[i].get()))
        if (std::string w = data::eval_table_warning(*input); !w.empty())
          warnings.push_back(std::string(field) + "[" + std::to_string(i) + "] " + w);
  };
  add(config.eval_inputs, "eval_inputs");
  add(config.decode_inputs, "decode_inputs");
  return warnings;
}

void validate(const ExperimentConfig& config) {
  PAX_CHECK(config.model, "experiment config: model is None; set it to a registered model (e.g. LanguageModel)");
  const std::unique_ptr<nn::Layer> model = nn::build_layer(config.model);
  PAX_CHECK(dynamic_cast<const nn::BaseModel*>(model.get()),
            "experiment config: model must be a model (LanguageModel, ClassificationModel), got ",
            config.model->type_name());
  const train::Learner& learner = config.learner_hparams();
  learner.make_optimizer();  // checks the optimizer and its schedule
  const std::vector<train::LossTerm> terms = train::loss_terms(config.loss_aggregator, learner.loss_name);
  const train::MetricRules rules = train::metric_rules(config.metrics);
  // Keys the model does not report: a metric key would log nothing, a loss
  // key fail at the first step. Checked here when the aggregators name keys.
  if (!rules.named.empty() || names_loss_keys(config.loss_aggregator)) {
    const auto* base = dynamic_cast<const nn::BaseModel*>(model.get());
    if (const auto names = reported_metrics(*base, config.train_input)) {
      train::check_loss_keys(terms, *names, config.model->type_name());
      train::check_metric_keys(rules, *names, config.model->type_name());
    }
  }
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
  mesh_axes(t);  // the meshes' rank and entries; the process count is checked by the run
  PAX_CHECK(t.early_stopping_min_delta >= 0, "train.early_stopping_min_delta must be >= 0, got ",
            t.early_stopping_min_delta);
  auto check_input = [](const HParamsPtr& p, const std::string& field) {
    auto* input = dynamic_cast<const data::BaseInput::HParams*>(p.get());
    std::string names;
    for (const std::string& n : data::registered_inputs()) names += (names.empty() ? "" : ", ") + n;
    PAX_CHECK(input, "experiment config: ", field, " must be an input (", names, "), got ",
              p ? p->type_name() : "None");
    if (auto* text = dynamic_cast<const data::TextLmInput::HParams*>(p.get())) data::check_text_source(*text, field);
    return input;
  };
  check_input(config.train_input, "train_input");
  std::vector<std::string> eval_names;
  for (size_t i = 0; i < config.eval_inputs.size(); ++i) {
    auto* input = check_input(config.eval_inputs[i], "eval_inputs[" + std::to_string(i) + "]");
    data::eval_run_batches(*input);  // rejects the unsupported eval combination
    train::check_input_metrics(*input, "eval_inputs[" + std::to_string(i) + "]");
    PAX_CHECK(!input->name.empty(), "eval_inputs[", i, "].name must be set (it names the summaries)");
    PAX_CHECK(std::find(eval_names.begin(), eval_names.end(), input->name) == eval_names.end(),
              "eval_inputs: two inputs are named '", input->name, "'");
    eval_names.push_back(input->name);
  }
  for (size_t i = 0; i < config.decode_inputs.size(); ++i) {
    auto* input = check_input(config.decode_inputs[i], "decode_inputs[" + std::to_string(i) + "]");
    data::eval_run_batches(*input);
    train::check_input_metrics(*input, "decode_inputs[" + std::to_string(i) + "]");
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

PercoreBatch percore_batch(double percore_batch_size, const TrainSettings& t) {
  PercoreBatch b;
  b.devices = mesh_processes(t);
  b.data_shards = mesh_axis_size(t, "replica") * mesh_axis_size(t, "data");
  PAX_CHECK(std::isfinite(percore_batch_size) && percore_batch_size > 0,
            "the per-device batch (PERCORE_BATCH_SIZE) must be > 0, got ", percore_batch_size);
  // As Pax: int(percore x devices + 1e-6), and nothing of a row may be lost.
  const double rows = percore_batch_size * double(b.devices);
  b.global = int64_t(rows + 1e-6);
  PAX_CHECK(
      b.global >= 1 && std::abs(rows - double(b.global)) <= 1e-6 * std::max(1.0, rows), "per-device batch ",
      percore_batch_size, " x ", b.devices, " devices (", mesh_text(t), ") = ", rows,
      " rows: the global batch must be a whole number of at least 1; pick a per-device batch that is a multiple of 1/",
      b.devices);
  PAX_CHECK(b.global % b.data_shards == 0, "per-device batch ", percore_batch_size, " x ", b.devices,
            " devices = global batch ", b.global, ", which does not split over the ", b.data_shards,
            " data shards (replica x data) of ", mesh_text(t), ": each would read ",
            double(b.global) / double(b.data_shards),
            " rows; pick a per-device batch that makes the global batch a multiple of ", b.data_shards);
  b.per_shard = b.global / b.data_shards;
  return b;
}

StepBatch step_batch(const TrainSettings& t, const HParamsPtr& input, int64_t processes) {
  auto* in = dynamic_cast<const data::BaseInput::HParams*>(input.get());
  PAX_CHECK(in, "step_batch: the input config must be a BaseInput, got ", input ? input->type_name() : "None");
  StepBatch b;
  b.per_process = in->batch_size;
  if (!t.ici_mesh_shape.empty() || !t.dcn_mesh_shape.empty()) {
    b.data_shards = mesh_axis_size(t, "replica") * mesh_axis_size(t, "data");
  } else {
    // Under mpirun an input left at one host is sharded over the processes.
    b.data_shards = in->num_infeed_hosts > 1 ? in->num_infeed_hosts : std::max<int64_t>(processes, 1);
  }
  b.global = b.per_process * b.data_shards;
  return b;
}

PAX_REGISTER_HPARAMS(TrainSettings, "train");
PAX_REGISTER_HPARAMS(ExperimentConfig, "experiment");

}  // namespace pax::experiments
