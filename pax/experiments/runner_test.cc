// End to end: lm.KjvTransformerTiny trains (its loss falls, checkpoints,
// summaries and samples are written), a run stopped and resumed continues
// with the same data stream and the same losses as an uninterrupted one,
// eval and decode restore a checkpoint, inspect works without weights, and
// a missing checkpoint is an error.
#include "pax/experiments/runner.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <numeric>
#include <sstream>

#include "pax/experiments/experiment.h"
#include "pax/data/file_io.h"
#include "pax/testing/temp_path.h"
#include "pax/testing/testing.h"
#include "pax/train/checkpoint.h"
#include "pax/train/flax_msgpack.h"
#include "pax/train/trace_file.h"
#include "pax/train/summary.h"

namespace pax::experiments {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) { return testing::fresh_test_path("runner_test", name); }

// A small, quick version of the tiny experiment.
Config tiny_config(int64_t steps) {
  Config cfg = make_experiment("lm.KjvTransformerTiny")->config();
  cfg.apply_overrides({"train.num_train_steps=" + std::to_string(steps), "train.summary_interval_steps=1",
                       "train.save_interval_steps=4", "train.eval_interval_steps=0", "train.decode_interval_steps=0",
                       "train.async_checkpoint=true"});
  return cfg;
}

RunOptions options(const std::string& job_dir, Mode mode = Mode::train) {
  static std::ostringstream sink;
  RunOptions o;
  o.job_dir = job_dir;
  o.mode = mode;
  o.peak_flops = 1e11;
  o.out = &sink;
  return o;
}

// Train losses by step, from metrics.jsonl.
std::map<int64_t, double> train_losses(const std::string& job_dir) {
  std::map<int64_t, double> losses;
  for (const train::StepMetrics& m : train::read_metrics_jsonl(job_dir + "/metrics.jsonl"))
    if (m.split == train::kTrainSplit) losses[m.step] = m.metrics.at("total_loss");
  return losses;
}

TEST(Runner, TinyTrainsAndWritesItsJobDirectory) {
  const std::string dir = fresh_dir("train");
  Config cfg = make_experiment("lm.KjvTransformerTiny")->config();
  RunResult r = run_experiment(cfg, options(dir));
  const int64_t total = cfg.as<ExperimentConfig>().train_settings().num_train_steps;
  EXPECT_EQ(r.step, total);
  EXPECT_FALSE(r.interrupted);
  std::map<int64_t, double> losses = train_losses(dir);
  ASSERT_GE(losses.size(), 3u);
  EXPECT_LT(losses.rbegin()->second, losses.begin()->second - 1.0) << "the loss must fall";
  EXPECT_TRUE(std::isfinite(losses.rbegin()->second));
  for (const char* f : {"config.json", "model_summary.txt", "metrics.jsonl", "report.html"})
    EXPECT_TRUE(fs::exists(fs::path(dir) / f)) << f;
  EXPECT_EQ(train::available_steps(dir + "/checkpoints").back(), total);
  EXPECT_FALSE(fs::is_empty(fs::path(dir) / "summaries" / "train"));
  EXPECT_FALSE(fs::is_empty(fs::path(dir) / "summaries" / "eval_test_validation"));
  // The layers' summaries reach metrics.jsonl (scalars) and the event file
  // (scalars and the model's histogram of per-sequence losses).
  const train::StepMetrics last_train = [&] {
    train::StepMetrics last;
    for (const train::StepMetrics& m : train::read_metrics_jsonl(dir + "/metrics.jsonl"))
      if (m.split == train::kTrainSplit) last = m;
    return last;
  }();
  // The fraction of the steps' time spent waiting for batches.
  ASSERT_TRUE(last_train.input_wait.has_value());
  EXPECT_GE(*last_train.input_wait, 0.0);
  EXPECT_LE(*last_train.input_wait, 1.0);

  int entropies = 0, grad_norms = 0, param_norms = 0;
  for (const auto& [tag, value] : last_train.summaries) {
    EXPECT_TRUE(std::isfinite(value)) << tag;
    if (tag.find("attention_entropy") != std::string::npos) {
      ++entropies;
      EXPECT_GT(value, 0.0) << tag;
      EXPECT_LT(value, std::log(4096.0)) << tag << ": at most the log of the keys attended to";
    }
    grad_norms += tag.starts_with("grad_norm/");
    param_norms += tag.starts_with("param_norm/") && value > 0;
  }
  EXPECT_GE(entropies, 2) << "one per layer of the tiny model";
  EXPECT_GT(grad_norms, 4);
  EXPECT_EQ(param_norms, grad_norms);
  // Eval runs write the layers' summaries too (TensorBoard's eval_test_validation).
  int eval_entropies = 0;
  for (const train::StepMetrics& m : train::read_metrics_jsonl(dir + "/metrics.jsonl"))
    if (m.split == train::eval_split("validation"))
      for (const auto& [tag, value] : m.summaries)
        eval_entropies += tag.find("attention_entropy") != std::string::npos && std::isfinite(value);
  EXPECT_GE(eval_entropies, 2) << "one per layer, at every eval";
  const std::string events = [&] {
    std::string all;
    for (const auto& f : fs::directory_iterator(fs::path(dir) / "summaries" / "train"))
      all += data::read_file(f.path());
    return all;
  }();
  EXPECT_NE(events.find("sequence_xent"), std::string::npos) << "the histogram's tag";
  EXPECT_NE(events.find("attention_entropy"), std::string::npos);
  ASSERT_EQ(r.eval_metrics.count("validation"), 1u);
  EXPECT_TRUE(std::isfinite(r.eval_metrics["validation"].at("log_pplx")));
  ASSERT_EQ(r.decode_files.count("samples"), 1u);
  EXPECT_TRUE(fs::exists(r.decode_files["samples"]));
  // The saved config runs again as is.
  Config saved = Config::from_json(data::read_file(dir + "/config.json"));
  EXPECT_EQ(saved.to_json(), cfg.to_json());

  // eval and decode restore the final checkpoint and reproduce the final eval.
  RunResult e = run_experiment(cfg, options(dir, Mode::eval));
  EXPECT_EQ(e.step, total);
  EXPECT_DOUBLE_EQ(e.eval_metrics["validation"].at("log_pplx"), r.eval_metrics["validation"].at("log_pplx"));
  RunResult d = run_experiment(cfg, options(dir, Mode::decode));
  EXPECT_EQ(data::read_file(d.decode_files.at("samples")), data::read_file(r.decode_files.at("samples")));
  // An explicit step that exists, and one that does not.
  RunOptions at = options(dir, Mode::eval);
  at.restore_step = train::available_steps(dir + "/checkpoints").front();
  EXPECT_EQ(run_experiment(cfg, at).step, *at.restore_step);
  at.restore_step = 12345;
  EXPECT_PAX_ERROR(run_experiment(cfg, at), "--restore_step=12345: no such checkpoint");
}

// A learning rate that overflows: the skipped steps are counted in
// metrics.jsonl, and the run stops after max_consecutive_nonfinite_steps of
// them; with skipping off it stops at the first one, before a save.
// --profile_steps 2:3 writes one trace of those steps where TensorBoard's
// profile plugin looks: <job>/summaries/train/plugins/profile/<run>/<host>.trace.json.gz.
TEST(Runner, ProfileStepsWriteATraceWhereTensorBoardLooks) {
  const std::string dir = fresh_dir("profile");
  RunOptions o = options(dir);
  o.profile_steps = std::make_pair(int64_t(2), int64_t(3));
  run_experiment(tiny_config(4), o);
  std::vector<fs::path> traces;
  for (const auto& entry : fs::recursive_directory_iterator(fs::path(dir) / "summaries/train/plugins/profile"))
    if (entry.path().string().ends_with(".trace.json.gz")) traces.push_back(entry.path());
  ASSERT_EQ(traces.size(), 1u);
  const std::string doc = trace::read_gzipped(traces[0].string());
  for (const char* want : {"\"train step 2\"", "\"train step 3\"", "\"cat\": \"gemm\"", "\"cat\": \"input\""})
    EXPECT_NE(doc.find(want), std::string::npos) << want;
  for (const char* not_in : {"\"train step 1\"", "\"train step 4\""})
    EXPECT_EQ(doc.find(not_in), std::string::npos) << not_in;
}

// train.init_from: a run started from another run's exported params begins
// where that run's loss was, far below a random start's.
TEST(Runner, InitFromStartsFromExportedParams) {
  const std::string first = fresh_dir("init_first"), second = fresh_dir("init_second");
  run_experiment(tiny_config(20), options(first));
  const std::string params = first + "/params.msgpack";
  EXPECT_EQ(train::export_flax_checkpoint(first + "/checkpoints", params, false), 20);
  Config cfg = tiny_config(1);
  cfg.apply_overrides({"train.init_from=" + params});
  run_experiment(cfg, options(second));
  const double started = train_losses(second).at(1), random_start = train_losses(first).at(1);
  EXPECT_LT(started, random_start - 1.0) << "from the params: " << started << ", from random: " << random_start;
  // A file of other params is refused, naming what differs.
  Config other = tiny_config(1);
  other.apply_overrides({"train.init_from=" + params, "model.lm_tpl.model_dims=32"});
  EXPECT_PAX_ERROR(run_experiment(other, options(fresh_dir("init_other"))), "shapes that differ");
}

TEST(Runner, ProfileStepsMustBeAWindow) {
  EXPECT_EQ(parse_profile_steps("10:12"), std::make_pair(int64_t(10), int64_t(12)));
  for (const char* bad : {"3:2", "0:4", "2", "a:b", "2:3x", ""})
    EXPECT_PAX_ERROR(parse_profile_steps(bad), "is not START:END with 1 <= START <= END");
}

TEST(Runner, NonFiniteStepsAreCountedAndStopTheRun) {
  const std::string dir = fresh_dir("nonfinite");
  Config cfg = tiny_config(40);
  cfg.apply_overrides({"learner.optimizer.learning_rate=1e30", "learner.max_consecutive_nonfinite_steps=3",
                       "train.save_interval_steps=1", "train.async_checkpoint=false"});
  EXPECT_PAX_ERROR(run_experiment(cfg, options(dir)),
                   "3 consecutive steps with a non-finite loss or gradients were skipped");
  double skipped = 0;
  for (const train::StepMetrics& m : train::read_metrics_jsonl(dir + "/metrics.jsonl")) {
    ASSERT_TRUE(m.skipped_steps.has_value()) << "step " << m.step;
    skipped += *m.skipped_steps;
  }
  EXPECT_GE(skipped, 1.0) << "the skipped steps before the last one appear in metrics.jsonl";

  const std::string off = fresh_dir("nonfinite_off");
  cfg.apply_overrides({"learner.skip_nonfinite_steps=false"});
  EXPECT_PAX_ERROR(run_experiment(cfg, options(off)), "learner.skip_nonfinite_steps is false");
  const std::vector<train::StepMetrics> lines = train::read_metrics_jsonl(off + "/metrics.jsonl");
  const int64_t last_logged = lines.empty() ? 0 : lines.back().step;
  const std::vector<int64_t> saved = train::available_steps(off + "/checkpoints");
  if (!saved.empty()) EXPECT_LE(saved.back(), last_logged) << "the non-finite step must not be saved";
  for (const train::StepMetrics& m : lines) EXPECT_TRUE(std::isfinite(m.metrics.at("total_loss"))) << m.step;

  cfg.apply_overrides({"learner.max_consecutive_nonfinite_steps=-1"});
  EXPECT_PAX_ERROR(run_experiment(cfg, options(fresh_dir("nonfinite_bad"))),
                   "learner.max_consecutive_nonfinite_steps = -1 is out of range");
}

// A run that ended after its last checkpoint (a crash) replays the steps
// since then when resumed: metrics.jsonl then holds every step once.
TEST(Runner, AResumedRunLogsEachStepOnce) {
  const std::string dir = fresh_dir("replay");
  run_experiment(tiny_config(10), options(dir));
  // As if the process had died after logging step 10 but before committing it.
  fs::remove_all(fs::path(dir) / "checkpoints" / "checkpoint_00000010");
  ASSERT_EQ(train::available_steps(dir + "/checkpoints").back(), 8);
  run_experiment(tiny_config(12), options(dir));
  std::vector<int64_t> steps;
  for (const train::StepMetrics& m : train::read_metrics_jsonl(dir + "/metrics.jsonl"))
    if (m.split == train::kTrainSplit) steps.push_back(m.step);
  std::vector<int64_t> want(12);
  std::iota(want.begin(), want.end(), int64_t(1));
  EXPECT_EQ(steps, want);
}

// A config that cannot fit is refused before anything large is allocated,
// with the numbers and the field to change.
TEST(Runner, AConfigThatCannotFitIsRefusedFirst) {
  Config cfg = tiny_config(2);
  cfg.apply_overrides({"train_input.batch_size=1000000000"});
  EXPECT_PAX_ERROR(run_experiment(cfg, options(fresh_dir("too_big"))), "reduce train_input.batch_size (1000000000)");
}

// The eval step's activations count too: an eval batch far too large is
// refused at the start of training and of --mode=eval, not at the first eval.
TEST(Runner, AnEvalBatchThatCannotFitIsRefusedFirst) {
  Config cfg = tiny_config(2);
  cfg.apply_overrides({"train.eval_interval_steps=1", "eval_inputs[0].batch_size=1000000000"});
  EXPECT_PAX_ERROR(run_experiment(cfg, options(fresh_dir("eval_too_big"))),
                   "reduce train_input.batch_size (8), eval_inputs[0].batch_size (1000000000)");
  const std::string dir = fresh_dir("eval_mode_too_big");
  run_experiment(tiny_config(2), options(dir));
  Config eval_cfg = tiny_config(2);
  eval_cfg.apply_overrides({"eval_inputs[0].batch_size=1000000000"});
  EXPECT_PAX_ERROR(run_experiment(eval_cfg, options(dir, Mode::eval)), "eval_inputs[0].batch_size (1000000000)");
}

// Decoding's key/value caches count too (4 prefixes x 1e9 positions x 1 KB):
// refused before training and before --mode=decode, naming the fields.
TEST(Runner, ADecodeCacheThatCannotFitIsRefusedFirst) {
  Config cfg = tiny_config(2);
  cfg.apply_overrides({"train.decode_interval_steps=1", "model.max_decode_length=1000000000"});
  EXPECT_PAX_ERROR(run_experiment(cfg, options(fresh_dir("decode_too_big"))),
                   "decoding's key/value caches 4.1 TB) and");
  EXPECT_PAX_ERROR(run_experiment(cfg, options(fresh_dir("decode_too_big"))),
                   "or model.max_decode_length (1000000000)");
  const std::string dir = fresh_dir("decode_mode_too_big");
  run_experiment(tiny_config(2), options(dir));
  Config decode_cfg = tiny_config(2);
  decode_cfg.apply_overrides({"model.max_decode_length=1000000000"});
  EXPECT_PAX_ERROR(run_experiment(decode_cfg, options(dir, Mode::decode)), "decoding's key/value caches");
}

TEST(Runner, StoppedAndResumedRunMatchesAnUninterruptedOne) {
  const int64_t steps = 14;
  const std::string straight = fresh_dir("straight"), resumed = fresh_dir("resumed");
  run_experiment(tiny_config(steps), options(straight));

  // Stop after step 6 (a SIGINT would do the same), then run the same command again.
  RunOptions first = options(resumed);
  int polls = 0;
  first.stop_requested = [&] { return ++polls >= 6; };
  RunResult r1 = run_experiment(tiny_config(steps), first);
  EXPECT_TRUE(r1.interrupted);
  EXPECT_EQ(r1.step, 6);
  EXPECT_EQ(train::available_steps(resumed + "/checkpoints").back(), 6);
  RunResult r2 = run_experiment(tiny_config(steps), options(resumed));
  EXPECT_EQ(r2.step, steps);

  std::map<int64_t, double> a = train_losses(straight), b = train_losses(resumed);
  ASSERT_EQ(a.size(), size_t(steps));
  ASSERT_EQ(b.size(), size_t(steps));
  for (int64_t s = 1; s <= steps; ++s) EXPECT_EQ(a[s], b[s]) << "step " << s;  // bit for bit
}

TEST(Runner, WarnsOnceWhenMfuExceedsTheDeclaredPeak) {
  std::ostringstream out;
  RunOptions o = options(fresh_dir("mfu"));
  o.peak_flops = 1e3;  // far below any real machine: MFU well above 100%
  o.out = &out;
  run_experiment(tiny_config(3), o);
  const std::string text = out.str();
  const size_t at = text.find("MFU above 100%: the peak of 0.0 GFLOP/s is too low");
  EXPECT_NE(at, std::string::npos) << text;
  EXPECT_EQ(text.find("MFU above 100%", at + 1), std::string::npos) << "warned more than once: " << text;
}

TEST(Runner, EarlyStoppingEndsTheRunAndIsSaved) {
  const std::string dir = fresh_dir("early");
  Config cfg = tiny_config(40);
  // No evaluation can improve by 100 nats: the second one stops the run.
  cfg.apply_overrides({"train.eval_interval_steps=5", "train.early_stopping_metric=validation/log_pplx",
                       "train.early_stopping_min_delta=100", "train.early_stopping_patience=0"});
  RunResult r = run_experiment(cfg, options(dir));
  EXPECT_TRUE(r.early_stopped);
  EXPECT_EQ(r.step, 10);
  EXPECT_EQ(train::available_steps(dir + "/checkpoints").back(), 10);
  // A rerun restores the stopper, which has stopped: nothing more is trained.
  RunResult again = run_experiment(cfg, options(dir));
  EXPECT_TRUE(again.early_stopped);
  EXPECT_EQ(again.step, 10);
  EXPECT_EQ(train::available_steps(dir + "/checkpoints").back(), 10);
  cfg.apply_overrides({"train.early_stopping_metric=validation/no_such_metric"});
  EXPECT_PAX_ERROR(run_experiment(cfg, options(fresh_dir("early2"))), "no_such_metric");
}

// A checkpoint saved at an eval step holds the early-stopping state of that
// eval: a run interrupted there and resumed stops where an uninterrupted one does.
TEST(Runner, CheckpointAtAnEvalStepHoldsThatEvalsStoppingState) {
  Config cfg = tiny_config(40);
  // Evals at 5, 10, 15, ...: the first sets the best value, none improves by
  // 100 nats, and the third (two without improvement) stops the run.
  cfg.apply_overrides({"train.eval_interval_steps=5", "train.save_interval_steps=5",
                       "train.early_stopping_metric=validation/log_pplx", "train.early_stopping_min_delta=100",
                       "train.early_stopping_patience=1"});
  EXPECT_EQ(run_experiment(cfg, options(fresh_dir("stop_straight"))).step, 15);

  const std::string dir = fresh_dir("stop_resumed");
  RunOptions first = options(dir);
  int polls = 0;
  first.stop_requested = [&] { return ++polls >= 10; };
  RunResult r1 = run_experiment(cfg, first);
  EXPECT_TRUE(r1.interrupted);
  EXPECT_EQ(r1.step, 10);
  RunResult r2 = run_experiment(cfg, options(dir));
  EXPECT_TRUE(r2.early_stopped);
  EXPECT_EQ(r2.step, 15);
}

TEST(Runner, EvalWithoutCheckpointAndInspect) {
  const std::string dir = fresh_dir("empty");
  EXPECT_PAX_ERROR(run_experiment(tiny_config(2), options(dir, Mode::eval)), "no checkpoint in");
  std::string text = inspect_experiment(make_experiment("lm.C4SpmdGpt3AdamOrgHP")->config());
  EXPECT_NE(text.find("parameters: 174780470353"), std::string::npos) << text;
  EXPECT_NE(text.find("training FLOPs per token"), std::string::npos);
  text = inspect_experiment(make_experiment("lm.LmCloudSpmd2B")->config());
  EXPECT_NE(text.find("(2."), std::string::npos) << text;  // about 2B parameters
}

// The mesh is checked against the process count before any work: nothing
// is written to the job directory.
TEST(Runner, AMeshForOtherProcessCountsIsRefusedBeforeAnyWork) {
  const std::string dir = fresh_dir("mesh");
  Config cfg = tiny_config(2);
  cfg.apply_overrides({"train.ici_mesh_shape=[1,2,1]", "train.dcn_mesh_shape=[2,1,1]"});
  EXPECT_PAX_ERROR(run_experiment(cfg, options(dir)), "needs 4 processes, but this run has 1: run it as mpirun -np 4");
  EXPECT_FALSE(fs::exists(dir));
  cfg.apply_overrides({"train.ici_mesh_shape=[1,1,2]", "train.dcn_mesh_shape=[]"});
  EXPECT_PAX_ERROR(run_experiment(cfg, options(dir)), "needs 2 processes, but this run has 1");
  EXPECT_FALSE(fs::exists(dir));
  cfg.apply_overrides({"train.ici_mesh_shape=[2,1,1,1]"});
  EXPECT_PAX_ERROR(run_experiment(cfg, options(dir)), "needs 2 processes, but this run has 1");
  EXPECT_FALSE(fs::exists(dir));
  cfg.apply_overrides({"train.ici_mesh_shape=[1,1,1]"});
  EXPECT_EQ(run_experiment(cfg, options(dir)).step, 2);
}

// The seed's configs at full size: inspect prints paxml's parameter counts
// (the same order of magnitude: biases and the tied embedding differ), the
// mesh, and the train state each process would hold.
TEST(Runner, SeedPortsInspectAtFullSize) {
  struct Port {
    const char* name;
    const char* parameters;
    const char* mesh;
    bool repeated;
  };
  for (const Port& p : std::vector<Port>{
           {"lm.C4Spmd22BAdam2xv4_128", "parameters: 21948477440 (21.95B)",
            "mesh: ICI [1, 64, 1] x DCN [2, 1, 1] = [2, 64, 1] (replica, data, mdl): 128 processes (mpirun -np 128)",
            true},
           // paxml's docstring says 1.3B (GPT-3 XL); its dims (24 x 3072) make 2.9B.
           {"lm.C4SpmdPipelineGpt3SmallAdam64Replicas", "parameters: 2923645009 (2.92B)",
            "mesh: ICI [4, 1, 4, 4] x DCN [] = [4, 1, 4, 4] (stage, replica, data, mdl): 64 processes (mpirun -np 64)",
            true},
           {"lm.LmCloudSpmd2BLimitSteps", "parameters: 2137492736 (2.14B)",
            "mesh: ICI [1, 4, 1] x DCN [] = [1, 4, 1] (replica, data, mdl): 4 processes (mpirun -np 4)", true},
           {"lm.LmCloudTransformerAdamLimitSteps", "parameters: 158723328 (158.72M)", "mesh: not set", false}}) {
    SCOPED_TRACE(p.name);
    const Config cfg = make_experiment(p.name)->config();
    // Repeat with remat (SAVE_NOTHING) where paxml sets USE_REPEATED_LAYER.
    const std::string stack = "model.lm_tpl.stacked_transformer_tpl";
    EXPECT_EQ(cfg.get(stack), p.repeated ? "Repeat" : "StackedTransformer");
    if (p.repeated) EXPECT_EQ(cfg.get(stack + ".checkpoint_policy"), "nothing_saveable");
    const std::string text = inspect_experiment(cfg);
    EXPECT_NE(text.find(p.parameters), std::string::npos) << text;
    EXPECT_NE(text.find(p.mesh), std::string::npos) << text;
    EXPECT_NE(text.find("train state per process: "), std::string::npos) << text;
  }
  const std::string pipeline =
      inspect_experiment(make_experiment("lm.C4SpmdPipelineGpt3SmallAdam64Replicas")->config());
  // Its stage axis of 4 splits the 24 blocks into stages of 6, its mdl axis
  // of 4 splits their heads and widths, and data splits those blocks again.
  EXPECT_NE(pipeline.find("a pipelined Repeat's layers split over the stage axis of 4; attention heads, feed-forward "
                          "hidden widths and (where it divides) the vocabulary split over the mdl axis of 4; split "
                          "over the data axis of 4"),
            std::string::npos)
      << pipeline;
  EXPECT_EQ(pipeline.find("no pipelined Repeat"), std::string::npos) << pipeline;
  // Its schedule: 128 rows in microbatches of 16 over 4 stages.
  EXPECT_NE(pipeline.find("pipeline: Repeat 'lm/transformer': 4 stages of 6 repetitions, 8 microbatches of 16 rows, 11 "
                          "iterations a step, 3 of them each stage's idle bubble (27%)\n"),
            std::string::npos)
      << pipeline;
  Config delayed = make_experiment("lm.C4SpmdPipelineGpt3SmallAdam64Replicas")->config();
  delayed.apply_overrides({"model.lm_tpl.stacked_transformer_tpl.delay_activation_forwarding=true"});
  EXPECT_NE(inspect_experiment(delayed).find("14 iterations a step, 6 of them each stage's idle bubble (43%), each "
                                             "shift sent during the next iteration"),
            std::string::npos);
  delayed.apply_overrides({"model.lm_tpl.stacked_transformer_tpl.microbatch_size=48"});
  EXPECT_NE(inspect_experiment(delayed).find("the batch of 128 rows does not split into microbatches of 48"),
            std::string::npos);
}

// An eval input's score metrics and a decode input's predict metrics
// (SeqIO's metric functions) are computed in the runs and summarised under
// their splits; the log-likelihood agrees with the model's own cross entropy.
TEST(Runner, InputsDeclareTheirOwnEvalAndDecodeMetrics) {
  const std::string dir = fresh_dir("seqio_metrics");
  Config cfg = tiny_config(4);
  cfg.apply_overrides({"train.eval_interval_steps=4", "train.decode_interval_steps=4",
                       "eval_inputs[0].score_metrics=[log_likelihood]",
                       "decode_inputs[0].predict_metrics=[exact_match,token_accuracy]",
                       "decode_inputs[0].targets=[\" was the Word\",\" unto Moses\",\" I shall not want\","
                       "\" poor in spirit\",\" and said\",\" the world\"]"});
  run_experiment(cfg, options(dir));
  std::optional<train::StepMetrics> eval, decode;
  for (const train::StepMetrics& m : train::read_metrics_jsonl(dir + "/metrics.jsonl")) {
    if (m.split == train::eval_split("validation")) eval = m;
    if (m.split == "decode_test_samples") decode = m;
  }
  ASSERT_TRUE(eval && decode);
  // log-likelihood = -(tokens per sequence) x the mean cross entropy, with
  // between 1 and 64 real tokens in a validation sequence.
  const double tokens = -eval->metrics.at("log_likelihood") / eval->metrics.at("avg_xent");
  EXPECT_GT(tokens, 1.0);
  EXPECT_LE(tokens, 64.0 + 1e-6);
  for (const char* name : {"exact_match", "token_accuracy"}) {
    EXPECT_GE(decode->metrics.at(name), 0.0) << name;
    EXPECT_LE(decode->metrics.at(name), 100.0) << name;
  }
  EXPECT_TRUE(fs::exists(fs::path(dir) / "summaries" / "decode_test_samples"));
  Config bad = tiny_config(4);
  bad.apply_overrides({"decode_inputs[0].predict_metrics=[exact_mach]"});
  EXPECT_PAX_ERROR(run_experiment(bad, options(fresh_dir("seqio_bad"))),
                   "decode_inputs[0].predict_metrics: unknown metric 'exact_mach'");
}

// The seed's 16B configuration at full size on its [1, 16, 2] mesh: each
// process holds at most 1.25x its 1/32 share of the train state, the
// attention weights (24 heads per mdl block, which 16 does not divide) split
// over data along their model dimension.
TEST(Runner, InspectOf16BHoldsAboutAThirtySecondOfTheStatePerProcess) {
  const std::string text = inspect_experiment(make_experiment("lm.C4Spmd16BAdam32Replicas")->config());
  const size_t at = text.find("train state per process: ");
  ASSERT_NE(at, std::string::npos) << text;
  double mine = 0, whole = 0;
  char mine_unit[8] = {}, whole_unit[8] = {};
  ASSERT_EQ(std::sscanf(text.c_str() + at, "train state per process: %lf %7s of %lf %7s", &mine, mine_unit, &whole,
                        whole_unit),
            4)
      << text.substr(at, 120);
  ASSERT_EQ(std::string(mine_unit), std::string(whole_unit)) << text.substr(at, 120);
  EXPECT_LE(mine, 1.25 * whole / 32) << text.substr(at, 200);
  EXPECT_NE(text.find("else along another dimension (two-dimensional"), std::string::npos) << text.substr(at, 400);
}

// --mode=inspect of a multislice config names both meshes, the slices'
// ranks and where the first ranks sit.
TEST(Runner, InspectPlacesTheProcessesOfAMultisliceMesh) {
  const std::string text = inspect_experiment(make_experiment("lm.C4Spmd22BAdam2xv4_128")->config());
  for (const char* line : {"mesh: ICI [1, 64, 1] x DCN [2, 1, 1] = [2, 64, 1] (replica, data, mdl): 128 processes",
                           "  slice 0 (DCN [0, 0, 0]): ranks 0-63 at [0, 0..63, 0]\n",
                           "  slice 1 (DCN [1, 0, 0]): ranks 64-127 at [1, 0..63, 0]\n",
                           "  rank 1: replica 0, data 1, mdl 0\n", "  ... 128 ranks in all\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  Config cfg = make_experiment("lm.C4Spmd22BAdam2xv4_128")->config();
  cfg.apply_overrides({"train.ici_mesh_shape=[1,1,2]", "train.dcn_mesh_shape=[2,1,1]"});
  const std::string small = inspect_experiment(cfg);
  for (const char* line :
       {"  slice 1 (DCN [1, 0, 0]): ranks 2-3 at [1, 0, 0..1]\n", "  rank 3: replica 1, data 0, mdl 1\n"})
    EXPECT_NE(small.find(line), std::string::npos) << line << "\n" << small;
}

// Scaled down with --set (the mesh set to this one process), each port
// trains a few steps.
TEST(Runner, SeedPortsTrainWhenScaledDown) {
  for (const char* name : {"lm.C4Spmd22BAdam2xv4_128", "lm.C4SpmdPipelineGpt3SmallAdam64Replicas",
                           "lm.LmCloudSpmd2BLimitSteps", "lm.LmCloudTransformerAdamLimitSteps"}) {
    SCOPED_TRACE(name);
    Config cfg = make_experiment(name)->config();
    const bool repeated = cfg.get("model.lm_tpl.stacked_transformer_tpl").find("Repeat") != std::string::npos;
    const std::string stack = std::string("model.lm_tpl.stacked_transformer_tpl") + (repeated ? ".sub_tpl" : "");
    const bool pipelined = std::string(name).find("Pipeline") != std::string::npos;  // [stage, replica, data, mdl]
    std::vector<std::string> sets = {
        "model.lm_tpl.model_dims=16",
        stack + ".num_heads=2",
        stack + ".dim_per_head=8",
        stack + ".hidden_dims=32",
        "model.lm_tpl.vocab_size=64",
        "train_input.vocab_size=64",
        "train_input.seq_length=8",
        "train_input.batch_size=2",
        "eval_inputs[0].vocab_size=64",
        "eval_inputs[0].seq_length=8",
        "eval_inputs[0].batch_size=2",
        "train.num_train_steps=3",
        "train.eval_interval_steps=3",
        "train.summary_interval_steps=1",
        "train.dcn_mesh_shape=[]",
        pipelined ? "train.ici_mesh_shape=[1,1,1,1]" : "train.ici_mesh_shape=[1,1,1]",
        repeated ? "model.lm_tpl.stacked_transformer_tpl.x_times=2" : stack + ".num_layers=2"};
    if (cfg.get("model.lm_tpl.position_emb_tpl").find("Trainable") != std::string::npos)
      sets.push_back("model.lm_tpl.position_emb_tpl.max_seq_length=8");
    if (std::string(name) == "lm.LmCloudTransformerAdamLimitSteps") sets.push_back("train.ici_mesh_shape=[]");
    cfg.apply_overrides(sets);
    const std::string dir = fresh_dir(std::string("port_") + name);
    RunResult r = run_experiment(cfg, options(dir));
    EXPECT_EQ(r.step, 3);
    EXPECT_TRUE(std::isfinite(train_losses(dir).rbegin()->second));
  }
}

}  // namespace
}  // namespace pax::experiments
