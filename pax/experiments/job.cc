// Job: the run's context; eval and decode of the inputs; the memory check.
#include "pax/experiments/job.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>

#include "pax/backend/cpu/host_memory.h"
#include "pax/core/buffer.h"
#include "pax/core/error.h"
#include "pax/data/file_io.h"
#include "pax/api/transforms.h"
#include "pax/dist/mesh.h"
#include "pax/dist/process_group.h"
#include "pax/experiments/field_ranges.h"
#include "pax/experiments/job_lock.h"
#include "pax/experiments/memory_check.h"
#include "pax/experiments/mesh.h"
#include "pax/experiments/rank_agreement.h"
#include "pax/nn/models/language_model.h"
#include "pax/ops/random.h"
#include "pax/train/eval_decode.h"
#include "pax/train/seqio_metrics.h"

namespace pax::experiments {

namespace fs = std::filesystem;

namespace {

// Where processes other than the chief print: nowhere (their errors still
// reach stderr through the paxcc command).
std::ostream& discarded_output() {
  static std::ostream null_stream(nullptr);
  return null_stream;
}

// One example of an input (built with batch_size 1 and no prefetching), or
// nullopt where it cannot be read: the check is an estimate, and the real
// input reports its own errors.
std::optional<Tree> probe_example(const Job& job, const HParamsPtr& input) {
  HParamsPtr one = input->clone();
  auto* in = dynamic_cast<data::BaseInput::HParams*>(one.get());
  if (in == nullptr) return std::nullopt;
  in->batch_size = 1;
  in->prefetch_batches = 0;
  try {
    return job.build_input(one)->get_next();
  } catch (const Error&) {
    return std::nullopt;
  }
}

// An input's full batch (abstract) and the bytes of the batches it holds at
// once (`extra` besides the prefetched ones: the one in use, the next).
struct InputFootprint {
  std::optional<Tree> batch;
  double bytes = 0;
};
InputFootprint input_footprint(const Job& job, const HParamsPtr& input, int extra) {
  const auto* in = dynamic_cast<const data::BaseInput::HParams*>(input.get());
  const std::optional<Tree> one = probe_example(job, input);
  if (!in || !one) return {};
  return {abstract_batch(*one, in->batch_size),
          tree_bytes(*one) * double(in->batch_size) * double(extra + std::max<int64_t>(in->prefetch_batches, 0))};
}

}  // namespace

Job::Job(const Config& c, const RunOptions& o)
    : config(c),
      exp(c.as<ExperimentConfig>()),
      options(o),
      processes(dist::process_count()),
      process(dist::process_index()),
      out(process != 0 ? discarded_output()
          : o.out      ? *o.out
                       : std::cout) {
  config_json = config.to_json();
  // Before any rank acts on its settings (the mesh first): mpirun may have
  // started ranks with different flags.
  check_ranks_agree(config_json, {{"--mode", pax_enum_names(static_cast<Mode*>(nullptr)).names.at(size_t(o.mode))},
                                  {"--restore_step", o.restore_step ? std::to_string(*o.restore_step) : "latest"}});
  // Ranges first: validating builds the model, which an absurd layer count
  // or dimension must not reach.
  check_field_ranges(config);
  validate(exp);
  check_mesh(exp.train_settings(), processes);
  init_process_mesh(exp.train_settings());
  const dist::DataShard shard = dist::data_shard();
  data_shards = shard.count;
  data_shard = shard.index;
  sharding = plan_sharding(exp.train_settings(), processes, dist::process_group().axis_name());
  model_layer = nn::build_layer(exp.model);
  model = dynamic_cast<const nn::BaseModel*>(model_layer.get());
}

std::string Job::readers() const {
  const auto count = [](int64_t n, const std::string& one, const std::string& many) {
    return std::to_string(n) + " " + (n == 1 ? one : many);
  };
  const std::string all = count(processes, "process", "processes");
  return data_shards == processes ? all : count(data_shards, "data shard", "data shards") + " of " + all;
}

std::string Job::path(const std::string& name) const { return (fs::path(options.job_dir) / name).string(); }

void Job::check_job_dir() const {
  PAX_CHECK(!options.job_dir.empty(), "a job directory is needed (--job_log_dir)");
  data::check_local_path(options.job_dir, "--job_log_dir");
}

void Job::write_job_files() const {
  check_job_dir();
  if (!chief()) return;
  make_job_directory(options.job_dir);
  data::write_file_atomic(path("config.json"), config_file_text());
  data::write_file_atomic(path("model_summary.txt"), nn::summary(*model));
}

std::string Job::config_file_text() const {
  const nlohmann::ordered_json config = nlohmann::ordered_json::parse(config_json);
  nlohmann::ordered_json file;
  if (!options.experiment_name.empty()) file["$experiment"] = options.experiment_name;
  for (const auto& [key, value] : config.items()) file[key] = value;
  return file.dump(2) + "\n";
}

train::CheckpointManagerOptions Job::checkpoint_options() const {
  const TrainSettings& t = exp.train_settings();
  train::CheckpointManagerOptions o;
  o.save_interval_steps = t.save_interval_steps;
  o.max_to_keep = t.save_max_to_keep;
  if (t.save_keep_period > 0) o.keep_period = t.save_keep_period;
  o.async = t.async_checkpoint;
  o.config_json = config_json;
  return o;
}

void Job::open_checkpoints(std::optional<train::CheckpointManager>& mgr, bool every_process, bool read_only) const {
  train::CheckpointManagerOptions o = checkpoint_options();
  o.read_only = read_only;
  if (chief() || every_process) mgr.emplace(path("checkpoints"), o);
}

std::unique_ptr<data::BaseInput> Job::build_input(const HParamsPtr& p) const {
  if (data_shards == 1) return data::build_input(p);
  HParamsPtr copy = p->clone();
  auto* in = dynamic_cast<data::BaseInput::HParams*>(copy.get());
  PAX_CHECK(in, "an input config is not a BaseInput: ", p->type_name());
  PAX_CHECK(in->num_infeed_hosts == 1 || in->num_infeed_hosts == data_shards, "input '", in->name,
            "': num_infeed_hosts = ", in->num_infeed_hosts, " but the job runs ", readers(),
            "; leave it at 1 (each process then reads its own shard) or set it to ", data_shards);
  in->num_infeed_hosts = data_shards;
  in->infeed_host_index = data_shard;
  return data::build_input(copy);
}

std::vector<std::unique_ptr<data::BaseInput>> Job::build_inputs(const std::vector<HParamsPtr>& configs) const {
  std::vector<std::unique_ptr<data::BaseInput>> inputs;
  for (const HParamsPtr& p : configs) inputs.push_back(build_input(p));
  return inputs;
}

int64_t broadcast_from_chief(int64_t value) {
  return dist::process_group().broadcast(scalar(double(value), DType::i64)).item<int64_t>();
}

std::string metrics_str(const std::map<std::string, double>& metrics) {
  std::string s;
  for (const auto& [name, value] : metrics) s += (s.empty() ? "" : "  ") + name + " " + train::format_metric(value);
  return s;
}

std::map<std::string, std::map<std::string, double>> run_evals(const Job& job, const train::EvalStep& eval_step,
                                                               const Tree& variables,
                                                               std::vector<std::unique_ptr<data::BaseInput>>& inputs,
                                                               int64_t step, train::JobSummaries* summaries,
                                                               train::ConsoleProgress* progress) {
  std::map<std::string, std::map<std::string, double>> results;
  const train::MetricRules rules = train::metric_rules(job.exp.metrics);
  for (auto& input : inputs) {
    const std::string name = input->base_hparams().name;
    const AllocationPurpose purpose("evaluating input '" + name + "' at step " + std::to_string(step));
    // Each process evaluates its shard; the metrics cover all of them.
    train::EvalResult r = train::run_eval(eval_step, variables, *input, /*across_processes=*/job.multi_process(), rules,
                                          /*lockstep=*/job.sharding.sharded());
    train::StepMetrics m;
    m.step = step;
    m.split = train::eval_split(name);
    m.metrics = r.metrics;
    m.summaries = r.summaries;  // the chief's batches, as the train step's summaries are
    m.histograms = r.histograms;
    if (summaries) summaries->write(m);
    std::string line = "eval " + name + " @ step " + std::to_string(step) + " (" + std::to_string(r.batches) +
                       " batches): " + metrics_str(r.metrics);
    if (progress) {
      progress->message(line);
    } else {
      job.out << line << "\n";
    }
    results[name] = r.metrics;
  }
  return results;
}

std::map<std::string, std::string> run_decodes(const Job& job, const Tree& variables,
                                               std::vector<std::unique_ptr<data::BaseInput>>& inputs, int64_t step,
                                               train::ConsoleProgress* progress, const std::string& dir,
                                               train::JobSummaries* summaries) {
  std::map<std::string, std::string> files;
  const Array key = random::fold_in(random::key(job.exp.train_settings().random_seed), 0x0dec0de);
  for (auto& input : inputs) {
    const std::string name = input->base_hparams().name;
    const AllocationPurpose purpose("decoding input '" + name + "' at step " + std::to_string(step));
    train::DecodeResult r = train::run_decode(*job.model, variables, *input, random::fold_in(key, uint32_t(step)));
    const std::string path = dir.empty() ? std::string() : train::write_decode_samples(dir, name, step, r);
    std::string shown = "decode " + name + " @ step " + std::to_string(step) + (path.empty() ? "" : " -> " + path);
    for (size_t i = 0; i < r.outputs.size() && i < 4; ++i) shown += "\n  " + r.outputs[i];
    if (!input->base_hparams().predict_metrics.empty()) {
      train::MetricAccumulator acc;
      acc.add(train::predict_metrics(*input, r.prompts, r.outputs, r.indices,
                                     [&](const std::string& text) { return input->text_to_ids(text); }));
      train::StepMetrics m;
      m.step = step;
      m.split = "decode_test_" + name;
      m.metrics = acc.values();
      if (summaries) summaries->write(m);
      shown += "\n  metrics: " + metrics_str(m.metrics);
    }
    if (progress) {
      progress->message(shown);
    } else {
      job.out << shown << "\n";
    }
    if (!path.empty()) files[name] = path;
  }
  return files;
}

// Before anything large is allocated: the memory a run needs, which is the
// train state (parameters, optimizer state, collections) from an abstract
// initialisation, the input batches (one example measured, times batch_size,
// times the batches in flight), and the largest of what one phase adds at a
// time: the compiled train and eval steps' intermediates (activations,
// gradients: their planned arenas, traced and compiled on abstract arrays,
// allocated one call at a time) and decoding's state (the key/value caches at
// the decode batch and max_decode_length). A run that needs more than is
// available (MemAvailable, or a cgroup's limit) is refused with the numbers
// and the fields to change. `train_step` null: no training; `eval_step`
// null: no eval; `decoding`: this process decodes the decode inputs.
void check_memory_fits(const Job& job, const train::TrainStep& state_maker, const train::TrainStep* train_step,
                       const train::EvalStep* eval_step, bool decoding, const Array& init_key, const Array& step_key) {
  const std::optional<cpu::AvailableMemory> available = cpu::available_memory();
  if (!available) return;
  Tree state;
  try {
    state = eval_shape([&](const Array& key) { return state_maker.init_state(key).to_tree(); })(init_key);
  } catch (const Error& e) {
    PAX_FAIL("the model's parameters cannot be created (", job.exp.model->type_name(),
             "; --mode=inspect prints its size): ", e.what());
  }
  MemoryNeeds needs;
  needs.add("train state", tree_bytes(state));
  std::string batch_sizes;
  auto name_batch_size = [&](const HParamsPtr& input, const std::string& field) {
    if (const auto* in = dynamic_cast<const data::BaseInput::HParams*>(input.get()))
      batch_sizes += (batch_sizes.empty() ? "" : ", ") + field + ".batch_size (" + std::to_string(in->batch_size) + ")";
  };
  InputFootprint train_in;
  if (train_step) {
    train_in = input_footprint(job, job.exp.train_input, 2);
    name_batch_size(job.exp.train_input, "train_input");
  }
  auto each_input = [&](const std::vector<HParamsPtr>& inputs, const char* field, std::vector<InputFootprint>& out) {
    for (size_t i = 0; i < inputs.size(); ++i) {
      out.push_back(input_footprint(job, inputs[i], 1));
      name_batch_size(inputs[i], std::string(field) + "[" + std::to_string(i) + "]");
    }
  };
  std::vector<InputFootprint> eval_in, decode_in;
  if (eval_step) each_input(job.exp.eval_inputs, "eval_inputs", eval_in);
  if (decoding) each_input(job.exp.decode_inputs, "decode_inputs", decode_in);
  double input_bytes = train_in.bytes;
  for (const auto* group : {&eval_in, &decode_in})
    for (const InputFootprint& in : *group) input_bytes += in.bytes;
  needs.add("input batches", input_bytes);
  const auto* lm = dynamic_cast<const nn::LanguageModel::HParams*>(job.exp.model.get());
  needs.advice = "reduce " + (batch_sizes.empty() ? std::string() : batch_sizes + " or ") +
                 (decoding && lm ? "model.max_decode_length (" + std::to_string(lm->max_decode_length) + ") or " : "") +
                 "the model's dimensions (--mode=inspect prints its size)";
  // The parts known without tracing first, so that an absurd batch is
  // refused before a step is compiled for it.
  refuse_if_short(needs, *available);
  double phase_bytes = 0;
  std::string phase_name;
  auto consider = [&](double bytes, const char* name) {
    if (bytes <= phase_bytes) return;
    phase_bytes = bytes;
    phase_name = name;
  };
  const train::TrainState abstract_state = train::TrainState::from_tree(state);
  if (train_step && train_in.batch)
    consider(double(train_step->intermediate_bytes(abstract_state, *train_in.batch, step_key)),
             "the train step's activations and gradients");
  const Tree variables = train::model_variables(abstract_state);
  for (const InputFootprint& in : eval_in)
    if (in.batch) consider(double(eval_step->intermediate_bytes(variables, *in.batch)), "the eval step's activations");
  for (const InputFootprint& in : decode_in)
    if (in.batch)
      consider(tree_bytes(train::decode_state_shapes(*job.model, variables, *in.batch)), "decoding's key/value caches");
  if (phase_name.empty()) return;
  needs.add(phase_name, phase_bytes);
  refuse_if_short(needs, *available);
}

}  // namespace pax::experiments
