// The train / eval / decode / inspect modes.
#include "pax/experiments/runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <functional>
#include <iostream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "pax/core/error.h"
#include "pax/core/scaled_number.h"
#include "pax/data/base_input.h"
#include "pax/data/file_io.h"
#include "pax/dist/jax_utils.h"
#include "pax/dist/mesh.h"
#include "pax/dist/process_group.h"
#include "pax/experiments/experiment.h"
#include "pax/experiments/job.h"
#include "pax/experiments/training_loop.h"
#include "pax/experiments/job_lock.h"
#include "pax/experiments/memory_check.h"
#include "pax/experiments/mesh.h"
#include "pax/nn/models/language_model.h"
#include "pax/nn/pipeline.h"
#include "pax/nn/transformers.h"
#include "pax/ops/random.h"
#include "pax/train/checkpoint_manager.h"
#include "pax/train/eval_decode.h"
#include "pax/train/summary.h"

namespace pax::experiments {

namespace fs = std::filesystem;

namespace {

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
  train::EvalStep eval_step(*job.model, {}, job.exp.train_settings().layer_summaries);
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
    std::istringstream placement(describe_placement(t));
    for (std::string line; std::getline(placement, line);) s << "  " << line << "\n";
  }
  auto state_bytes = [&](const nn::ShardingPlan& plan) {
    const train::TrainStep step(model, exp.learner_hparams(), {.sharding = plan, .summaries = false});
    return tree_bytes(step.state_shapes(plan));
  };
  const double whole = state_bytes({});
  const int64_t stage = mesh_axis_size(t, "stage");
  const int64_t data = mesh_axis_size(t, "data"), mdl = mesh_axis_size(t, "mdl");
  if (data <= 1 && mdl <= 1 && stage <= 1) {
    s << "train state per process: " << format_bytes(whole)
      << " (parameters and optimizer state; the mesh's data, mdl and stage axes are 1, so every process holds all of "
         "it)\n";
    return s.str();
  }
  try {
    const nn::ShardingPlan plan = first_process_plan(t);
    const double mine = state_bytes(plan);
    s << "train state per process: " << format_bytes(mine) << " of " << format_bytes(whole)
      << " (parameters and optimizer state";
    if (stage > 1) {
      const double staged = state_bytes({.batch_axis = plan.batch_axis, .stage = plan.stage});
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
        << (mdl > 1 ? "; a block over mdl splits over data along its mdl dimension where " + std::to_string(data) +
                          " divides it, else along another dimension (two-dimensional, as Praxis's [data, mdl])" +
                          (stage > 1 ? std::string(" outside a pipeline stage's blocks") : std::string())
                    : "");
    s << ")\n";
  } catch (const Error& e) {
    s << "train state per process: " << format_bytes(whole) << " whole; not shardable as set: " << e.what() << "\n";
  }
  return s.str();
}

// Each pipelined Repeat's schedule under the mesh's stage axis: the
// repetitions a stage holds, the microbatches of a process's batch, and the
// share of the schedule's iterations a stage idles (the bubble).
std::string pipeline_summary(const ExperimentConfig& exp, const nn::Layer& model, int64_t rows_per_process) {
  const int64_t stages = mesh_axis_size(exp.train_settings(), "stage");
  std::ostringstream s;
  std::function<void(const nn::Layer&)> visit = [&](const nn::Layer& l) {
    if (const auto* r = dynamic_cast<const nn::Repeat*>(&l); r && r->pipelined()) {
      const auto& hp = r->hparams<nn::Repeat::HParams>();
      const std::string name = "pipeline: " + std::string(l.type_name()) + " '" + l.path() + "'";
      if (stages <= 1) {
        s << name << " runs as a plain stack of " << hp.x_times << " (the mesh has no stage axis above 1)\n";
      } else if (hp.x_times % stages != 0) {
        s << name << ": its " << hp.x_times << " repetitions do not split over the " << stages << " stages\n";
      } else {
        try {
          const int64_t m = nn::microbatch_count(rows_per_process, hp.num_microbatches, hp.microbatch_size, "");
          const int64_t iterations = nn::pipeline_iterations(m, stages, hp.delay_activation_forwarding);
          s << name << ": " << stages << " stages of " << hp.x_times / stages << " repetitions, " << m
            << " microbatches of " << rows_per_process / m << " rows, " << iterations << " iterations a step, "
            << iterations - m << " of them each stage's idle bubble ("
            << fmt::format("{:.0f}", 100.0 * double(iterations - m) / double(iterations)) << "%)"
            << (hp.delay_activation_forwarding ? ", each shift sent during the next iteration" : "") << "\n";
        } catch (const Error& e) {
          s << name << ": " << e.what() << "\n";
        }
      }
      return;  // a pipelined Repeat holds no other
    }
    for (const auto& [child_name, child] : l.children()) visit(*child);
  };
  visit(model);
  return s.str();
}

std::string human_count(double n) {
  return format_scaled(n, {{1e18, "E"}, {1e15, "P"}, {1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "K"}}, 2);
}

}  // namespace

RunResult run_experiment(const Config& config, const RunOptions& options) {
  check_complete(config.root(), "run_experiment");
  if (dist::process_index() == 0)
    for (const std::string& w : config_warnings(config.as<ExperimentConfig>()))
      (options.out ? *options.out : std::cerr) << "warning: " << w << "\n";
  if (options.mode == Mode::inspect) {
    if (dist::process_index() == 0) (options.out ? *options.out : std::cout) << inspect_experiment(config);
    return {};
  }
  Job job(config, options);
  return options.mode == Mode::train ? run_training(job) : run_restored(job);
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
  s << pipeline_summary(exp, *model, rows.per_process);
  s << "config:\n" << config.str(false);
  return s.str();
}

}  // namespace pax::experiments
