// What an operator does to a job directory: a second trainer on it, eval and
// decode beside the training history (and on a directory they cannot write),
// a checkpoint copied under another step's name, a job directory through a
// file; and the list of fields in which mpirun's ranks disagree.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "pax/data/file_io.h"
#include "pax/experiments/experiment.h"
#include "pax/experiments/job_lock.h"
#include "pax/experiments/rank_agreement.h"
#include "pax/experiments/runner.h"
#include "pax/testing/temp_path.h"
#include "pax/testing/testing.h"
#include "pax/train/checkpoint.h"
#include "pax/train/summary.h"

namespace pax::experiments {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) { return testing::fresh_test_path("job_dir_test", name); }

Config tiny_config(int64_t steps) {
  Config cfg = make_experiment("lm.KjvTransformerTiny")->config();
  cfg.apply_overrides({"train.num_train_steps=" + std::to_string(steps), "train.summary_interval_steps=2",
                       "train.save_interval_steps=4", "train.eval_interval_steps=4", "train.decode_interval_steps=0"});
  return cfg;
}

RunOptions options(const std::string& job_dir, Mode mode = Mode::train) {
  static std::ostringstream sink;
  RunOptions o;
  o.job_dir = job_dir;
  o.mode = mode;
  o.peak_flops = 1e11;
  o.out = &sink;
  o.experiment_name = "lm.KjvTransformerTiny";
  return o;
}

// Every file under `dir` with its contents: what a run must leave unchanged.
std::map<std::string, std::string> snapshot(const std::string& dir) {
  std::map<std::string, std::string> files;
  for (const auto& entry : fs::recursive_directory_iterator(dir))
    if (entry.is_regular_file()) files[fs::relative(entry.path(), dir).string()] = data::read_file(entry.path());
  return files;
}

TEST(JobDirectory, ASecondTrainerIsRefusedNamingTheHolder) {
  const std::string dir = fresh_dir("locked");
  {
    JobDirectoryLock holder(dir, "lm.SomeOtherRun");
    EXPECT_PAX_ERROR(run_experiment(tiny_config(4), options(dir)), "is in use by another trainer (host ");
    EXPECT_PAX_ERROR(run_experiment(tiny_config(4), options(dir)), "PID " + std::to_string(::getpid()));
    EXPECT_PAX_ERROR(JobDirectoryLock(dir, "x"), "lm.SomeOtherRun");
    // Refused before anything was written: no checkpoint, no config.
    EXPECT_FALSE(fs::exists(fs::path(dir) / "checkpoints"));
    EXPECT_FALSE(fs::exists(fs::path(dir) / "config.json"));
  }
  // Released with its holder: the next trainer runs, and records its experiment.
  EXPECT_EQ(run_experiment(tiny_config(4), options(dir)).step, 4);
  const std::string config = data::read_file(dir + "/config.json");
  EXPECT_NE(config.find("\"$experiment\": \"lm.KjvTransformerTiny\""), std::string::npos) << config.substr(0, 200);
  EXPECT_EQ(Config::from_json(config).to_json(), tiny_config(4).to_json()) << "--config reads it back";
}

TEST(JobDirectory, EvalAndDecodeLeaveTheTrainingHistoryAlone) {
  const std::string dir = fresh_dir("history");
  run_experiment(tiny_config(8), options(dir));
  const std::map<std::string, std::string> before = snapshot(dir);

  // An eval with its own override, twice, and at an earlier step.
  Config other = tiny_config(8);
  other.apply_overrides({"learner.optimizer.learning_rate=0.5"});
  RunResult e = run_experiment(other, options(dir, Mode::eval));
  run_experiment(other, options(dir, Mode::eval));
  RunOptions at4 = options(dir, Mode::eval);
  at4.restore_step = 4;
  run_experiment(other, at4);
  RunResult d = run_experiment(other, options(dir, Mode::decode));

  // The training's files are byte for byte as training left them.
  std::map<std::string, std::string> after = snapshot(dir);
  for (const auto& [name, text] : before) EXPECT_EQ(after[name], text) << name;
  // The eval's own directory: its config, and each eval line once.
  const std::string eval_dir = dir + "/eval_runs/step_00000008";
  EXPECT_NE(data::read_file(eval_dir + "/config.json").find("0.5"), std::string::npos);
  int lines = 0;
  for (const train::StepMetrics& m : train::read_metrics_jsonl(eval_dir + "/metrics.jsonl")) lines += m.step == 8;
  EXPECT_EQ(lines, 1) << "a re-run replaces its lines";
  EXPECT_TRUE(fs::exists(dir + "/eval_runs/step_00000004/metrics.jsonl"));
  EXPECT_EQ(d.decode_files.at("samples"), dir + "/decode_runs/step_00000008/samples_step_00000008.txt");
  EXPECT_DOUBLE_EQ(
      e.eval_metrics.at("validation").at("log_pplx"),
      run_experiment(tiny_config(8), options(dir, Mode::eval)).eval_metrics.at("validation").at("log_pplx"));

  // With --output_dir elsewhere, nothing in the job directory changes: a
  // read-only job directory serves eval and decode.
  const std::map<std::string, std::string> now = snapshot(dir);
  RunOptions elsewhere = options(dir, Mode::eval);
  elsewhere.output_dir = fresh_dir("eval_elsewhere");
  run_experiment(tiny_config(8), elsewhere);
  EXPECT_EQ(snapshot(dir), now);
  EXPECT_TRUE(fs::exists(elsewhere.output_dir + "/metrics.jsonl"));
  // Where the default output cannot be made, the results reach the console only.
  fs::remove_all(dir + "/decode_runs");
  data::write_file_atomic(dir + "/decode_runs", "not a directory");
  std::ostringstream console;
  RunOptions blocked = options(dir, Mode::decode);
  blocked.out = &console;
  EXPECT_TRUE(run_experiment(tiny_config(8), blocked).decode_files.empty());
  EXPECT_NE(console.str().find("written to the console only"), std::string::npos) << console.str();
  EXPECT_NE(console.str().find("decode samples @ step 8"), std::string::npos) << console.str();
}

TEST(JobDirectory, ACheckpointUnderAnotherStepsNameIsRefused) {
  const std::string dir = fresh_dir("renamed");
  run_experiment(tiny_config(4), options(dir));
  fs::copy(dir + "/checkpoints/checkpoint_00000004", dir + "/checkpoints/checkpoint_00000090",
           fs::copy_options::recursive);
  const std::string why = "is named for step 90 but its";
  EXPECT_PAX_ERROR(run_experiment(tiny_config(100), options(dir)), why);
  EXPECT_PAX_ERROR(run_experiment(tiny_config(100), options(dir, Mode::eval)), why);
  EXPECT_PAX_ERROR(train::restore_checkpoint(dir + "/checkpoints", Tree()), why);
  // Named back, it restores again.
  fs::remove_all(dir + "/checkpoints/checkpoint_00000090");
  // A name whose step merely ends in the right digits is refused too; a name
  // that carries no step ("final_v2") is the user's own.
  fs::copy(dir + "/checkpoints/checkpoint_00000004", dir + "/checkpoints/checkpoint_00000104",
           fs::copy_options::recursive);
  EXPECT_PAX_ERROR(run_experiment(tiny_config(200), options(dir, Mode::eval)), "is named for step 104 but its");
  fs::rename(dir + "/checkpoints/checkpoint_00000104", dir + "/final_v2");
  EXPECT_EQ(train::read_checkpoint(dir + "/final_v2", {}).trees.count("train_state"), 1u);
  EXPECT_EQ(run_experiment(tiny_config(4), options(dir, Mode::eval)).step, 4);
}

TEST(JobDirectory, AJobDirectoryThroughAFileIsNamed) {
  const std::string base = fresh_dir("file");
  fs::create_directories(base);
  data::write_file_atomic(base + "/plain", "x");
  EXPECT_PAX_ERROR(make_job_directory(base + "/plain"), base + "/plain exists and is not a directory");
  EXPECT_PAX_ERROR(make_job_directory(base + "/plain/run"), base + "/plain is not a directory");
  EXPECT_PAX_ERROR(run_experiment(tiny_config(2), options(base + "/plain/run")), "is not a directory");
}

TEST(RankAgreement, NamesEveryDifferingFieldWithEachProcesssValue) {
  const std::string a =
      R"({"learner": {"lr": 0.003, "clip": 1}, "eval_inputs": [{"batch_size": 8}], "--mode": "train"})";
  const std::string b = R"({"learner": {"lr": 0.3, "clip": 1}, "eval_inputs": [{"batch_size": 4}], "--mode": "train"})";
  EXPECT_EQ(describe_rank_differences({a, a, a}), "");
  const std::string d = describe_rank_differences({a, b, a});
  EXPECT_NE(d.find("learner.lr: 0.003 on process 0, 0.3 on process 1, 0.003 on process 2"), std::string::npos) << d;
  EXPECT_NE(d.find("eval_inputs[0].batch_size: 8 on process 0, 4 on process 1"), std::string::npos) << d;
  EXPECT_EQ(d.find("clip"), std::string::npos) << d;
  EXPECT_NE(describe_rank_differences({a, b}, 1).find("and 1 more field(s)"), std::string::npos);
  // A field one process lacks.
  EXPECT_NE(describe_rank_differences({R"({"x": 1})", R"({})"}).find("x: 1 on process 0, (unset) on process 1"),
            std::string::npos);
  // One process: nothing to compare.
  check_ranks_agree(tiny_config(2).to_json(), {{"--mode", "train"}});
}

}  // namespace
}  // namespace pax::experiments
