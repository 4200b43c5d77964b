// lm.TextTransformer on a small text file: the files are the one setting to
// give, it trains and evaluates on the held-out lines with one tokenizer
// trained once; the eval-input warnings appear for a mismatched override and
// never for the shipped experiments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

#include "pax/data/file_io.h"
#include "pax/data/held_out_input.h"
#include "pax/data/text_lm.h"
#include "pax/experiments/experiment.h"
#include "pax/experiments/input_mismatch.h"
#include "pax/experiments/runner.h"
#include "pax/testing/temp_path.h"
#include "pax/testing/testing.h"

namespace pax::experiments {
namespace {

namespace fs = std::filesystem;

std::string fresh_dir(const std::string& name) {
  const std::string dir = testing::fresh_test_path("text_transformer_test", name);
  fs::create_directories(dir);
  return dir;
}

// A few hundred lines of a small made-up language.
std::string write_text(const std::string& dir, const std::string& name, int lines) {
  const char* words[] = {"the", "river", "stone", "carries", "light", "over", "quiet", "hills", "and", "morning"};
  std::string text;
  for (int i = 0; i < lines; ++i) {
    for (int j = 0; j < 8; ++j) text += std::string(j ? " " : "") + words[(i * 7 + j * 3 + j * j) % 10];
    text += "\n";
  }
  const std::string path = dir + "/" + name;
  data::write_file_atomic(path, text);
  return path;
}

// lm.TextTransformer over `file`, made small and quick.
Config small_config(const std::string& file, const std::string& data_dir, int64_t steps) {
  Config cfg = make_experiment("lm.TextTransformer")->config();
  cfg.apply_overrides(
      {"train_input.files=[" + file + "]", "train_input.data_dir=" + data_dir, "train_input.tokenizer=spm:64",
       "train_input.seq_length=32", "train_input.batch_size=4", "train_input.validation_fraction=0.1",
       "eval_inputs[0].batch_size=4", "model.lm_tpl.vocab_size=64", "model.lm_tpl.model_dims=32",
       "model.lm_tpl.stacked_transformer_tpl.num_layers=1", "model.lm_tpl.stacked_transformer_tpl.num_heads=2",
       "model.lm_tpl.stacked_transformer_tpl.hidden_dims=64", "train.num_train_steps=" + std::to_string(steps),
       "train.summary_interval_steps=1", "train.eval_interval_steps=" + std::to_string(steps),
       "train.async_checkpoint=false"});
  return cfg;
}

RunOptions options(const std::string& job_dir, std::ostream& out) {
  RunOptions o;
  o.job_dir = job_dir;
  o.peak_flops = 1e11;
  o.out = &out;
  return o;
}

TEST(TextTransformer, TheFilesAreTheSettingToGive) {
  Config cfg = make_experiment("lm.TextTransformer")->config();
  std::ostringstream out;
  EXPECT_PAX_ERROR(run_experiment(cfg, options(fresh_dir("no_files"), out)), "train_input.files");
  // The eval input reads the train input's own config: one object.
  const auto& exp = cfg.as<ExperimentConfig>();
  const auto& held_out = dynamic_cast<const data::HeldOutInput::HParams&>(*exp.eval_inputs.at(0));
  EXPECT_EQ(held_out.of, exp.train_input);
  const std::string dir = fresh_dir("missing");
  cfg.set("train_input.files", "[" + dir + "/a.txt, " + dir + "/b.txt]");
  EXPECT_PAX_ERROR(run_experiment(cfg, options(dir + "/job", out)),
                   "no such files: '" + dir + "/a.txt', '" + dir + "/b.txt'");
}

TEST(TextTransformer, TrainsOnAFileAndEvaluatesOnItsHeldOutLines) {
  const std::string dir = fresh_dir("train");
  const std::string file = write_text(dir, "mine.txt", 400);
  Config cfg = small_config(file, dir + "/data", 4);
  std::ostringstream out;
  RunResult r = run_experiment(cfg, options(dir + "/job", out));
  EXPECT_EQ(r.step, 4);
  EXPECT_EQ(out.str().find("warning:"), std::string::npos) << out.str();
  ASSERT_EQ(r.eval_metrics.count("validation"), 1u);
  const double log_pplx = r.eval_metrics["validation"].at("log_pplx");
  EXPECT_TRUE(std::isfinite(log_pplx));
  EXPECT_LT(log_pplx, std::log(64.0) + 1.0);  // near or below uniform over the vocabulary
  // It read every token of the held-out lines, and only those.
  const auto& eval = dynamic_cast<const data::HeldOutInput::HParams&>(*cfg.as<ExperimentConfig>().eval_inputs[0]);
  data::TextLmInput held_out(dynamic_cast<const data::TextLmInput::HParams&>(*data::resolve_held_out(eval)));
  const auto& seg = held_out.rows().segment_ids;
  EXPECT_EQ(held_out.hparams<data::TextLmInput::HParams>().split, data::TextSplit::validation);
  const int64_t batches = (held_out.rows().num_rows + 3) / 4;  // num_predictions is a mean over batches
  EXPECT_EQ(r.eval_metrics["validation"].at("num_predictions") * double(batches),
            double(std::count_if(seg.begin(), seg.end(), [](int32_t s) { return s > 0; })));
  // One tokenizer, trained once for the train input, the eval input and the memory check.
  int models = 0;
  for (const auto& e : fs::directory_iterator(dir + "/data/text_spm")) models += e.path().extension() == ".model";
  EXPECT_EQ(models, 1);
  // The saved config keeps the eval input reading the train input's config.
  Config saved = Config::from_json(data::read_file(dir + "/job/config.json"));
  const auto& exp = saved.as<ExperimentConfig>();
  EXPECT_EQ(dynamic_cast<const data::HeldOutInput::HParams&>(*exp.eval_inputs.at(0)).of, exp.train_input);
}

TEST(TextTransformer, AnEvalInputOnOtherDataIsWarnedAbout) {
  const std::string dir = fresh_dir("warn");
  Config cfg = small_config(write_text(dir, "mine.txt", 200), dir + "/data", 1);
  auto other = std::make_shared<data::TextLmInput::HParams>();
  other->name = "other";
  other->files = {write_text(dir, "other.txt", 50)};
  other->tokenizer = "spm:64";  // trained on other.txt: another tokenizer
  other->data_dir = dir + "/data";
  other->seq_length = 32;
  other->batch_size = 4;
  other->repeat = false;
  other->reset_for_eval = true;
  cfg.as<ExperimentConfig>().eval_inputs = {other};
  std::ostringstream out;
  run_experiment(cfg, options(dir + "/job", out));
  EXPECT_NE(out.str().find("warning: eval_inputs[0] ('other') reads files [" + dir +
                           "/other.txt], but train_input ('train') reads files [" + dir + "/mine.txt]"),
            std::string::npos)
      << out.str();
  EXPECT_NE(out.str().find("warning: eval_inputs[0] ('other') tokenises with spm:64 trained on files [" + dir +
                           "/other.txt], but train_input ('train') tokenises with spm:64 trained on files [" + dir +
                           "/mine.txt]"),
            std::string::npos)
      << out.str();
}

TEST(TextTransformer, ATokenizerLargerThanTheModelsVocabularyIsRefused) {
  const std::string dir = fresh_dir("vocab");
  Config cfg = small_config(write_text(dir, "mine.txt", 200), dir + "/data", 1);
  cfg.set("model.lm_tpl.vocab_size", "16");
  std::ostringstream out;
  EXPECT_PAX_ERROR(run_experiment(cfg, options(dir + "/job", out)),
                   "but model.lm_tpl.vocab_size is 16; set --set model.lm_tpl.vocab_size=");
}

TEST(InputMismatch, NoneInTheShippedExperiments) {
  ASSERT_GE(registered_experiments().size(), 5u);
  for (const std::string& name : registered_experiments()) {
    Config cfg = make_experiment(name)->config();
    EXPECT_EQ(eval_input_mismatches(cfg.as<ExperimentConfig>()), std::vector<std::string>{}) << name;
  }
}

TEST(InputMismatch, OverridingTheTrainInputAloneIsNamed) {
  Config cfg = make_experiment("lm.KjvTransformer")->config();
  cfg.apply_overrides({"train_input.source=files", "train_input.files=[mine.txt]", "train_input.tokenizer=spm:4096"});
  EXPECT_EQ(eval_input_mismatches(cfg.as<ExperimentConfig>()),
            (std::vector<std::string>{
                "eval_inputs[0] ('validation') reads the KJV, but train_input ('train') reads files [mine.txt]",
                "eval_inputs[0] ('validation') tokenises with kjv_spm:4096, but train_input ('train') tokenises "
                "with spm:4096 trained on files [mine.txt]"}));
  // The tokenizer alone.
  Config tok = make_experiment("lm.KjvTransformer")->config();
  tok.set("train_input.tokenizer", "bytes");
  EXPECT_EQ(eval_input_mismatches(tok.as<ExperimentConfig>()).size(), 1u);
}

}  // namespace
}  // namespace pax::experiments
