// Eval and decode runs over an input (run_eval, run_decode) and the decode
// samples' files.
#include "pax/train/eval_decode.h"

#include "pax/train/seqio_metrics.h"
#include "pax/train/step_summaries.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "pax/core/error.h"
#include "pax/data/file_io.h"
#include "pax/dist/process_group.h"
#include "pax/ops/random.h"
#include "pax/train/fs_util.h"

namespace pax::train {

void MetricAccumulator::add(const Tree& metrics) {
  PAX_CHECK(metrics.is_dict(), "MetricAccumulator: metrics must be a dict {name: [value, weight]}");
  for (const auto& [name, entry] : metrics.entries()) {
    const std::optional<MetricReduction> reduction = rules_.rule(name);
    if (!reduction) continue;
    const double value = nn::metric_value(metrics, name).item<double>();
    const double weight = nn::metric_weight(metrics, name).item<double>();
    Sums& s = sums_[name];
    s.reduction = *reduction;
    if (weight > 0) {  // a zero-weight NaN (an empty batch) does not poison the result
      s.weighted += value * weight;
      s.max = std::max(s.max, value);
    }
    s.weight += weight;
  }
}

std::map<std::string, double> MetricAccumulator::values() const {
  std::map<std::string, double> out;
  for (const auto& [name, s] : sums_) {
    if (!(s.weight > 0)) {
      out[name] = std::numeric_limits<double>::quiet_NaN();
    } else {
      out[name] = s.reduction == MetricReduction::max ? s.max : s.weighted / s.weight;
    }
  }
  return out;
}

void MetricAccumulator::combine_across_processes() {
  dist::ProcessGroup& group = dist::process_group();
  if (group.process_count() == 1) return;
  std::vector<double> sums, maxima;  // in name order
  for (const auto& [name, s] : sums_) {
    sums.push_back(s.weighted);
    sums.push_back(s.weight);
    maxima.push_back(s.max);
  }
  auto reduce = [&](const std::vector<double>& v, dist::ReduceOp op) {
    return group.all_reduce(from_host(v.data(), Shape{int64_t(v.size())}, DType::f64), op).to_vector<double>();
  };
  const std::vector<double> total = reduce(sums, dist::ReduceOp::sum), largest = reduce(maxima, dist::ReduceOp::max);
  size_t i = 0;
  for (auto& [name, s] : sums_) {
    s.weighted = total[2 * i];
    s.weight = total[2 * i + 1];
    s.max = largest[i++];
  }
}

namespace {

// for_each_eval_batch with every process calling `fn` equally often: a
// process out of batches calls `repeat` with its last one. Each round the
// processes agree whether any still has a batch, and whether one has none
// at all to repeat (then every process throws, none waits in a collective).
int64_t for_each_eval_batch_in_lockstep(data::BaseInput& input, const std::function<void(const Tree&)>& fn,
                                        const std::function<void(const Tree&)>& repeat) {
  const std::optional<int64_t> limit = data::eval_run_batches(input.base_hparams());
  int64_t count = 0;
  std::optional<Tree> last;
  bool exhausted = false;  // an input is not read again after its OutOfRange
  for (int64_t calls = 0; !limit || calls < *limit; ++calls) {
    std::optional<Tree> batch;
    if (!exhausted) {
      try {
        batch = input.get_next();
      } catch (const data::OutOfRange&) {
        exhausted = true;
      }
    }
    const std::vector<int32_t> mine = {batch ? 1 : 0, !batch && !last ? 1 : 0};
    const std::vector<int32_t> any =
        dist::process_group().all_reduce(array(mine, Shape{2}), dist::ReduceOp::max).to_vector<int32_t>();
    if (any[0] == 0) break;
    PAX_CHECK(any[1] == 0, "eval input '", input.base_hparams().name,
              "': a process read no batch from its shard while others did; with sharded parameters every process "
              "must read at least one (lower the batch size or give every process data)");
    if (batch) {
      fn(*batch);
      last = std::move(batch);
      ++count;
    } else {
      repeat(*last);
    }
  }
  if (input.base_hparams().reset_for_eval) input.reset();
  return count;
}

}  // namespace

EvalResult run_eval(const EvalStep& step, const Tree& variables, data::BaseInput& input, bool across_processes,
                    const MetricRules& rules, bool lockstep) {
  MetricAccumulator acc(rules), input_metrics;
  SummaryAccumulator summaries;
  EvalResult result;
  const data::BaseInput::HParams& hp = input.base_hparams();
  auto add = [&](const Tree& batch) {
    const EvalStep::Outputs out = step.evaluate(variables, batch);
    acc.add(out.metrics);
    if (!hp.score_metrics.empty()) input_metrics.add(score_metrics(hp, batch, out.per_example));
    summaries.add(out.summaries);
  };
  result.batches = lockstep ? for_each_eval_batch_in_lockstep(input, add, [&](const Tree& b) { step(variables, b); })
                            : data::for_each_eval_batch(input, add);
  if (across_processes) acc.combine_across_processes();
  if (across_processes && !hp.score_metrics.empty()) input_metrics.combine_across_processes();
  result.metrics = acc.values();
  for (const auto& [name, value] : input_metrics.values()) result.metrics[name] = value;
  result.summaries = summaries.scalar_means();
  result.histograms = summaries.histograms();
  return result;
}

DecodeResult run_decode(const nn::BaseModel& model, const Tree& variables, data::BaseInput& input, const Array& key) {
  DecodeResult result;
  int64_t index = 0;
  result.batches = data::for_each_eval_batch(input, [&](const Tree& batch) {
    Tree out = decode_batch(model, variables, batch, random::fold_in(key, index++));
    const Array& ids = out["output_ids"].leaf();
    std::vector<std::string> texts = input.ids_to_strings(ids, out["decode_lengths"].leaf());
    std::vector<std::string> prompts =
        batch.contains("prefix") ? input.ids_to_strings(batch["prefix"].leaf(), batch["prefix_lengths"].leaf())
                                 : std::vector<std::string>(texts.size());
    std::vector<float> weights(texts.size(), 1.0f);
    if (batch.contains("weights") && batch["weights"].leaf().ndim() == 1)
      weights = batch["weights"].leaf().astype(DType::f32).to_vector<float>();
    std::vector<int64_t> indices(texts.size(), -1);
    if (batch.contains("example_index"))
      indices = batch["example_index"].leaf().astype(DType::i64).to_vector<int64_t>();
    for (size_t i = 0; i < texts.size(); ++i) {
      if (weights[i] <= 0) continue;
      result.prompts.push_back(prompts[i]);
      result.outputs.push_back(texts[i]);
      result.indices.push_back(indices[i]);
    }
  });
  return result;
}

std::string decode_samples_path(const std::string& dir, const std::string& name, int64_t step) {
  PAX_CHECK(!dir.empty(), "decode samples: the output directory must not be empty (input '", name, "')");
  PAX_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..",
            "decode samples: the input's name must be a plain file name such as \"kjv\", got \"", name, "\"");
  return fs::join(dir, fmt::format("{}_step_{:08d}.txt", name, step));
}

std::string write_decode_samples(const std::string& dir, const std::string& name, int64_t step,
                                 const DecodeResult& result) {
  const std::string path = decode_samples_path(dir, name, step);
  // Checked first: write_file_atomic's own failure would name its temporary
  // file and a bare system error, not the path at fault.
  fs::ensure_writable_file(path, "decode samples");
  std::string text;
  for (const std::string& output : result.outputs) text += output + "\n";
  data::write_file_atomic(path, text);
  return path;
}

}  // namespace pax::train
