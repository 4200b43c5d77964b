// Data parallelism end to end, through the paxcc command under mpirun:
//  - 2 processes with per-host batch B train to the same losses and
//    parameters as 1 process with batch 2B over 20 steps;
//  - an eval over one whole epoch gives the same metrics on 1 and 2 processes
//    (each evaluates its shard, the sums are combined);
//  - a 2-process run stopped after 10 steps resumes to the same losses as an
//    uninterrupted one, and a single process refuses its checkpoint.
// The single-process references run in this process. ctest's
// dist_mpirun_data_parallel sets $PAX_TEST_PAXCC and $PAX_TEST_MPIRUN; the
// test is skipped without them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <sstream>
#include <string>
#include <vector>

#include "pax/data/file_io.h"
#include "pax/experiments/experiment.h"
#include "pax/experiments/runner.h"
#include "pax/testing/temp_path.h"
#include "pax/testing/testing.h"
#include "pax/train/checkpoint_manager.h"
#include "pax/train/summary.h"

namespace pax::experiments {
namespace {

namespace fs = std::filesystem;

// Float tolerances of the comparison with one process. The two sum the same
// per-token terms in a different order (per process, then across), so they
// differ in rounding only; parameters are compared per leaf by the relative
// L2 norm of the difference.
constexpr double kLossTolerance = 1e-5;   // relative, per step
constexpr double kParamTolerance = 1e-4;  // ||two - one|| / ||one||, per leaf

struct Launcher {
  std::string paxcc, mpirun;
  bool available() const { return !paxcc.empty() && !mpirun.empty(); }
};

Launcher launcher() {
  const char* paxcc = std::getenv("PAX_TEST_PAXCC");
  const char* mpirun = std::getenv("PAX_TEST_MPIRUN");
  return {paxcc ? paxcc : "", mpirun ? mpirun : ""};
}

std::string fresh_dir(const std::string& name) { return testing::fresh_test_path("data_parallel_test", name); }

// The quick tiny LM without dropout, every step summarised.
std::vector<std::string> tiny_overrides(int64_t steps, int64_t batch) {
  return {"train.num_train_steps=" + std::to_string(steps),
          "train.summary_interval_steps=1",
          "train.save_interval_steps=10",
          "train.eval_interval_steps=0",
          "train.decode_interval_steps=0",
          "train.async_checkpoint=false",
          "train_input.batch_size=" + std::to_string(batch)};
}

// Runs a shell command; returns its exit status and output.
std::pair<int, std::string> shell(const std::string& command, const std::string& log) {
  const int rc = std::system((command + " > " + log + " 2>&1").c_str());
  return {WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, data::read_file(log)};
}

std::string paxcc_command(const Launcher& l, int processes, const std::string& job_dir,
                          const std::vector<std::string>& overrides, const std::string& extra = "",
                          const std::string& experiment = "lm.KjvTransformerTiny") {
  std::string cmd = processes > 1 ? l.mpirun + " -np " + std::to_string(processes) + " --oversubscribe " : "";
  cmd += l.paxcc + " --exp=" + experiment + " --job_log_dir=" + job_dir + " --peak_flops=1e11 " + extra;
  for (const std::string& o : overrides) cmd += " --set '" + o + "'";
  return cmd;
}

RunResult run_here(const std::vector<std::string>& overrides, const std::string& job_dir, Mode mode = Mode::train) {
  static std::ostringstream sink;
  Config cfg = make_experiment("lm.KjvTransformerTiny")->config();
  cfg.apply_overrides(overrides);
  RunOptions o;
  o.job_dir = job_dir;
  o.mode = mode;
  o.peak_flops = 1e11;
  o.out = &sink;
  return run_experiment(cfg, o);
}

// A train metric per step, from metrics.jsonl.
std::map<int64_t, double> train_losses(const std::string& job_dir, const std::string& metric = "total_loss") {
  std::map<int64_t, double> losses;
  for (const train::StepMetrics& m : train::read_metrics_jsonl(job_dir + "/metrics.jsonl"))
    if (m.split == train::kTrainSplit) losses[m.step] = m.metrics.at(metric);
  return losses;
}

Tree final_params(const std::string& job_dir) {
  train::CheckpointManager mgr(job_dir + "/checkpoints", {});
  return mgr.restore().trees.at("train_state")["params"];
}

// ||b - a|| / ||a|| over the elements of two arrays of one shape, with
// ||a|| at least that of an RMS of 0.01: a parameter whose gradient vanishes
// in exact arithmetic (the key projection's bias: the softmax ignores a
// constant added to every logit) holds rounding noise alone, which two
// orders of summation draw differently.
double relative_difference(const Array& a, const Array& b) {
  const std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  PAX_CHECK(x.size() == y.size(), "relative_difference: ", x.size(), " vs ", y.size(), " elements");
  double diff = 0, norm = 0;
  for (size_t k = 0; k < x.size(); ++k) {
    diff += (y[k] - x[k]) * (y[k] - x[k]);
    norm += x[k] * x[k];
  }
  return std::sqrt(diff) / std::max(std::sqrt(norm), 0.01 * std::sqrt(double(x.size())));
}

TEST(DataParallel, TwoProcessesMatchOneWithTheGlobalBatch) {
  const Launcher l = launcher();
  if (!l.available()) GTEST_SKIP() << "needs $PAX_TEST_PAXCC and $PAX_TEST_MPIRUN (ctest dist_mpirun_data_parallel)";
  const std::string one = fresh_dir("one"), two = fresh_dir("two");
  // The attention's key bias has a gradient that is zero up to rounding
  // (softmax ignores a shift of its logits), and Adam with epsilon 1e-8 turns
  // that rounding noise into full-size steps; at the tiny config's learning
  // rate of 3e-3 the training itself amplifies rounding differences ~1.6x a
  // step after warm-up (single parameters then differ by 1e-3). A larger
  // epsilon and 1e-3 keep the comparison about the data-parallel arithmetic:
  // every leaf then agrees to ~5e-6, and the reference still learns.
  std::vector<std::string> single = tiny_overrides(20, 8), dual = tiny_overrides(20, 4);
  for (auto* o : {&single, &dual}) {
    o->push_back("learner.optimizer.epsilon=1e-5");
    o->push_back("learner.optimizer.learning_rate=0.001");
  }
  run_here(single, one);
  auto [rc, out] = shell(paxcc_command(l, 2, two, dual), two + ".log");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("global batch 8 (4 per process x 2 processes)"), std::string::npos) << out;

  const auto want = train_losses(one), got = train_losses(two);
  ASSERT_EQ(want.size(), 20u);
  ASSERT_EQ(got.size(), 20u) << out;
  for (const auto& [step, loss] : want)
    EXPECT_NEAR(got.at(step), loss, kLossTolerance * std::abs(loss)) << "step " << step;
  EXPECT_LT(want.at(20), want.at(1) - 1.0) << "the reference must learn for the comparison to mean something";

  const Tree p1 = final_params(one), p2 = final_params(two);
  check_same_structure(p1, p2, "params");
  const auto a = tree_leaves(p1), b = tree_leaves(p2);
  const auto paths = tree_paths(p1);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_LE(relative_difference(a[i], b[i]), kParamTolerance) << paths[i];
}

// A loss of several metrics is normalised per metric over the processes
// before the gradient (the single-metric loss after it): 2 processes still
// train as 1 with the global batch. A max metric is the largest of the
// processes' values, so it is at least their weighted mean, which is what
// one process with the global batch logs.
TEST(DataParallel, MultiLossAndMaxMetricsAcrossProcesses) {
  const Launcher l = launcher();
  if (!l.available()) GTEST_SKIP() << "needs $PAX_TEST_PAXCC and $PAX_TEST_MPIRUN (ctest dist_mpirun_data_parallel)";
  const std::string one = fresh_dir("multi_one"), two = fresh_dir("multi_two");
  const std::string accuracy = "fraction_of_correct_next_step_preds";
  std::vector<std::string> single = tiny_overrides(8, 8), dual = tiny_overrides(8, 4);
  for (auto* o : {&single, &dual}) {
    // SGD without clipping: its step scales with the loss (Adam's or a
    // clipped one would hide a loss scaled wrongly).
    o->push_back("learner.optimizer=Sgd");
    o->push_back("learner.optimizer.learning_rate=0.05");
    o->push_back("learner.clip_gradient_norm_to_value=0");
    o->push_back("loss_aggregator=MultiLossAggregator");
    o->push_back("loss_aggregator.loss_keys=[total_loss, log_pplx]");
    o->push_back("loss_aggregator.loss_weights=[0.75, 0.5]");
  }
  dual.push_back("metrics=MaxMetrics");
  dual.push_back("metrics.metric_keys=[total_loss, " + accuracy + "]");
  run_here(single, one);
  auto [rc, out] = shell(paxcc_command(l, 2, two, dual), two + ".log");
  ASSERT_EQ(rc, 0) << out;
  // total_loss and log_pplx are the same value: the loss is 1.25 times total_loss.
  const auto want = train_losses(one), got_max = train_losses(two);
  ASSERT_EQ(want.size(), 8u);
  ASSERT_EQ(got_max.size(), 8u) << out;
  const auto want_accuracy = train_losses(one, accuracy), got_accuracy = train_losses(two, accuracy);
  int larger = 0;
  for (const auto& [step, loss] : want) {
    EXPECT_GE(got_max.at(step), loss * (1 - kLossTolerance)) << "step " << step;
    EXPECT_GE(got_accuracy.at(step), want_accuracy.at(step) - 1e-6) << "step " << step;
    larger += got_max.at(step) > loss * (1 + 1e-3);
  }
  EXPECT_GT(larger, 0) << "the two halves' losses differ: their max exceeds the mean";
  EXPECT_EQ(train::read_metrics_jsonl(two + "/metrics.jsonl").back().metrics.size(), 2u)
      << "MaxMetrics logs its metric_keys only";
  // The same parameters as one process: the multi-metric loss is the global batch's.
  const Tree p1 = final_params(one), p2 = final_params(two);
  const auto a = tree_leaves(p1), b = tree_leaves(p2);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_LE(relative_difference(a[i], b[i]), kParamTolerance) << i;
}

TEST(DataParallel, EvalOverAnEpochMatchesOneProcess) {
  const Launcher l = launcher();
  if (!l.available()) GTEST_SKIP() << "needs $PAX_TEST_PAXCC and $PAX_TEST_MPIRUN (ctest dist_mpirun_data_parallel)";
  const std::string dir = fresh_dir("eval");
  std::vector<std::string> overrides = tiny_overrides(4, 8);
  run_here(overrides, dir);
  // One whole epoch of the validation split (the shipped config), each example once.
  overrides.push_back("eval_inputs[0].batch_size=16");
  const RunResult here = run_here(overrides, dir, Mode::eval);
  const double want = here.eval_metrics.at("validation").at("log_pplx");
  auto [rc, out] = shell(paxcc_command(l, 2, dir, overrides, "--mode=eval"), dir + ".log");
  ASSERT_EQ(rc, 0) << out;
  // The 2-process eval of step 4 replaced the 1-process one's line in the
  // eval's own directory; the training's metrics.jsonl holds no eval.
  std::vector<double> evals;
  for (const train::StepMetrics& m : train::read_metrics_jsonl(dir + "/eval_runs/step_00000004/metrics.jsonl"))
    if (m.split != train::kTrainSplit) evals.push_back(m.metrics.at("log_pplx"));
  ASSERT_EQ(evals.size(), 1u) << out;
  EXPECT_NEAR(evals[0], want, 1e-5 * want) << out;
  for (const train::StepMetrics& m : train::read_metrics_jsonl(dir + "/metrics.jsonl"))
    EXPECT_EQ(m.split, train::kTrainSplit) << m.step;
}

TEST(DataParallel, ResumesOnAnotherProcessCountWhereThePositionDivides) {
  const Launcher l = launcher();
  if (!l.available()) GTEST_SKIP() << "needs $PAX_TEST_PAXCC and $PAX_TEST_MPIRUN (ctest dist_mpirun_data_parallel)";
  const std::string whole = fresh_dir("whole"), halves = fresh_dir("halves");
  auto [rc, out] = shell(paxcc_command(l, 2, whole, tiny_overrides(20, 4)), whole + ".log");
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = shell(paxcc_command(l, 2, halves, tiny_overrides(10, 4)), halves + ".log");
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = shell(paxcc_command(l, 2, halves, tiny_overrides(20, 4)), halves + ".log");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("at step 10"), std::string::npos) << out;
  const auto want = train_losses(whole), got = train_losses(halves);
  ASSERT_EQ(got.size(), 20u);
  // The same computation on the same batches: identical, not merely close.
  for (const auto& [step, loss] : want) EXPECT_EQ(got.at(step), loss) << "step " << step;

  // One process with the global batch continues the two input shards'
  // stream: the same examples per step, so the same losses up to rounding.
  const std::string single = fresh_dir("single");
  std::tie(rc, out) = shell(paxcc_command(l, 2, single, tiny_overrides(10, 4)), single + ".log");
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = shell(paxcc_command(l, 1, single, tiny_overrides(20, 8)), single + ".single.log");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("at step 10"), std::string::npos) << out;
  const auto resumed = train_losses(single);
  for (int64_t step = 11; step <= 20; ++step)
    EXPECT_NEAR(resumed.at(step), want.at(step), kLossTolerance * std::abs(want.at(step))) << "step " << step;

  // Three processes cannot divide its position (160 slots of the epoch).
  std::tie(rc, out) = shell(paxcc_command(l, 3, single, tiny_overrides(30, 4)), single + ".three.log");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("was written by 1 process(es) but this run has 3; resume it with a single process"),
            std::string::npos)
      << out;
}

// The run in `two` (20 steps, evals at 10 and 20) against one process's in
// `one`: the same losses, final params and last eval. Returns two's evals.
std::vector<double> expect_trained_alike(const std::string& one, const std::string& two, const RunResult& reference,
                                         const std::string& out) {
  const auto want = train_losses(one), got = train_losses(two);
  EXPECT_EQ(got.size(), 20u) << out;
  for (const auto& [step, loss] : want)
    if (got.count(step)) EXPECT_NEAR(got.at(step), loss, kLossTolerance * std::abs(loss)) << "step " << step;
  const Tree p1 = final_params(one), p2 = final_params(two);
  check_same_structure(p1, p2, "params");
  const auto a = tree_leaves(p1), b = tree_leaves(p2);
  const auto paths = tree_paths(p1);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_LE(relative_difference(a[i], b[i]), kParamTolerance) << paths[i];
  // The eval at step 20 (sharded params, every process in step).
  std::vector<double> evals;
  for (const train::StepMetrics& m : train::read_metrics_jsonl(two + "/metrics.jsonl"))
    if (m.split != train::kTrainSplit) evals.push_back(m.metrics.at("log_pplx"));
  const double want_eval = reference.eval_metrics.at("validation").at("log_pplx");
  if (evals.size() == 2) EXPECT_NEAR(evals[1], want_eval, 1e-4 * want_eval);
  return evals;
}

// 2 processes stopped at step 10 (`first`) in `dir` and resumed (`full`):
// the losses `got` of the uninterrupted run. With `copy_to`, the stopped
// run is copied there before it resumes.
void expect_resumes_alike(const Launcher& l, const std::string& dir, const std::vector<std::string>& first,
                          const std::vector<std::string>& full, const std::map<int64_t, double>& got,
                          const std::string& copy_to = "") {
  auto [rc, out] = shell(paxcc_command(l, 2, dir, first), dir + ".log");
  ASSERT_EQ(rc, 0) << out;
  if (!copy_to.empty()) fs::copy(dir, copy_to, fs::copy_options::recursive);
  std::tie(rc, out) = shell(paxcc_command(l, 2, dir, full), dir + ".log");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("at step 10"), std::string::npos) << out;
  const auto resumed = train_losses(dir);
  for (const auto& [step, loss] : got) EXPECT_EQ(resumed.at(step), loss) << "step " << step;
}

// `processes` processes on `overrides` in `dir` train to the losses `want`
// (and print `banner`, when given). Returns their losses.
std::map<int64_t, double> expect_losses_alike(const Launcher& l, int processes, const std::string& dir,
                                              const std::vector<std::string>& overrides,
                                              const std::map<int64_t, double>& want, const std::string& banner = "") {
  auto [rc, out] = shell(paxcc_command(l, processes, dir, overrides), dir + ".log");
  EXPECT_EQ(rc, 0) << out;
  if (rc != 0) return {};
  EXPECT_NE(out.find(banner), std::string::npos) << out;
  const auto got = train_losses(dir);
  EXPECT_EQ(got.size(), want.size()) << out;
  for (const auto& [step, loss] : want)
    if (got.count(step)) EXPECT_NEAR(got.at(step), loss, kLossTolerance * std::abs(loss)) << "step " << step;
  return got;
}

// One process on `single` and 2 processes on `dual` (whose output shows
// `banner` and one batch of 8 read by both) train alike, in dirs named
// `name`_one and `name`_two; `dual` stopped at 10 and resumed (copied to
// `copy_to` when stopped) continues alike; one process evaluates the
// 2-process checkpoint. Returns the losses of one process and of two.
std::pair<std::map<int64_t, double>, std::map<int64_t, double>> expect_pair_like_one(
    const Launcher& l, const std::vector<std::string>& single, const std::vector<std::string>& dual,
    const std::string& name, const std::string& banner, const std::string& copy_to = "") {
  const std::string one = fresh_dir(name + "_one"), two = fresh_dir(name + "_two");
  const RunResult reference = run_here(single, one);
  auto [rc, out] = shell(paxcc_command(l, 2, two, dual), two + ".log");
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find(banner), std::string::npos) << out;
  EXPECT_NE(out.find("global batch 8 (8 per process x 1"), std::string::npos) << out;
  const auto got = train_losses(two);
  const std::vector<double> evals = expect_trained_alike(one, two, reference, out);
  EXPECT_EQ(evals.size(), 2u) << out;
  std::vector<std::string> first = dual;
  first[0] = "train.num_train_steps=10";
  expect_resumes_alike(l, fresh_dir(name + "_halves"), first, dual, got, copy_to);
  if (evals.size() == 2) {
    const RunResult evaluated = run_here(single, two, Mode::eval);
    EXPECT_NEAR(evaluated.eval_metrics.at("validation").at("log_pplx"), evals[1], 1e-5 * evals[1]);
  }
  return {train_losses(one), got};
}

// Fully sharded data parallelism (the mesh's data axis of 2, every parameter
// split): the same training as one process with the global batch, an eval
// over sharded params in lockstep, a resume of the sharded state, and the
// checkpoint (whole arrays) read by one process.
TEST(FullySharded, TwoProcessesMatchOneAndResume) {
  const Launcher l = launcher();
  if (!l.available()) GTEST_SKIP() << "needs $PAX_TEST_PAXCC and $PAX_TEST_MPIRUN (ctest dist_mpirun_data_parallel)";
  const std::string one = fresh_dir("fsdp_one"), two = fresh_dir("fsdp_two"), halves = fresh_dir("fsdp_halves");
  std::vector<std::string> single = tiny_overrides(20, 8), dual = tiny_overrides(20, 4);
  for (auto* o : {&single, &dual}) {  // as in DataParallel.TwoProcessesMatchOneWithTheGlobalBatch
    o->push_back("learner.optimizer.epsilon=1e-5");
    o->push_back("learner.optimizer.learning_rate=0.001");
    o->push_back("learner.clip_gradient_norm_to_value=0.5");  // clipped at some steps: the norm spans the blocks
    o->push_back("train.eval_interval_steps=10");
    o->push_back("eval_inputs[0].batch_size=16");  // one whole epoch (see EvalOverAnEpochMatchesOneProcess)
  }
  for (const char* o : {"train.ici_mesh_shape=[1,2,1]", "train.fsdp_min_elements=1"}) dual.push_back(o);
  const RunResult reference = run_here(single, one);
  auto [rc, out] = shell(paxcc_command(l, 2, two, dual), two + ".log");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("split over the data axis of 2 processes"), std::string::npos) << out;

  const auto got = train_losses(two);
  const std::vector<double> evals = expect_trained_alike(one, two, reference, out);
  ASSERT_EQ(evals.size(), 2u) << out;

  std::vector<std::string> first = dual;
  first[0] = "train.num_train_steps=10";
  expect_resumes_alike(l, halves, first, dual, got);
  // One process evaluates the 2-process checkpoint.
  const RunResult evaluated = run_here(single, two, Mode::eval);
  EXPECT_NEAR(evaluated.eval_metrics.at("validation").at("log_pplx"), evals[1], 1e-5 * evals[1]);

  // And resumes the run stopped at 10 (its blocks read whole, the two input
  // shards' position continued by one): the losses of the 2-process run.
  const std::string moved = fresh_dir("fsdp_moved");
  std::tie(rc, out) = shell(paxcc_command(l, 2, moved, first), moved + ".log");
  ASSERT_EQ(rc, 0) << out;
  run_here(single, moved);
  const auto continued = train_losses(moved);
  for (int64_t step = 11; step <= 20; ++step)
    EXPECT_NEAR(continued.at(step), got.at(step), kLossTolerance * std::abs(got.at(step))) << "step " << step;
}

// Tensor parallelism (the mesh's mdl axis of 2: each process computes one of
// the tiny model's two heads and half of each feed-forward's hidden width,
// both on the same batch): the same training as one process, the eval in
// lockstep, a resume, and the checkpoint read by one process. Then the
// mesh [1,2,2] (mdl blocks split over data too, two input shards) trains as
// one process does, and continues the [1,1,2] run stopped at 10, reading
// its checkpoint as its own blocks.
TEST(TensorParallel, SplitHeadsAndWidthsMatchOneProcessAndResume) {
  const Launcher l = launcher();
  if (!l.available()) GTEST_SKIP() << "needs $PAX_TEST_PAXCC and $PAX_TEST_MPIRUN (ctest dist_mpirun_data_parallel)";
  std::vector<std::string> single = tiny_overrides(20, 8), dual = tiny_overrides(20, 8);
  for (auto* o : {&single, &dual}) {
    o->push_back("model.lm_tpl.vocab_size=260");  // the 259 byte ids in a table mdl can split
    o->push_back("learner.optimizer.epsilon=1e-5");
    o->push_back("learner.optimizer.learning_rate=0.001");
    o->push_back("learner.clip_gradient_norm_to_value=0.5");  // the norm spans the blocks
    o->push_back("train.eval_interval_steps=10");
    o->push_back("eval_inputs[0].batch_size=16");
  }
  dual.push_back("train.ici_mesh_shape=[1,1,2]");
  const std::string moved = fresh_dir("tp_moved");  // the run stopped at 10, resumed on another mesh below
  const auto [want, got] = expect_pair_like_one(
      l, single, dual, "tp", "vocabulary split over the mdl axis of 2 processes (tensor parallel)", moved);
  int rc = 0;
  std::string out;

  // [1,2,2]: 4 processes, two input shards of 4 examples, blocks of the
  // blocks; the same losses as one process.
  std::vector<std::string> quad = tiny_overrides(20, 4);
  for (size_t i = tiny_overrides(20, 4).size(); i < dual.size() - 1; ++i) quad.push_back(dual[i]);
  quad.push_back("train.ici_mesh_shape=[1,2,2]");
  quad.push_back("train.fsdp_min_elements=1");
  expect_losses_alike(l, 4, fresh_dir("tp_four"), quad, want, "split over the data axis of 2");

  // [2,1,2]: replicas of a tensor-parallel pair (the blocks' gradients
  // summed over replica).
  std::vector<std::string> replicas = quad;
  replicas[replicas.size() - 2] = "train.ici_mesh_shape=[2,1,2]";
  expect_losses_alike(l, 4, fresh_dir("tp_replicas"), replicas, want);

  // The [1,1,2] checkpoint of step 10 resumed on [1,2,2]: its train state
  // read as the new blocks, its one input shard's position divided in two.
  std::tie(rc, out) = shell(paxcc_command(l, 4, moved, quad), moved + ".log");
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("at step 10"), std::string::npos) << out;
  const auto continued = train_losses(moved);
  for (int64_t step = 11; step <= 20; ++step)
    EXPECT_NEAR(continued.at(step), got.at(step), kLossTolerance * std::abs(got.at(step))) << "step " << step;
}

// Pipeline parallelism (the mesh's stage axis of 2: each process holds one
// of the two repetitions of a pipelined Repeat and runs the batch as 2
// microbatches): the same training as one process running the same model,
// the eval in lockstep, a resume, and the checkpoint read by one process.
// Four stages ([4,1,1,1]) train as one process does, with the stage shift
// delayed by an iteration too. Then stage x mdl
// ([2,1,1,2]: the stages' blocks split by heads and widths,
// a checkpoint of blocks split along two dimensions) and stage x data
// ([2,1,2,1]: fsdp's blocks of the stages' layers, two input shards) train
// as one process does, and one process continues the [2,1,1,2] run stopped
// at 10 from its two-dimensional blocks.
TEST(Pipeline, StagesMatchOneProcessAndResume) {
  const Launcher l = launcher();
  if (!l.available()) GTEST_SKIP() << "needs $PAX_TEST_PAXCC and $PAX_TEST_MPIRUN (ctest dist_mpirun_data_parallel)";
  const std::string stack = "model.lm_tpl.stacked_transformer_tpl";
  std::vector<std::string> model = {stack + "=Repeat",
                                    stack + ".x_times=2",
                                    stack + ".num_microbatches=2",
                                    stack + ".sub_tpl=StackedTransformer",
                                    stack + ".sub_tpl.num_layers=1",
                                    stack + ".sub_tpl.num_heads=2",
                                    stack + ".sub_tpl.hidden_dims=256",
                                    stack + ".sub_tpl.mask_self_attention=true",
                                    "model.lm_tpl.vocab_size=260",
                                    "learner.optimizer.epsilon=1e-5",
                                    "learner.optimizer.learning_rate=0.001",
                                    "learner.clip_gradient_norm_to_value=0.5",  // the norm spans the stages
                                    "train.eval_interval_steps=10",
                                    "eval_inputs[0].batch_size=16",
                                    "train.fsdp_min_elements=1"};
  std::vector<std::string> single = tiny_overrides(20, 8), dual = tiny_overrides(20, 8);
  for (auto* o : {&single, &dual}) o->insert(o->end(), model.begin(), model.end());
  dual.push_back("train.ici_mesh_shape=[2,1,1,1]");
  const auto [want, got] =
      expect_pair_like_one(l, single, dual, "pp", "pipelined layers split over the stage axis of 2 processes");

  // [4,1,1,1]: four stages of one block each (the previous stage is not
  // also the next one, as with two).
  std::vector<std::string> single4 = single, stages4 = dual;
  for (auto* o : {&single4, &stages4}) std::replace(o->begin(), o->end(), stack + ".x_times=2", stack + ".x_times=4");
  stages4.back() = "train.ici_mesh_shape=[4,1,1,1]";
  const std::string one4 = fresh_dir("pp_one4");
  run_here(single4, one4);
  const auto want4 = train_losses(one4);
  expect_losses_alike(l, 4, fresh_dir("pp_stages4"), stages4, want4,
                      "pipelined layers split over the stage axis of 4 processes");
  // The same with each shift sent an iteration late (overlapping the next
  // iteration's compute): the same losses.
  stages4.push_back(stack + ".delay_activation_forwarding=true");
  expect_losses_alike(l, 4, fresh_dir("pp_delayed4"), stages4, want4);

  // [2,1,1,2] and [2,1,2,1] (half the batch per input shard): 4 processes.
  for (const char* mesh : {"[2,1,1,2]", "[2,1,2,1]"}) {
    SCOPED_TRACE(mesh);
    std::vector<std::string> quad = dual;
    quad.back() = std::string("train.ici_mesh_shape=") + mesh;
    if (std::string(mesh) == "[2,1,2,1]") quad[6] = "train_input.batch_size=4";
    const auto got4 = expect_losses_alike(l, 4, fresh_dir(std::string("pp_four") + mesh[7]), quad, want);
    if (std::string(mesh) != "[2,1,1,2]") continue;
    // Its checkpoint of step 10 (blocks of the stages split over mdl)
    // continued by one process: the same losses.
    const std::string moved = fresh_dir("pp_moved");
    std::vector<std::string> stopped = quad;
    stopped[0] = "train.num_train_steps=10";
    const auto [rc, out] = shell(paxcc_command(l, 4, moved, stopped), moved + ".log");
    ASSERT_EQ(rc, 0) << out;
    EXPECT_NE(data::read_file(moved + "/checkpoints/checkpoint_00000010/metadata.json").find("\"outer_dim\":0"),
              std::string::npos);
    run_here(single, moved);
    const auto continued = train_losses(moved);
    for (int64_t step = 11; step <= 20; ++step)
      EXPECT_NEAR(continued.at(step), got4.at(step), kLossTolerance * std::abs(got4.at(step))) << "step " << step;
  }
}

// A seed port (Repeat of StackedTransformer) scaled down to a quick run of
// `steps` steps in f32 at `batch` rows per process on the given meshes,
// every array large enough to split, with `heads` heads of 8.
std::vector<std::string> scaled_down_port(int64_t batch, const std::string& ici, const std::string& dcn,
                                          int64_t heads = 2, int64_t steps = 6) {
  const std::string stack = "model.lm_tpl.stacked_transformer_tpl";
  return {"model.lm_tpl.model_dims=16",
          stack + ".sub_tpl.num_heads=" + std::to_string(heads),
          stack + ".sub_tpl.dim_per_head=8",
          stack + ".sub_tpl.hidden_dims=32",
          stack + ".x_times=2",
          "model.fprop_dtype=float32",
          "model.lm_tpl.fprop_dtype=float32",
          "model.lm_tpl.vocab_size=64",
          "train_input.vocab_size=64",
          "train_input.seq_length=8",
          "train_input.batch_size=" + std::to_string(batch),
          "eval_inputs[0].vocab_size=64",
          "eval_inputs[0].seq_length=8",
          "eval_inputs[0].batch_size=2",
          "train.num_train_steps=" + std::to_string(steps),
          "train.eval_interval_steps=0",
          "train.decode_interval_steps=0",
          "train.summary_interval_steps=1",
          "train.save_interval_steps=" + std::to_string(steps),
          "train.async_checkpoint=false",
          "train.fsdp_min_elements=1",
          "train.ici_mesh_shape=" + ici,
          "train.dcn_mesh_shape=" + dcn};
}

// Runs `experiment` on 4 processes with the meshes given (in `four`), 2
// rows each, and on one process with the global batch (2 x the mesh's data
// shards, `shards`); expects the same losses and final parameters. Returns
// the 4 processes' console output.
std::string expect_four_train_as_one(const std::string& four, const Launcher& l, const std::string& experiment,
                                     const std::string& name, const std::string& ici, const std::string& dcn,
                                     int64_t heads, int64_t shards) {
  const std::string one = fresh_dir(name + "_one");
  auto [rc1, out1] =
      shell(paxcc_command(l, 1, one, scaled_down_port(2 * shards, "[]", "[]", heads), "", experiment), one + ".log");
  EXPECT_EQ(rc1, 0) << out1;
  auto [rc4, out4] =
      shell(paxcc_command(l, 4, four, scaled_down_port(2, ici, dcn, heads), "", experiment), four + ".log");
  EXPECT_EQ(rc4, 0) << out4;
  const auto want = train_losses(one), got = train_losses(four);
  EXPECT_EQ(got.size(), 6u) << out4;
  for (const auto& [step, loss] : want)
    if (got.count(step)) EXPECT_NEAR(got.at(step), loss, kLossTolerance * std::abs(loss)) << "step " << step;
  if (rc1 != 0 || rc4 != 0) return out4;
  const Tree p1 = final_params(one), p4 = final_params(four);
  const auto a = tree_leaves(p1), b = tree_leaves(p4);
  const auto paths = tree_paths(p1);
  EXPECT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    EXPECT_LE(relative_difference(a[i], b[i]), kParamTolerance) << paths[i];
  return out4;
}

// Multislice: the seed's 22B configuration over two slices (DCN [2,1,1] x
// ICI [1,2,1]: replicas across the slices, fully sharded over the data axis
// inside each), scaled down, trains as one process does on the 4 processes'
// summed batch (SyntheticInput's hosts read slices of one global batch).
TEST(Multislice, ScaledDown22BOnTwoSlicesMatchesOneProcess) {
  const Launcher l = launcher();
  if (!l.available()) GTEST_SKIP() << "needs $PAX_TEST_PAXCC and $PAX_TEST_MPIRUN (ctest dist_mpirun_multislice)";
  const std::string out = expect_four_train_as_one(fresh_dir("multislice_four"), l, "lm.C4Spmd22BAdam2xv4_128",
                                                   "multislice", "[1,2,1]", "[2,1,1]", 2, /*shards=*/4);
  EXPECT_NE(out.find("ICI [1, 2, 1] x DCN [2, 1, 1]"), std::string::npos) << out;
}

// Two-dimensional weight sharding: the seed's 16B port scaled down with 6
// heads on a [1,2,2] mesh, so that each mdl block holds 3 heads, which the
// data axis of 2 cannot split: data splits the model dimension instead
// (Praxis's [data, mdl]), and the run trains as one process does; the
// checkpoint, which records both splits, restores on one process.
TEST(TwoDimensionalSharding, ScaledDown16BOnAMdlAndDataMeshMatchesOneProcess) {
  const Launcher l = launcher();
  if (!l.available()) GTEST_SKIP() << "needs $PAX_TEST_PAXCC and $PAX_TEST_MPIRUN (ctest dist_mpirun_multislice)";
  const std::string dir = fresh_dir("two_dims_four");
  const std::string out = expect_four_train_as_one(dir, l, "lm.C4Spmd16BAdam32Replicas", "two_dims", "[1,2,2]", "[]", 6,
                                                   /*shards=*/2);
  EXPECT_NE(out.find("split over the mdl axis of 2"), std::string::npos) << out;
  // One process evaluates the 4 processes' checkpoint (each array whole again).
  std::vector<std::string> sets = scaled_down_port(4, "[]", "[]", 6);
  sets.push_back("train.eval_interval_steps=6");
  auto [rc, eval_out] =
      shell(paxcc_command(l, 1, dir, sets, "--mode=eval", "lm.C4Spmd16BAdam32Replicas"), dir + "_eval.log");
  EXPECT_EQ(rc, 0) << eval_out;
}

}  // namespace
}  // namespace pax::experiments
