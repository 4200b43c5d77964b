// Eval and decode runs over an input (run_eval, run_decode).
#include "pax/train/eval_decode.h"

#include <cmath>
#include <limits>

#include "pax/core/error.h"
#include "pax/dist/process_group.h"
#include "pax/ops/random.h"

namespace pax::train {

void MetricAccumulator::add(const Tree& metrics) {
  PAX_CHECK(metrics.is_dict(), "MetricAccumulator: metrics must be a dict {name: [value, weight]}");
  for (const auto& [name, entry] : metrics.entries()) {
    const double value = nn::metric_value(metrics, name).item<double>();
    const double weight = nn::metric_weight(metrics, name).item<double>();
    auto& [sum, total] = sums_[name];
    if (weight > 0) sum += value * weight;  // a zero-weight NaN (an empty batch) does not poison the mean
    total += weight;
  }
}

std::map<std::string, double> MetricAccumulator::means() const {
  std::map<std::string, double> out;
  for (const auto& [name, st] : sums_)
    out[name] = st.second > 0 ? st.first / st.second : std::numeric_limits<double>::quiet_NaN();
  return out;
}

void MetricAccumulator::sum_across_processes() {
  dist::ProcessGroup& group = dist::process_group();
  if (group.process_count() == 1) return;
  std::vector<double> sums;  // (sum value * weight, sum weight) per metric, in name order
  for (const auto& [name, st] : sums_) {
    sums.push_back(st.first);
    sums.push_back(st.second);
  }
  const std::vector<double> totals =
      group.all_reduce(from_host(sums.data(), Shape{int64_t(sums.size())}, DType::f64)).to_vector<double>();
  size_t i = 0;
  for (auto& [name, st] : sums_) {
    st.first = totals[i++];
    st.second = totals[i++];
  }
}

EvalResult run_eval(const EvalStep& step, const Tree& variables, data::BaseInput& input, bool across_processes) {
  MetricAccumulator acc;
  EvalResult result;
  result.batches = data::for_each_eval_batch(input, [&](const Tree& batch) { acc.add(step(variables, batch).first); });
  if (across_processes) acc.sum_across_processes();
  result.metrics = acc.means();
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
    for (size_t i = 0; i < texts.size(); ++i) {
      if (weights[i] <= 0) continue;
      result.prompts.push_back(prompts[i]);
      result.outputs.push_back(texts[i]);
    }
  });
  return result;
}

}  // namespace pax::train
