// The train / eval / decode / inspect modes.
#include "pax/experiments/runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "pax/api/transforms.h"
#include "pax/backend/cpu/host_memory.h"
#include "pax/backend/cpu/native_compiler.h"
#include "pax/core/buffer.h"
#include "pax/core/error.h"
#include "pax/core/scaled_number.h"
#include "pax/core/stop.h"
#include "pax/core/trace.h"
#include "pax/data/base_input.h"
#include "pax/data/file_io.h"
#include "pax/dist/jax_utils.h"
#include "pax/dist/mesh.h"
#include "pax/dist/process_group.h"
#include "pax/experiments/experiment.h"
#include "pax/experiments/input_mismatch.h"
#include "pax/experiments/job_lock.h"
#include "pax/experiments/rank_agreement.h"
#include "pax/experiments/field_ranges.h"
#include "pax/experiments/memory_check.h"
#include "pax/experiments/mesh.h"
#include "pax/experiments/sharded_state.h"
#include "pax/nn/models/language_model.h"
#include "pax/ops/random.h"
#include "pax/train/checkpoint_manager.h"
#include "pax/train/console.h"
#include "pax/train/early_stopping.h"
#include "pax/train/import_params.h"
#include "pax/train/machine_info.h"
#include "pax/train/peak_flops.h"
#include "pax/train/step_summaries.h"
#include "pax/train/trace_file.h"
#include "pax/train/eval_decode.h"
#include "pax/train/fs_util.h"
#include "pax/train/summary.h"

namespace pax::experiments {

namespace fs = std::filesystem;

namespace {

constexpr const char* kTrainStateItem = "train_state";
constexpr const char* kInputStateItem = "input_state";
constexpr const char* kEarlyStoppingItem = "early_stopping";
// {"process_count": N}: a run resumes only with the process count that wrote
// it, since each process's input stream is saved as its own shard.
constexpr const char* kProcessesItem = "processes";

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Where processes other than the chief print: nowhere (their errors still
// reach stderr through the paxcc command).
std::ostream& discarded_output() {
  static std::ostream null_stream(nullptr);
  return null_stream;
}

// Everything a mode needs, built once from the config.
struct Job {
  const Config& config;
  const ExperimentConfig& exp;
  const RunOptions& options;
  // Data parallelism: this process's index among `processes`; process 0, the
  // chief, alone writes the job dir, checkpoints, summaries and the console.
  int processes = 1, process = 0;
  // Inputs: this process reads shard data_shard of data_shards (dist::data_shard():
  // the processes of the mesh's replica and data axes; all of them without a mesh).
  int64_t data_shards = 1, data_shard = 0;
  bool chief() const { return process == 0; }
  // "2 processes", or "2 data shards of 4 processes" when processes that
  // differ only on the mdl (or stage) axis read the same batch.
  std::string readers() const {
    const auto count = [](int64_t n, const std::string& one, const std::string& many) {
      return std::to_string(n) + " " + (n == 1 ? one : many);
    };
    const std::string all = count(processes, "process", "processes");
    return data_shards == processes ? all : count(data_shards, "data shard", "data shards") + " of " + all;
  }
  bool multi_process() const { return processes > 1; }
  std::ostream& out;
  std::unique_ptr<nn::Layer> model_layer;
  const nn::BaseModel* model = nullptr;
  std::string config_json;  // written into the job dir and hashed into every checkpoint
  ShardingPlan sharding;    // the axes of the train step; fsdp over the mesh's data axis

  Job(const Config& c, const RunOptions& o)
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

  std::string path(const std::string& name) const { return (fs::path(options.job_dir) / name).string(); }

  void check_job_dir() const { PAX_CHECK(!options.job_dir.empty(), "a job directory is needed (--job_log_dir)"); }

  // config.json and model_summary.txt, so that the job dir documents the run.
  void write_job_files() const {
    check_job_dir();
    if (!chief()) return;
    make_job_directory(options.job_dir);
    data::write_file_atomic(path("config.json"), config_file_text());
    data::write_file_atomic(path("model_summary.txt"), nn::summary(*model));
  }

  // config.json: the resolved config, led by the experiment's name
  // ("$experiment", which --config ignores) so that the directory says what ran.
  std::string config_file_text() const {
    const nlohmann::ordered_json config = nlohmann::ordered_json::parse(config_json);
    nlohmann::ordered_json file;
    if (!options.experiment_name.empty()) file["$experiment"] = options.experiment_name;
    for (const auto& [key, value] : config.items()) file[key] = value;
    return file.dump(2) + "\n";
  }

  train::CheckpointManagerOptions checkpoint_options() const {
    const TrainSettings& t = exp.train_settings();
    train::CheckpointManagerOptions o;
    o.save_interval_steps = t.save_interval_steps;
    o.max_to_keep = t.save_max_to_keep;
    if (t.save_keep_period > 0) o.keep_period = t.save_keep_period;
    o.async = t.async_checkpoint;
    o.config_json = config_json;
    return o;
  }

  // The chief's checkpoint manager (the other processes have none); with
  // `every_process` (a sharded train state, which each process saves and
  // restores its blocks of), every process's.
  // `read_only` (eval, decode): restores only, beside a trainer that may be saving.
  void open_checkpoints(std::optional<train::CheckpointManager>& mgr, bool every_process = false,
                        bool read_only = false) const {
    train::CheckpointManagerOptions o = checkpoint_options();
    o.read_only = read_only;
    if (chief() || every_process) mgr.emplace(path("checkpoints"), o);
  }

  // An input of this process: with several data shards each process reads
  // infeed_host_index = data_shard of num_infeed_hosts = data_shards.
  std::unique_ptr<data::BaseInput> build_input(const HParamsPtr& p) const {
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

  std::vector<std::unique_ptr<data::BaseInput>> build_inputs(const std::vector<HParamsPtr>& configs) const {
    std::vector<std::unique_ptr<data::BaseInput>> inputs;
    for (const HParamsPtr& p : configs) inputs.push_back(build_input(p));
    return inputs;
  }
};

// The processes a checkpoint was written by and the input shards they read
// (1 and 1 before they were recorded; the process count before the shards
// were: every process read its own).
struct SavedProcesses {
  int64_t count = 1;
  int64_t data_shards = 1;
};

SavedProcesses saved_processes(const train::CheckpointItems& items) {
  auto it = items.json.find(kProcessesItem);
  if (it == items.json.end()) return {};
  const nlohmann::json j = nlohmann::json::parse(it->second, nullptr, /*allow_exceptions=*/false);
  const bool shards = j.is_object() && j.contains("data_shards");
  PAX_CHECK(j.is_object() && j.contains("process_count") && j["process_count"].is_number_integer() &&
                (!shards || j["data_shards"].is_number_integer()),
            "the checkpoint's ", kProcessesItem,
            ".json is not {\"process_count\": N, \"data_shards\": K}: ", it->second);
  const int64_t count = j["process_count"].get<int64_t>();
  return {count, shards ? j["data_shards"].get<int64_t>() : count};
}

void check_process_count(const train::CheckpointItems& items, int64_t step, const std::string& dir, int processes) {
  const int64_t saved = saved_processes(items).count;
  PAX_CHECK(saved == processes, "the checkpoint of step ", step, " in ", dir, " was written by ", saved,
            " process(es) but this run has ", processes, "; resume it with ",
            saved == 1 ? std::string("a single process") : "mpirun -np " + std::to_string(saved),
            " (each process's input stream is saved as its own shard, and this input's position cannot be "
            "divided among ",
            processes, " process(es))");
}

// Process 0's value on every process.
int64_t broadcast_from_chief(int64_t value) {
  return dist::process_group().broadcast(scalar(double(value), DType::i64)).item<int64_t>();
}

// The chief's read of a train state for eval / decode.
Tree restore_chief_variables(const Job& job, train::CheckpointManager& mgr, const train::TrainState& target,
                             int64_t* step) {
  std::optional<int64_t> which = job.options.restore_step;
  if (!which) which = mgr.latest_step();
  PAX_CHECK(which, "no checkpoint in ", mgr.directory(), "; train first (--mode=train) or pick another --job_log_dir");
  const std::vector<int64_t> steps = mgr.all_steps();
  if (std::find(steps.begin(), steps.end(), *which) == steps.end()) {
    std::string list;
    for (int64_t s : steps) list += (list.empty() ? "" : ", ") + std::to_string(s);
    PAX_FAIL("--restore_step=", *which, ": no such checkpoint in ", mgr.directory(),
             "; saved steps: ", list.empty() ? "(none)" : list);
  }
  const AllocationPurpose purpose("restoring the checkpoint of step " + std::to_string(*which));
  train::CheckpointItems items = mgr.restore(*which, {{kTrainStateItem, target.to_tree()}});
  *step = *which;
  return items.trees.at(kTrainStateItem);
}

// The variables a model reads, from a restored train state: the chief reads
// the checkpoint and every process gets its values.
Tree restore_variables(const Job& job, std::optional<train::CheckpointManager>& mgr, const train::TrainStep& train_step,
                       int64_t* step) {
  train::TrainState target = train_step.init_state(random::key(0));
  Tree restored = target.to_tree();
  std::string message;
  dist::run_on_root([&] {
    restored = restore_chief_variables(job, *mgr, target, step);
    message = "restored step " + std::to_string(*step) + " from " + mgr->directory();
  });
  *step = broadcast_from_chief(*step);
  job.out << message << "\n";
  return train::model_variables(train::TrainState::from_tree(dist::replicate(restored)));
}

std::string metrics_str(const std::map<std::string, double>& metrics) {
  std::string s;
  for (const auto& [name, value] : metrics) s += (s.empty() ? "" : "  ") + name + " " + train::format_metric(value);
  return s;
}

// Every eval input once; summaries under eval_test_<name>.
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

// Every decode input once; samples written to <dir>/<name>_step_<step>.txt
// (none written when `dir` is empty).
std::map<std::string, std::string> run_decodes(const Job& job, const Tree& variables,
                                               std::vector<std::unique_ptr<data::BaseInput>>& inputs, int64_t step,
                                               train::ConsoleProgress* progress, const std::string& dir) {
  std::map<std::string, std::string> files;
  const Array key = random::fold_in(random::key(job.exp.train_settings().random_seed), 0x0dec0de);
  for (auto& input : inputs) {
    const std::string name = input->base_hparams().name;
    const AllocationPurpose purpose("decoding input '" + name + "' at step " + std::to_string(step));
    train::DecodeResult r = train::run_decode(*job.model, variables, *input, random::fold_in(key, uint32_t(step)));
    const std::string path = dir.empty() ? std::string() : train::write_decode_samples(dir, name, step, r);
    std::string shown = "decode " + name + " @ step " + std::to_string(step) + (path.empty() ? "" : " -> " + path);
    for (size_t i = 0; i < r.outputs.size() && i < 4; ++i) shown += "\n  " + r.outputs[i];
    if (progress) {
      progress->message(shown);
    } else {
      job.out << shown << "\n";
    }
    if (!path.empty()) files[name] = path;
  }
  return files;
}

// The console line shows the loss the learner minimises (the terms of the
// loss aggregator, train::loss_terms; by default total_loss alone) and one
// accuracy; the summaries get every metric.
train::StepMetrics console_metrics(train::StepMetrics m, const std::vector<train::LossTerm>& loss) {
  return train::console_line_metrics(std::move(m), loss);
}

DType compute_dtype(const ExperimentConfig& exp) {
  auto* layer = dynamic_cast<const nn::Layer::HParams*>(exp.model.get());
  return layer && layer->fprop_dtype == DType::bf16 ? DType::bf16 : DType::f32;
}

// Tokens of a batch (its ids' elements) for language models, else 0.
int64_t batch_tokens(const Tree& batch) {
  return batch.is_dict() && batch.contains("ids") ? batch["ids"].leaf().shape().numel() : 0;
}

int64_t batch_examples(const Tree& batch) {
  for (const Array& leaf : tree_leaves(batch))
    if (leaf.ndim() > 0) return leaf.dim(0);
  return 0;
}

// What every process of a run agrees on after a step: whether any of them
// was asked to stop, and whether the chief's checkpoint manager saves now.
struct StepAgreement {
  bool stop = false;
  bool save = false;
};

StepAgreement agree_after_step(const Job& job, bool stop, bool save) {
  if (!job.multi_process()) return {stop, save};
  const std::vector<int32_t> mine = {stop ? 1 : 0, save ? 1 : 0};
  const std::vector<int32_t> any =
      dist::process_group().all_reduce(array(mine, Shape{2}), dist::ReduceOp::max).to_vector<int32_t>();
  return {any[0] != 0, any[1] != 0};
}

// Throws unless the checkpoint's input states have the shapes and dtypes of this input's.
void check_input_state(const Tree& saved_inputs, const Tree& input_state) {
  check_same_structure(saved_inputs, input_state, "the checkpoint's input_state");
  const std::vector<Array> saved = tree_leaves(saved_inputs), now = tree_leaves(input_state);
  for (size_t i = 0; i < saved.size(); ++i)
    PAX_CHECK(saved[i].aval().shape == now[i].aval().shape && saved[i].dtype() == now[i].dtype(),
              "the checkpoint's input_state holds ", saved[i].aval().str(), " where this input has ",
              now[i].aval().str());
}

// The train state and input position at the chief's latest checkpoint, on
// every process; returns the step restored (nullopt: a fresh start, the
// chief's initial parameters then replicated). A sharded train state
// (`specs` not empty): every process reads its own blocks, with its own
// manager, and a fresh start keeps the blocks each process drew.
std::optional<int64_t> restore_for_training(const Job& job, std::optional<train::CheckpointManager>& mgr,
                                            const dist::ShardSpecs& specs, train::TrainState& state,
                                            data::BaseInput& input, train::EarlyStopping& stopper,
                                            bool early_stopping) {
  const bool sharded = job.sharding.sharded();
  int64_t latest = -1;
  if (job.chief() && mgr->latest_step()) latest = *mgr->latest_step();
  latest = broadcast_from_chief(latest);
  if (latest < 0) {
    if (!sharded) state = train::TrainState::from_tree(dist::replicate(state.to_tree()));
    return std::nullopt;
  }
  // One input state per process, stacked along a leading process axis.
  Tree input_state = job.multi_process() ? dist::all_gather_stacked(input.state()) : input.state();
  Tree state_tree = state.to_tree();
  std::string stopper_json;
  std::optional<Tree> resharded;  // this process's input state from another process count's
  auto read = [&] {
    const AllocationPurpose purpose("restoring the checkpoint of step " + std::to_string(latest));
    const std::map<std::string, Tree> targets = {{kTrainStateItem, state_tree}, {kInputStateItem, Tree()}};
    train::CheckpointItems items = sharded ? mgr->restore_sharded(latest, targets, {{kTrainStateItem, specs}})
                                           : mgr->restore(latest, targets);
    const Tree& saved_inputs = items.trees.at(kInputStateItem);
    const SavedProcesses saved_by = saved_processes(items);
    const int64_t saved = saved_by.count;
    // The same processes reading the same shards (a mesh that moves
    // processes between data and mdl changes the shards, not the count).
    if (saved == job.processes && saved_by.data_shards == job.data_shards) {
      check_input_state(saved_inputs, input_state);
      input_state = saved_inputs;
    } else {
      // Another process count or input sharding: the train state is read
      // whole or as this run's blocks; the input continues from process 0's
      // position where its order allows (every process is at the same
      // one), else refused.
      const Tree host0 =
          saved > 1 ? tree_map([](const Array& a) { return squeeze(slice_along(a, 0, 0, 1), 0); }, saved_inputs)
                    : saved_inputs;
      resharded = input.reshard_state(host0);
      if (!resharded) {
        check_process_count(items, latest, mgr->directory(), job.processes);
        PAX_CHECK(saved_by.data_shards == job.data_shards, "the checkpoint of step ", latest, " in ", mgr->directory(),
                  " was written by processes reading ", saved_by.data_shards,
                  " input shard(s) but this run's mesh reads ", job.data_shards,
                  "; resume it with the mesh it was written with (this input's position cannot be divided so)");
      }
    }
    state_tree = items.trees.at(kTrainStateItem);
    if (early_stopping && items.json.count(kEarlyStoppingItem)) stopper_json = items.json.at(kEarlyStoppingItem);
  };
  if (sharded) {
    // Every process reads its blocks; a failure on one is thrown on all of
    // them (none waits in a later collective for it).
    dist::run_on_every_process(read, "restoring the checkpoint of step " + std::to_string(latest));
    state = train::TrainState::from_tree(state_tree);
    if (resharded) {
      input_state = *resharded;
    } else if (job.multi_process()) {
      input_state = dist::local_slice(input_state);
    }
  } else {
    dist::run_on_root(read);
    state = train::TrainState::from_tree(dist::replicate(state_tree));
    if (broadcast_from_chief(resharded ? 1 : 0) != 0) {
      input_state = dist::replicate(resharded ? *resharded : input.state());
    } else if (job.multi_process()) {
      input_state = dist::local_slice(dist::replicate(input_state));
    }
    stopper_json = dist::broadcast_string(stopper_json);
  }
  input.restore_state(input_state);
  if (!stopper_json.empty()) stopper = stopper.restore_json(stopper_json);
  return latest;
}

// A step with a non-finite loss or gradients: with skipping on, its update was
// dropped, and the run stops after learner.max_consecutive_nonfinite_steps of
// them in a row; with skipping off, the update already holds NaN or infinity,
// and the run stops before anything saves it (the last checkpoint stays).
void check_finite_step(const train::Learner& learner, int64_t step, bool nonfinite, int64_t& run,
                       const Tree& step_out) {
  run = nonfinite ? run + 1 : 0;
  if (!nonfinite) return;
  const std::string values = fmt::format("loss {}, gradient norm {}", step_out["loss"].leaf().item<double>(),
                                         step_out["grad_norm"].leaf().item<double>());
  PAX_CHECK(learner.skip_nonfinite_steps, "step ", step, ": ", values,
            " and learner.skip_nonfinite_steps is false, so the parameters are no longer"
            " finite; stopping without saving them (the last checkpoint is kept). Lower"
            " learner.optimizer.learning_rate, clip with learner.clip_gradient_norm_to_value, or set"
            " learner.skip_nonfinite_steps=true");
  const int64_t limit = learner.max_consecutive_nonfinite_steps;
  PAX_CHECK(limit == 0 || run < limit, "steps ", step - run + 1, " to ", step, ": ", run,
            " consecutive steps with a non-finite loss or gradients were skipped (last: ", values,
            "), learner.max_consecutive_nonfinite_steps=", limit, "; the parameters are those of step ", step - run,
            ". Lower learner.optimizer.learning_rate or clip with learner.clip_gradient_norm_to_value");
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

// The training loop of --mode=train, one method per concern: setting up
// (steps, memory check, inputs, checkpoints, the initial state), restoring,
// a step, the interval's summary, evaluation with early stopping, decoding,
// the processes' agreement after a step, saving, and the closing lines.
class TrainingLoop {
 public:
  explicit TrainingLoop(Job& job)
      : job_(job),
        exp_(job.exp),
        settings_(exp_.train_settings()),
        learner_(exp_.learner_hparams()),
        out_(job.out),
        metric_rules_(train::metric_rules(exp_.metrics)),
        train_step_(*job.model, learner_,
                    {.data_parallel_axis = job.sharding.batch_axis,
                     .loss_aggregator = exp_.loss_aggregator,
                     .metrics = exp_.metrics,
                     .vn = exp_.vn,
                     .summaries = settings_.layer_summaries,
                     .fsdp = job.sharding.fsdp,
                     .replica_axis = job.sharding.replica_axis,
                     .tp = job.sharding.tp,
                     .stage = job.sharding.stage}),
        eval_step_(*job.model, job.sharding.fsdp, job.sharding.tp, job.sharding.stage),
        early_stopping_(!settings_.early_stopping_metric.empty()),
        stopper_{.min_delta = settings_.early_stopping_min_delta, .patience = settings_.early_stopping_patience} {}

  RunResult run() {
    lock();
    set_up();
    restore();
    announce();
    // The buffers that init and restore freed are cached by size for reuse
    // (core/buffer.h); the steps allocate other sizes, so they would only
    // stay resident beside the steps' own.
    host_allocator_trim();
    while (step_ < settings_.num_train_steps && !result_.early_stopped) {
      if (profile_ && step_ + 1 == profile_->first) start_trace();
      train_one_step();
      const bool last = step_ == settings_.num_train_steps;
      if (step_ % settings_.summary_interval_steps == 0 || last) summarise();
      const StepAgreement agreed = agree();
      if (settings_.eval_interval_steps > 0 && (step_ % settings_.eval_interval_steps == 0 || last)) evaluate();
      if (settings_.decode_interval_steps > 0 && (step_ % settings_.decode_interval_steps == 0 || last)) decode();
      // Saved after this step's eval, so that the checkpoint holds the
      // early-stopping state that eval produced.
      if (agreed.save) {
        save(false);
        dist::process_group().meet_after("the save of step " + std::to_string(step_));
      } else if (job_.chief()) {
        mgr_->check_background_error();
      }
      if (trace_run_ && step_ >= profile_->second) write_trace();
      if (agreed.stop) {
        result_.interrupted = true;
        break;
      }
    }
    finish();
    if (trace_run_) write_trace();  // the run ended inside the window
    return result_;
  }

 private:
  // What summarise() reports: the steps since the last summary.
  struct Interval {
    train::MetricAccumulator metrics;
    train::SummaryAccumulator summaries;  // the chief's
    int64_t steps = 0, tokens = 0, examples = 0, skipped = 0;
    double seconds = 0, input_seconds = 0;  // of the steps; of their waits for batches
    Array grad_norm;                        // of the latest step
  };

  // One trainer per job directory: the chief holds the lock for the whole
  // run (before the checkpoint manager cleans up a save in progress); when
  // another trainer holds it, every process fails with its holder's name.
  void lock() {
    dist::run_on_root([&] {
      job_.check_job_dir();
      lock_.emplace(job_.options.job_dir, job_.options.experiment_name);
    });
  }

  // The steps, the memory check, the inputs (missing data and a tokenizer
  // with more ids than the model's vocabulary fail before anything is
  // written; decoding is the chief's alone), the eval inputs' warnings, the
  // checkpoint manager and the initial state.
  void set_up() {
    const Array seed_key = random::key(uint64_t(settings_.random_seed));
    const Array init_key = random::fold_in(seed_key, 0);
    dropout_key_ = random::fold_in(seed_key, 1);
    check_memory_fits(job_, train_step_, &train_step_, settings_.eval_interval_steps > 0 ? &eval_step_ : nullptr,
                      job_.chief() && settings_.decode_interval_steps > 0, init_key, random::fold_in(dropout_key_, 0));
    train_input_ = job_.build_input(exp_.train_input);
    check_vocabulary_fits(exp_, *train_input_, "train_input");
    eval_inputs_ = job_.build_inputs(exp_.eval_inputs);
    for (size_t i = 0; i < eval_inputs_.size(); ++i)
      check_vocabulary_fits(exp_, *eval_inputs_[i], "eval_inputs[" + std::to_string(i) + "]");
    if (job_.chief())
      for (const HParamsPtr& p : exp_.decode_inputs) decode_inputs_.push_back(data::build_input(p));
    if (settings_.eval_interval_steps > 0)  // after the errors above, so that an error stays one line
      for (const std::string& line : eval_input_mismatches(exp_)) out_ << "warning: " << line << "\n";
    job_.open_checkpoints(mgr_, /*every_process=*/job_.sharding.sharded());
    // The specs (abstract shapes) first: a stage axis with nothing to split
    // is refused before the state is drawn.
    if (job_.sharding.sharded()) specs_ = train_step_.state_specs();
    if (const nn::PipelineOptions& stage = job_.sharding.stage; stage.enabled())
      PAX_CHECK(splits_over(specs_, stage.axis), "the mesh's stage axis is ", stage.size, " but ",
                job_.model->type_name(),
                " has no pipelined layers to split over it: make its layers a Repeat with num_microbatches or "
                "microbatch_size set (praxis's pipelined stack), or put the stage axis's processes on the data axis");
    const AllocationPurpose purpose("the train state (parameters, optimizer state)");
    state_ = train_step_.init_state(init_key);
  }

  // Resumes from the latest checkpoint, if any; then writes config.json,
  // which therefore always describes the checkpoints beside it.
  void restore() {
    // Setting up (reading and preparing data, compiling) takes each process
    // its own time: they meet before the first collective.
    dist::process_group().meet_after("setting up the run");
    if (std::optional<int64_t> resumed =
            restore_for_training(job_, mgr_, specs_, state_, *train_input_, stopper_, early_stopping_)) {
      out_ << "resumed from " << job_.path("checkpoints") << " at step " << *resumed << "\n";
    } else if (!settings_.init_from.empty()) {
      state_.params = job_.sharding.sharded()
                          ? params_blocks_from_checkpoint(settings_.init_from, state_.params, specs_)
                          : train::params_from_checkpoint(settings_.init_from, state_.params);
      out_ << "params from " << settings_.init_from << "\n";
    }
    job_.write_job_files();
    step_ = state_.step.astype(DType::i64).item<int64_t>();
  }

  // The model's and batch's size (and an early stop the restored run had
  // reached), the summary writers and the progress bar, and the peak that
  // MFU is of. MFU is the chief's to report: only it works
  // out the peak and measures the achievable GEMM rate (processes measuring
  // at once on one machine would each see a share of it), and traces the
  // model's FLOPs.
  void announce() {
    out_ << "model: " << nn::count_parameters(*job_.model) << " parameters (table in " << job_.path("model_summary.txt")
         << ")\n";
    const int64_t per_host_batch = train_input_->base_hparams().batch_size;
    out_ << "global batch " << per_host_batch * job_.data_shards << " (" << per_host_batch << " per process x "
         << job_.readers() << ")\n";
    if (const nn::FsdpOptions& fsdp = job_.sharding.fsdp; fsdp.enabled())
      out_ << "params and optimizer state split over the data axis of " << fsdp.size
           << " processes (fully sharded): " << format_bytes(tree_bytes(state_.to_tree())) << " per process\n";
    if (const nn::TensorParallelOptions& tp = job_.sharding.tp; tp.enabled()) {
      out_ << "attention heads, feed-forward hidden widths and vocabulary split over the mdl axis of " << tp.size
           << " processes (tensor parallel): " << format_bytes(tree_bytes(state_.to_tree()))
           << " of train state per process\n";
      if (!splits_over(specs_, tp.axis))
        out_ << "warning: the mesh's mdl axis is " << tp.size << " but " << job_.model->type_name()
             << " splits no weight over it (attention, feed-forward and embedding layers do): its " << tp.size
             << " processes compute the same thing; put them on the data axis instead\n";
    }
    if (const nn::PipelineOptions& stage = job_.sharding.stage; stage.enabled())
      out_ << "pipelined layers split over the stage axis of " << stage.size
           << " processes (GPipe microbatches): " << format_bytes(tree_bytes(state_.to_tree()))
           << " of train state per process\n";
    if (stopper_.should_stop) {  // the restored run had already stopped early: nothing more to train
      result_.early_stopped = true;
      out_ << "early stopping: the run had stopped at step " << step_ << ": " << settings_.early_stopping_metric
           << " had not improved for " << stopper_.patience_count << " evaluations\n";
    }
    if (job_.chief()) {
      // An unusable decode/ fails now, not at the first decode step.
      if (!decode_inputs_.empty() && settings_.decode_interval_steps > 0)
        train::fs::ensure_writable_directory(job_.path("decode"), "decode samples");
    }
    progress_.emplace(
        train::ConsoleProgress::Options{.total_steps = settings_.num_train_steps, .out = &out_, .plain_secs = 0});
    const DType dtype = compute_dtype(exp_);
    peak_ = job_.chief() ? train::peak_flops(dtype, {.override_flops = job_.options.peak_flops}) : 0;
    if (job_.chief()) {
      const std::string peak_how = describe_peak(dtype);
      out_ << "MFU is of the " << peak_how << "\n";
      summaries_.emplace(
          job_.options.job_dir,
          train::JobSummaries::Options{
              .title = job_.options.experiment_name, .first_step = step_, .report_context = report_context(peak_how)});
    }
    flops_per_step_ = job_.chief() ? -1 : 0;
    dist::process_group().meet_after("the chief's peak FLOP/s measurement");
  }

  // The peak MFU is taken against and how it was derived: given
  // (--peak_flops, PAX_PEAK_FLOPS), the device's table, or the CPU's
  // theoretical peak beside the GEMM rate measured here.
  std::string describe_peak(DType dtype) const {
    if (job_.options.peak_flops || std::getenv("PAX_PEAK_FLOPS"))
      return fmt::format("{} peak {:.1f} GFLOP/s, given ({})", dtype_name(dtype), peak_ / 1e9,
                         job_.options.peak_flops ? "--peak_flops" : "PAX_PEAK_FLOPS");
    if (const std::optional<train::DevicePeak> device = train::device_peak(dtype))
      return fmt::format("{} peak {}", dtype_name(dtype), device->how);
    const train::TheoreticalPeak p = train::theoretical_peak(dtype);
    const double gemm = train::achievable_flops(dtype);
    return fmt::format("{} peak {}; GEMM achieves {:.1f} GFLOP/s ({:.0f}% of it)", dtype_name(dtype), p.str(),
                       gemm / 1e9, 100 * gemm / p.flops);
  }

  // What report.html shows beside the charts.
  train::ReportContext report_context(const std::string& peak_how) const {
    train::ReportContext context;
    context.machine = train::machine_rows();
    context.machine.emplace_back("MFU peak", peak_how);
    context.machine.emplace_back("processes", job_.readers());
    context.config_json = job_.config_file_text();
    context.parameters = parameter_table(state_.params, specs_);
    context.decode_dir = job_.path("decode");
    return context;
  }

  void train_one_step() {
    const auto start = Clock::now();
    const AllocationPurpose purpose("training step " + std::to_string(step_ + 1));
    const trace::Span span("step", trace::active() ? "train step " + std::to_string(step_ + 1) : std::string());
    const auto input_start = Clock::now();
    Tree batch = [&] {
      const trace::Span input("input", "wait for the batch");
      return train_input_->get_next();
    }();
    interval_.input_seconds += seconds_since(input_start);
    // Processes that differ in mdl or stage alone share one batch's FLOPs.
    if (flops_per_step_ < 0)
      flops_per_step_ = job_.model->flops_per_example(batch) * double(batch_examples(batch)) /
                        double(job_.sharding.tp.size * job_.sharding.stage.size);
    Array step_key = random::fold_in(dropout_key_, uint32_t(step_));
    // Own dropout masks per batch; processes that differ in mdl or stage
    // alone share them (they compute one model on one batch).
    if (job_.multi_process()) step_key = random::fold_in(step_key, uint32_t(job_.data_shard));
    auto [next, step_out] = train_step_(std::move(state_), batch, step_key);
    state_ = std::move(next);
    ++step_;
    interval_.metrics.add(step_out["metrics"]);
    if (job_.chief()) interval_.summaries.add(step_out["summaries"]);
    interval_.grad_norm = step_out["grad_norm"].leaf();
    interval_.skipped += step_out["skipped"].leaf().item<float>() != 0;
    check_finite_step(learner_, step_, step_out["nonfinite"].leaf().item<float>() != 0, nonfinite_run_, step_out);
    interval_.seconds += seconds_since(start);
    ++interval_.steps;
    // Every data shard reads a batch of the same size: the global rate is data_shards times this one's.
    interval_.tokens += batch_tokens(batch) * job_.data_shards;
    interval_.examples += batch_examples(batch) * job_.data_shards;
    progress_->update(step_);
  }

  // The interval's means and rates: TensorBoard, metrics.jsonl, the console.
  void summarise() {
    train::StepMetrics m;
    m.step = step_;
    m.metrics = interval_.metrics.values();
    m.summaries = interval_.summaries.scalar_means();
    m.histograms = interval_.summaries.histograms();
    m.learning_rate = learner_.learning_rate(step_ - 1);
    m.grad_norm = interval_.grad_norm.item<double>();
    m.skipped_steps = double(interval_.skipped);
    const double secs = std::max(interval_.seconds, 1e-9);
    m.steps_per_sec = double(interval_.steps) / secs;
    m.input_wait = std::min(1.0, interval_.input_seconds / secs);
    if (interval_.tokens > 0) {
      m.tokens_per_sec = double(interval_.tokens) / secs;
    } else {
      m.examples_per_sec = double(interval_.examples) / secs;
    }
    // This process's share of the FLOPs over its own peak: the same ratio as the whole job's.
    if (flops_per_step_ > 0) m.mfu = train::mfu(flops_per_step_, secs / double(interval_.steps), peak_);
    if (m.mfu && *m.mfu > 1.0 && !warned_peak_) {
      warned_peak_ = true;
      progress_->message(fmt::format(
          "MFU above 100%: the peak of {:.1f} GFLOP/s is too low for this CPU; pass its peak with --peak_flops",
          peak_ / 1e9));
    }
    if (summaries_) summaries_->write(m);
    progress_->summary(console_metrics(m, train::loss_terms(exp_.loss_aggregator, learner_.loss_name)));
    result_.train_metrics = m.metrics;
    interval_ = Interval{.metrics = train::MetricAccumulator(metric_rules_)};
  }

  // Whether every process stops or saves after this step.
  StepAgreement agree() {
    return agree_after_step(job_, stop_requested() || (job_.options.stop_requested && job_.options.stop_requested()),
                            job_.chief() && mgr_->should_save(step_));
  }

  // Every eval input, then early stopping on its metric.
  void evaluate() {
    const trace::Span span("eval", "evaluate");
    result_.eval_metrics = run_evals(job_, eval_step_, train::model_variables(state_), eval_inputs_, step_,
                                     summaries_ ? &*summaries_ : nullptr, &*progress_);
    if (!early_stopping_) return;
    const std::string& metric = settings_.early_stopping_metric;
    const size_t slash = metric.find('/');
    const auto& values = result_.eval_metrics.at(metric.substr(0, slash));
    auto it = values.find(metric.substr(slash + 1));
    PAX_CHECK(it != values.end(), "train.early_stopping_metric '", metric, "': the eval input reports ",
              metrics_str(values));
    stopper_ = stopper_.update(settings_.early_stopping_higher_is_better ? -it->second : it->second);
    if (stopper_.should_stop) {
      result_.early_stopped = true;
      progress_->message("early stopping at step " + std::to_string(step_) + ": " + metric + " has not improved for " +
                         std::to_string(stopper_.patience_count) + " evaluations");
    }
  }

  // The chief decodes; the chief-only phases (decoding, a save) may outlast
  // --dist_timeout, so the other processes wait for them at a barrier with a
  // longer limit.
  void decode() {
    const trace::Span span("decode", "decode");
    // The chief decodes alone, so with sharded params with whole ones.
    Tree variables = train::model_variables(state_);
    if (job_.sharding.sharded()) variables = gather_whole(variables, specs_);
    if (job_.chief())
      result_.decode_files = run_decodes(job_, variables, decode_inputs_, step_, &*progress_, job_.path("decode"));
    dist::process_group().meet_after("decoding at step " + std::to_string(step_));
  }

  // Every process calls it at the same steps (the input states are gathered
  // to the chief, which alone writes them; a sharded train state is written
  // by every process, its own blocks). `force`: the final save, skipped when
  // this step is already saved.
  void save(bool force) {
    const trace::Span span("checkpoint", "save");
    Tree input_state = job_.multi_process() ? dist::all_gather_stacked(train_input_->state()) : train_input_->state();
    if (!mgr_ || (force && mgr_->latest_step() == step_)) return;
    train::CheckpointItems items;
    items.trees[kTrainStateItem] = state_.to_tree();
    items.trees[kInputStateItem] = input_state;
    items.json[kProcessesItem] =
        nlohmann::json{{"process_count", job_.processes}, {"data_shards", job_.data_shards}}.dump();
    if (early_stopping_)
      items.json[kEarlyStoppingItem] = stopper_.to_json();  // JSON items restore whatever the targets
    if (job_.sharding.sharded()) {
      mgr_->save_sharded(step_, items, {{kTrainStateItem, specs_}}, {.force = force});
    } else {
      mgr_->save(step_, items, {.force = force});
    }
  }

  // --profile_steps: recording from the window's first step. PAX_TRACE_DIR,
  // which traces the whole process, wins.
  void start_trace() {
    if (std::getenv("PAX_TRACE_DIR") && *std::getenv("PAX_TRACE_DIR")) {
      out_ << "--profile_steps: PAX_TRACE_DIR traces the whole run instead\n";
      profile_.reset();
      return;
    }
    const std::time_t now = std::time(nullptr);
    char run[32];
    std::strftime(run, sizeof(run), "%Y_%m_%d_%H_%M_%S", std::gmtime(&now));
    trace_run_ = run;
    trace::start();
  }

  // The window's events, one file per process (the host's name, with the
  // process index when there are several).
  void write_trace() {
    std::string file = trace::host_name();
    if (job_.multi_process()) file += "." + std::to_string(job_.process);
    const std::string json = trace::stop("paxcc " + file);
    const std::string path =
        job_.path("summaries/train/plugins/profile/" + *trace_run_ + "/" + file + ".trace.json.gz");
    trace_run_.reset();
    profile_.reset();
    if (json.empty()) return;
    trace::write_gzipped(path, json);
    out_ << "trace of steps " << job_.options.profile_steps->first << " to "
         << std::min(step_, job_.options.profile_steps->second) << " written to " << path << "\n";
  }

  // The final save and the closing lines.
  void finish() {
    save(true);
    if (mgr_) mgr_->wait_until_finished();
    dist::process_group().meet_after("the final save of step " + std::to_string(step_));
    progress_->finish();
    if (summaries_) summaries_->close();
    result_.step = step_;
    const std::string checkpoint_dir = job_.path("checkpoints");
    if (const std::string built = cpu::native_build_summary(); job_.chief() && !built.empty()) out_ << built << "\n";
    if (result_.interrupted) {
      out_ << "interrupted: saved step " << step_ << " in " << checkpoint_dir << "; run the same command to resume\n";
    } else {
      out_ << "done at step " << step_ << "; checkpoints in " << checkpoint_dir << ", report in "
           << (summaries_ ? summaries_->report_path() : job_.path("report.html")) << "\n";
    }
  }

  // Declared first, released last: after the final save has been committed.
  std::optional<JobDirectoryLock> lock_;
  // A stop signal from here on asks for a checkpoint after the current step.
  const StopListener listening_;
  Job& job_;
  const ExperimentConfig& exp_;
  const TrainSettings& settings_;
  const train::Learner& learner_;
  std::ostream& out_;
  const train::MetricRules metric_rules_;
  train::TrainStep train_step_;
  train::EvalStep eval_step_;
  Array dropout_key_;
  std::unique_ptr<data::BaseInput> train_input_;
  std::vector<std::unique_ptr<data::BaseInput>> eval_inputs_, decode_inputs_;
  std::optional<train::CheckpointManager> mgr_;
  std::optional<std::pair<int64_t, int64_t>> profile_ = job_.options.profile_steps;  // steps still to trace
  std::optional<std::string> trace_run_;  // while tracing: the run's directory name
  train::TrainState state_;
  dist::ShardSpecs specs_;  // how state_ is split (fsdp); empty: whole on every process
  const bool early_stopping_;
  train::EarlyStopping stopper_;
  int64_t step_ = 0;
  RunResult result_;
  std::optional<train::JobSummaries> summaries_;
  std::optional<train::ConsoleProgress> progress_;
  double peak_ = 0;
  double flops_per_step_ = 0;  // -1 until the first batch is traced (the chief)
  Interval interval_{.metrics = train::MetricAccumulator(metric_rules_)};
  int64_t nonfinite_run_ = 0;  // consecutive non-finite steps
  bool warned_peak_ = false;
};

// Where eval / decode write (the chief): --output_dir, else
// <job_dir>/<mode>_runs/step_<step>/, so that the training history
// (metrics.jsonl, report.html, config.json, decode/) is never rewritten.
// Empty when the default cannot be made (a read-only job directory): the
// results go to the console only.
std::string restored_output_dir(const Job& job, int64_t step) {
  const bool eval = job.options.mode == Mode::eval;
  if (!job.options.output_dir.empty()) {
    make_job_directory(job.options.output_dir, "--output_dir");
    return job.options.output_dir;
  }
  const std::string dir = job.path(fmt::format("{}_runs/step_{:08d}", eval ? "eval" : "decode", step));
  try {
    make_job_directory(dir, "the " + std::string(eval ? "eval" : "decode") + " results' directory");
    return dir;
  } catch (const Error& e) {
    job.out << "warning: results are written to the console only: " << e.what()
            << "; pass --output_dir DIR to keep them\n";
    return {};
  }
}

// --mode=eval / decode: restores a checkpoint read-only (no lock: a trainer
// may be running) and writes into its own output directory.
RunResult run_restored(Job& job) {
  train::TrainStep train_step(*job.model, job.exp.learner_hparams());
  train::EvalStep eval_step(*job.model);
  const bool eval = job.options.mode == Mode::eval;
  check_memory_fits(job, train_step, nullptr, eval ? &eval_step : nullptr, !eval && job.chief(), random::key(0),
                    random::key(0));
  job.check_job_dir();
  std::optional<train::CheckpointManager> mgr;
  job.open_checkpoints(mgr, /*every_process=*/false, /*read_only=*/true);
  RunResult result;
  dist::process_group().meet_after("setting up the run");
  Tree variables = restore_variables(job, mgr, train_step, &result.step);
  std::string out_dir;
  if (job.chief()) {
    out_dir = restored_output_dir(job, result.step);
    // This run's own settings (its --set overrides), beside its results.
    if (!out_dir.empty()) data::write_file_atomic((fs::path(out_dir) / "config.json").string(), job.config_file_text());
  }
  if (eval) {
    PAX_CHECK(!job.exp.eval_inputs.empty(), "--mode=eval: the experiment has no eval inputs (eval_inputs is empty)");
    auto inputs = job.build_inputs(job.exp.eval_inputs);
    std::optional<train::JobSummaries> summaries;
    // In the step's own directory a re-run replaces its lines rather than
    // adding to them; an --output_dir keeps what other steps wrote there.
    std::optional<int64_t> first_step;
    if (job.options.output_dir.empty()) first_step = result.step - 1;
    if (!out_dir.empty())
      summaries.emplace(out_dir, train::JobSummaries::Options{.title = job.options.experiment_name + " eval",
                                                              .first_step = first_step});
    result.eval_metrics =
        run_evals(job, eval_step, variables, inputs, result.step, summaries ? &*summaries : nullptr, nullptr);
    if (summaries) summaries->close();
  } else if (job.chief()) {  // decoding is the chief's alone
    PAX_CHECK(!job.exp.decode_inputs.empty(),
              "--mode=decode: the experiment has no decode inputs (decode_inputs is empty)");
    std::vector<std::unique_ptr<data::BaseInput>> inputs;
    for (const HParamsPtr& p : job.exp.decode_inputs) inputs.push_back(data::build_input(p));
    result.decode_files = run_decodes(job, variables, inputs, result.step, nullptr, out_dir);
  }
  dist::process_group().meet_after(eval ? "eval" : "decoding");
  return result;
}

// The mesh, the processes it asks for, and the train state each of them
// holds: its blocks of the parameters and optimizer state split over the
// data axis (fully sharded), the whole of it otherwise.
std::string mesh_summary(const ExperimentConfig& exp, const nn::BaseModel& model) {
  const TrainSettings& t = exp.train_settings();
  std::ostringstream s;
  const int64_t processes = mesh_processes(t);
  if (t.ici_mesh_shape.empty() && t.dcn_mesh_shape.empty()) {
    s << "mesh: not set (train.ici_mesh_shape = []): data parallel over any number of processes\n";
  } else {
    s << "mesh: " << describe_mesh(t) << " (mpirun -np " << processes << ")\n";
  }
  auto state_bytes = [&](const nn::FsdpOptions& fsdp, const nn::TensorParallelOptions& tp,
                         const nn::PipelineOptions& stage) {
    const train::TrainStep step(
        model, exp.learner_hparams(),
        {.data_parallel_axis = "replica,data", .summaries = false, .fsdp = fsdp, .tp = tp, .stage = stage});
    return tree_bytes(step.state_shapes(fsdp, tp, stage));
  };
  const double whole = state_bytes({}, {}, {});
  const int64_t stage = mesh_axis_size(t, "stage");
  const int64_t data = mesh_axis_size(t, "data"), mdl = mesh_axis_size(t, "mdl");
  if (data <= 1 && mdl <= 1 && stage <= 1) {
    s << "train state per process: " << format_bytes(whole)
      << " (parameters and optimizer state; the mesh's data, mdl and stage axes are 1, so every process holds all of "
         "it)\n";
    return s.str();
  }
  try {
    const double mine = state_bytes({.axis = "data", .size = data, .min_elements = t.fsdp_min_elements},
                                    {.axis = "mdl", .size = mdl}, {.axis = "stage", .size = stage});
    s << "train state per process: " << format_bytes(mine) << " of " << format_bytes(whole)
      << " (parameters and optimizer state";
    if (stage > 1) {
      const double staged = state_bytes({}, {}, {.axis = "stage", .size = stage});
      s << "; a pipelined Repeat's layers split over the stage axis of " << stage
        << (staged < whole ? "" : " (this model has no pipelined Repeat: every stage would hold all layers)");
    }
    if (mdl > 1)
      s << "; attention heads, feed-forward hidden widths and (where it divides) the vocabulary split over the mdl "
           "axis of "
        << mdl;
    if (data > 1)
      s << "; split over the data axis of " << data << ": fully sharded; small arrays and arrays no dimension of which "
        << data << " divides stay whole"
        << (mdl > 1 ? ", and blocks over mdl split only along their mdl dimension" : "");
    s << ")\n";
  } catch (const Error& e) {
    s << "train state per process: " << format_bytes(whole) << " whole; not shardable as set: " << e.what() << "\n";
  }
  return s.str();
}

std::string human_count(double n) {
  return format_scaled(n, {{1e18, "E"}, {1e15, "P"}, {1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "K"}}, 2);
}

}  // namespace

RunResult run_experiment(const Config& config, const RunOptions& options) {
  check_complete(config.root(), "run_experiment");
  if (options.mode == Mode::inspect) {
    if (dist::process_index() == 0) (options.out ? *options.out : std::cout) << inspect_experiment(config);
    return {};
  }
  Job job(config, options);
  return options.mode == Mode::train ? TrainingLoop(job).run() : run_restored(job);
}

std::pair<int64_t, int64_t> parse_profile_steps(const std::string& text) {
  const size_t colon = text.find(':');
  int64_t first = 0, last = 0;
  bool ok = colon != std::string::npos;
  try {
    size_t used = 0;
    if (ok) first = std::stoll(text.substr(0, colon), &used), ok = used == colon;
    if (ok) last = std::stoll(text.substr(colon + 1), &used), ok = used == text.size() - colon - 1;
  } catch (const std::exception&) {
    ok = false;
  }
  PAX_CHECK(ok && first >= 1 && first <= last, "--profile_steps '", text,
            "' is not START:END with 1 <= START <= END (for example 10:12)");
  return {first, last};
}

std::string inspect_experiment(const Config& config) {
  const auto& exp = config.as<ExperimentConfig>();
  validate(exp);
  auto layer = nn::build_layer(exp.model);
  const auto* model = dynamic_cast<const nn::BaseModel*>(layer.get());
  std::ostringstream s;
  const int64_t params = nn::count_parameters(*model);
  s << "model: " << exp.model->type_name() << "\n";
  s << "parameters: " << params << " (" << human_count(double(params)) << ")\n";
  for (const std::string collection : {"batch_stats", "non_trainable"}) {
    const int64_t n = nn::count_parameters(*model, collection);
    if (n > 0) s << collection << ": " << n << "\n";
  }
  // The mesh's data shards when it is set (whatever the processes here),
  // else the processes of this call (or num_infeed_hosts).
  const TrainSettings& t = exp.train_settings();
  const StepBatch rows = step_batch(t, exp.train_input, dist::process_count());
  const int64_t global_batch = rows.global;
  s << "batch: " << rows.per_process << " per process x " << rows.data_shards;
  if (!t.ici_mesh_shape.empty() || !t.dcn_mesh_shape.empty()) {
    const int64_t devices = mesh_processes(t);
    s << (rows.data_shards == 1 ? " data shard" : " data shards") << " = global batch " << global_batch
      << " (the mesh's " << devices << (devices == 1 ? " device" : " devices")
      << (devices == rows.data_shards ? "" : ", whose processes differing only on mdl or stage read the same rows")
      << ")\n";
  } else if (static_cast<const data::BaseInput::HParams&>(*exp.train_input).num_infeed_hosts > 1) {
    s << " infeed hosts = global batch " << global_batch << "\n";
  } else {
    s << (rows.data_shards == 1 ? " process" : " processes") << " = global batch " << global_batch
      << " (no mesh: the global batch grows with the processes of the run)\n";
  }
  if (auto* lm = dynamic_cast<const nn::LanguageModel*>(model)) {
    const int64_t seq = std::stoll(config.get("train_input.seq_length"));
    const double per_token = lm->flops_per_token(seq);
    s << "training FLOPs per token: " << human_count(per_token) << " (6N + 12 L H T, T = " << seq << ")\n";
    s << "training FLOPs per step: " << human_count(per_token * double(seq * global_batch)) << " (global batch "
      << global_batch << " x " << seq << " tokens)\n";
  } else {
    // The FLOPs of a non-LM model are traced from one batch of its input.
    auto train_input = data::build_input(exp.train_input);
    Tree batch = train_input->get_next();
    const double per_example = model->flops_per_example(batch);
    s << "training FLOPs per example: " << human_count(per_example) << "\n";
    s << "training FLOPs per step: " << human_count(per_example * double(global_batch)) << " (global batch "
      << global_batch << ")\n";
  }
  s << mesh_summary(exp, *model);
  s << "config:\n" << config.str(false);
  return s.str();
}

}  // namespace pax::experiments
