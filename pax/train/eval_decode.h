// The eval and decode runs (paxml's programs.py): one run over an input
// with Pax's eval semantics (data::for_each_eval_batch: N batches or one
// epoch, reset afterwards), metrics averaged by their weights, and decoded
// samples as text.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "pax/core/tree.h"
#include "pax/data/base_input.h"
#include "pax/nn/models/base_model.h"
#include "pax/train/steps.h"

namespace pax::train {

// Sums weighted scalar metrics ({name: [value, weight]}) over batches.
class MetricAccumulator {
 public:
  void add(const Tree& metrics);
  // sum(value * weight) / sum(weight) per metric (NaN when the weights sum to 0).
  std::map<std::string, double> means() const;
  bool empty() const { return sums_.empty(); }
  // Replaces the sums with their totals over the processes of the process
  // group (a collective: every process calls it, with the same metric names).
  void sum_across_processes();

 private:
  std::map<std::string, std::pair<double, double>> sums_;  // name -> (sum value * weight, sum weight)
};

struct EvalResult {
  std::map<std::string, double> metrics;  // weighted means over the run
  int64_t batches = 0;
};

// One eval run of `input` (see data::for_each_eval_batch). across_processes:
// each process evaluates its own shard and the metrics are the weighted means
// over all of them (every process calls it).
EvalResult run_eval(const EvalStep& step, const Tree& variables, data::BaseInput& input, bool across_processes = false);

struct DecodeResult {
  std::vector<std::string> prompts;  // the prefix of each real (weight > 0) example
  std::vector<std::string> outputs;  // the whole decoded sequence, prefix included
  int64_t batches = 0;
};

// One decode run of `input`: model.decode on every batch (sampling keys
// folded from `key` per batch), texts through input.ids_to_strings. Padding
// rows (weights 0) are dropped.
DecodeResult run_decode(const nn::BaseModel& model, const Tree& variables, data::BaseInput& input, const Array& key);

}  // namespace pax::train
