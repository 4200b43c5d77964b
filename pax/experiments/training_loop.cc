// The training loop of --mode=train and what only it uses: restoring a
// train state with its input position, the agreement of the processes after
// a step, the check of non-finite steps.
#include "pax/experiments/training_loop.h"

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
#include <fmt/ranges.h>
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

#include "pax/experiments/job.h"

namespace pax::experiments {

namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

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
                    {.sharding = job.sharding,
                     .loss_aggregator = exp_.loss_aggregator,
                     .metrics = exp_.metrics,
                     .vn = exp_.vn,
                     .summaries = settings_.layer_summaries}),
        eval_step_(*job.model, job.sharding, settings_.layer_summaries),
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
    if (!settings_.ici_mesh_shape.empty() || !settings_.dcn_mesh_shape.empty()) {
      const dist::Mesh& mesh = dist::mesh();
      std::vector<std::string> place;
      for (size_t k = 0; k < mesh.axis_names().size(); ++k)
        place.push_back(mesh.axis_names()[k] + " " + std::to_string(mesh.coordinates()[k]));
      out_ << "mesh: " << describe_mesh(settings_) << "; rank " << dist::process_index() << " at "
           << fmt::format("{}", fmt::join(place, ", ")) << "\n";
    }
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
      result_.decode_files = run_decodes(job_, variables, decode_inputs_, step_, &*progress_, job_.path("decode"),
                                         summaries_ ? &*summaries_ : nullptr);
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

}  // namespace

RunResult run_training(Job& job) { return TrainingLoop(job).run(); }

}  // namespace pax::experiments
