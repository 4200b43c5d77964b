// The eval and decode runs (paxml's programs.py): one run over an input
// with Pax's eval semantics (data::for_each_eval_batch: N batches or one
// epoch, reset afterwards), metrics combined as the task's metrics aggregator
// says (weighted means by default), and decoded samples as text, written to
// the job's decode/ directory.
#pragma once

#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "pax/core/tree.h"
#include "pax/data/base_input.h"
#include "pax/nn/models/base_model.h"
#include "pax/train/steps.h"
#include "pax/train/summary.h"

namespace pax::train {

// Combines weighted scalar metrics ({name: [value, weight]}) over batches
// or steps, as a metrics aggregator's rules say.
class MetricAccumulator {
 public:
  // `rules`: which metrics are kept and how each combines (default: every
  // metric's weighted mean).
  explicit MetricAccumulator(MetricRules rules = {}) : rules_(std::move(rules)) {}
  void add(const Tree& metrics);
  // Per kept metric, sum(value * weight) / sum(weight), or the largest value
  // of weight > 0 for a max metric (NaN when the weights sum to 0).
  std::map<std::string, double> values() const;
  bool empty() const { return sums_.empty(); }
  // Combines the sums and maxima with those of the processes of the process
  // group (a collective: every process calls it, with the same metric names).
  void combine_across_processes();

 private:
  struct Sums {
    double weighted = 0, weight = 0;  // sum value * weight, sum weight
    double max = -std::numeric_limits<double>::infinity();
    MetricReduction reduction = MetricReduction::mean;
  };
  MetricRules rules_;
  std::map<std::string, Sums> sums_;
};

struct EvalResult {
  std::map<std::string, double> metrics;  // weighted means over the run
  int64_t batches = 0;
  // The layers' summaries of this process's batches (an EvalStep built with
  // summaries): scalars averaged over the run, histograms of its last batch.
  std::map<std::string, double> summaries;
  std::map<std::string, Histogram> histograms;
};

// One eval run of `input` (see data::for_each_eval_batch), with the
// input's score metrics (train/seqio_metrics.h) among the metrics. across_processes:
// each process evaluates its own shard and the metrics are the weighted means
// over all of them (every process calls it). lockstep (a step whose params
// are sharded, so that every call is a collective): every process runs as
// many steps as the process with the most batches, the others repeating
// their last batch without counting it.
EvalResult run_eval(const EvalStep& step, const Tree& variables, data::BaseInput& input, bool across_processes = false,
                    const MetricRules& rules = {}, bool lockstep = false);

struct DecodeResult {
  std::vector<std::string> prompts;  // the prefix of each real (weight > 0) example
  std::vector<std::string> outputs;  // the whole decoded sequence, prefix included
  std::vector<int64_t> indices;      // each one's example index (the batch's "example_index"; -1 without it)
  int64_t batches = 0;
};

// One decode run of `input`: model.decode on every batch (sampling keys
// folded from `key` per batch), texts through input.ids_to_strings. Padding
// rows (weights 0) are dropped.
DecodeResult run_decode(const nn::BaseModel& model, const Tree& variables, data::BaseInput& input, const Array& key);

// The file of the decode samples of input `name` at `step`: <dir>/<name>_step_<step, 8 digits>.txt.
std::string decode_samples_path(const std::string& dir, const std::string& name, int64_t step);
// Writes `result`'s outputs, one a line, to decode_samples_path (through a
// temporary file and a rename, creating `dir`) and returns that path. A `dir`
// that cannot be written (a regular file, a dangling symlink, read-only) or a
// directory in the file's place is one pax::Error naming it.
std::string write_decode_samples(const std::string& dir, const std::string& name, int64_t step,
                                 const DecodeResult& result);

}  // namespace pax::train
