// Running a resolved experiment (paxml's train.py / eval.py / main.py): the
// train, eval, decode and inspect modes of the paxcc command.
//
// A job directory holds everything a run writes:
//   config.json            the resolved config (re-run it with --config)
//   model_summary.txt      the layer / variable table
//   checkpoints/           checkpoint_<step>/ {train_state, input_state, ...}
//   summaries/train, summaries/eval_test_<name>   TensorBoard event files
//   metrics.jsonl, report.html                    the same metrics, plain
//   decode/<name>_step_<step>.txt                 decoded samples
//   job.lock               held by the training process (one trainer at a time)
//   eval_runs/step_<step>/, decode_runs/step_<step>/   --mode=eval / decode results
// train resumes from the latest checkpoint by itself, with the input stream
// where it was, so that an interrupted run continues exactly. eval and decode
// only read the job directory's checkpoints (they run beside a trainer, and
// on a read-only job directory) and write into their own directory.
#pragma once

#include <functional>
#include <iosfwd>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "pax/config/config.h"

namespace pax::experiments {

enum class Mode : int { train, eval, decode, inspect };
PAX_ENUM(Mode, "train", "eval", "decode", "inspect")

struct RunOptions {
  std::string job_dir;
  Mode mode = Mode::train;
  // eval / decode: the checkpoint to restore (default: the latest).
  std::optional<int64_t> restore_step;
  // Peak FLOP/s of the machine for MFU (default: the theoretical peak, train/peak_flops.h).
  std::optional<double> peak_flops;
  // Console output (nullptr: std::cout).
  std::ostream* out = nullptr;
  // Polled after every train step, beside pax::stop_requested() (pax/core/
  // stop.h: request_stop(), and SIGINT / SIGTERM once watch_stop_signals()
  // runs): when either is true the run saves a checkpoint and returns.
  std::function<bool()> stop_requested;
  // Name shown in reports ("lm.KjvTransformer").
  std::string experiment_name;
  // eval / decode: where results go (default <job_dir>/<mode>_runs/step_<step>/).
  std::string output_dir;
  // train: trace steps [first, last] (1-based, inclusive) into
  // <job_dir>/summaries/train/plugins/profile/<run>/<host>.trace.json.gz, as
  // TensorBoard's profile plugin finds it (pax/core/trace.h).
  std::optional<std::pair<int64_t, int64_t>> profile_steps;
};

// "START:END" (1 <= START <= END) as profile_steps; pax::Error naming the
// valid form otherwise.
std::pair<int64_t, int64_t> parse_profile_steps(const std::string& text);

struct RunResult {
  int64_t step = 0;                                                   // the global step reached (or restored)
  bool interrupted = false;                                           // stop_requested ended the run
  bool early_stopped = false;                                         // the early-stopping metric stopped improving
  std::map<std::string, double> train_metrics;                        // of the last summary
  std::map<std::string, std::map<std::string, double>> eval_metrics;  // per eval input, the last run
  std::map<std::string, std::string> decode_files;                    // per decode input, the last file
};

// Runs `config` (an ExperimentConfig) in options.mode. Throws pax::Error for
// an invalid config, missing data or a missing checkpoint (eval / decode).
RunResult run_experiment(const Config& config, const RunOptions& options);

// inspect: parameter counts, FLOPs per token or example and per step, and
// the config, without allocating a weight.
std::string inspect_experiment(const Config& config);

}  // namespace pax::experiments
