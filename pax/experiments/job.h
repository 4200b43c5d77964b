// The context of one run of an experiment (Job: its config, processes,
// mesh, sharding plan, model, job directory, checkpoints and inputs), and
// what every mode does with it: evaluating and decoding the inputs, and
// refusing a run whose memory would not fit before anything large is made.
// The modes themselves: training_loop.h (--mode=train), runner.h (the rest).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "pax/config/config.h"
#include "pax/data/base_input.h"
#include "pax/experiments/experiment.h"
#include "pax/experiments/runner.h"
#include "pax/experiments/sharded_state.h"
#include "pax/nn/layer.h"
#include "pax/train/checkpoint_manager.h"
#include "pax/train/console.h"
#include "pax/train/steps.h"
#include "pax/train/summary.h"

namespace pax::experiments {

// The checkpoint's items.
inline constexpr const char* kTrainStateItem = "train_state";
inline constexpr const char* kInputStateItem = "input_state";
inline constexpr const char* kEarlyStoppingItem = "early_stopping";
// {"process_count": N}: a run resumes only with the process count that wrote
// it, since each process's input stream is saved as its own shard.
inline constexpr const char* kProcessesItem = "processes";

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
  std::ostream& out;  // the chief's console; nowhere on the other processes
  std::unique_ptr<nn::Layer> model_layer;
  const nn::BaseModel* model = nullptr;
  std::string config_json;  // written into the job dir and hashed into every checkpoint
  ShardingPlan sharding;    // the axes of the train step; fsdp over the mesh's data axis

  // Checks that the ranks agree, the fields' ranges, the experiment and the
  // mesh; sets the mesh up; builds the model.
  Job(const Config& c, const RunOptions& o);

  bool chief() const { return process == 0; }
  bool multi_process() const { return processes > 1; }
  // "2 processes", or "2 data shards of 4 processes" when processes that
  // differ only on the mdl (or stage) axis read the same batch.
  std::string readers() const;
  std::string path(const std::string& name) const;  // in the job directory
  void check_job_dir() const;
  // config.json and model_summary.txt, so that the job dir documents the run.
  void write_job_files() const;
  // config.json: the resolved config, led by the experiment's name
  // ("$experiment", which --config ignores) so that the directory says what ran.
  std::string config_file_text() const;
  train::CheckpointManagerOptions checkpoint_options() const;
  // The chief's checkpoint manager (the other processes have none); with
  // `every_process` (a sharded train state, which each process saves and
  // restores its blocks of), every process's.
  // `read_only` (eval, decode): restores only, beside a trainer that may be saving.
  void open_checkpoints(std::optional<train::CheckpointManager>& mgr, bool every_process = false,
                        bool read_only = false) const;
  // An input of this process: with several data shards each process reads
  // infeed_host_index = data_shard of num_infeed_hosts = data_shards.
  std::unique_ptr<data::BaseInput> build_input(const HParamsPtr& p) const;
  std::vector<std::unique_ptr<data::BaseInput>> build_inputs(const std::vector<HParamsPtr>& configs) const;
};

// Process 0's value on every process.
int64_t broadcast_from_chief(int64_t value);

// "name value  name value" for the console.
std::string metrics_str(const std::map<std::string, double>& metrics);

// Every eval input once; summaries under eval_test_<name> (none when
// `summaries` is null), a line each on the progress bar or the console.
std::map<std::string, std::map<std::string, double>> run_evals(const Job& job, const train::EvalStep& eval_step,
                                                               const Tree& variables,
                                                               std::vector<std::unique_ptr<data::BaseInput>>& inputs,
                                                               int64_t step, train::JobSummaries* summaries,
                                                               train::ConsoleProgress* progress);

// Every decode input once; samples written to <dir>/<name>_step_<step>.txt
// (none written when `dir` is empty), and an input's predict metrics
// (train/seqio_metrics.h) on the console and under decode_test_<name> in the
// summaries (none when `summaries` is null). Returns the files by input name.
std::map<std::string, std::string> run_decodes(const Job& job, const Tree& variables,
                                               std::vector<std::unique_ptr<data::BaseInput>>& inputs, int64_t step,
                                               train::ConsoleProgress* progress, const std::string& dir,
                                               train::JobSummaries* summaries = nullptr);

// Before anything large is allocated: refuses a run whose train state,
// input batches and largest phase (the train or eval step's intermediates,
// decoding's caches) need more memory than is available, with the numbers
// and the fields to change. `train_step` null: no training; `eval_step`
// null: no eval; `decoding`: this process decodes the decode inputs.
void check_memory_fits(const Job& job, const train::TrainStep& state_maker, const train::TrainStep* train_step,
                       const train::EvalStep* eval_step, bool decoding, const Array& init_key, const Array& step_key);

}  // namespace pax::experiments
