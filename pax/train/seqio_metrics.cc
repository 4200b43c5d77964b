// The registry of input-declared metrics and the built-in ones.
#include "pax/train/seqio_metrics.h"

#include <algorithm>
#include <map>
#include <mutex>

#include "pax/core/error.h"
#include "pax/ops/numpy.h"

namespace pax::train {
namespace {

struct Registry {
  std::mutex mu;
  std::map<std::string, PredictMetricFn> predict;
  std::map<std::string, ScoreMetricFn> score;
};

Registry& registry() {
  static Registry r;
  return r;
}

template <class Map>
std::string names_of(const Map& map) {
  std::string out;
  for (const auto& [name, fn] : map) out += (out.empty() ? "" : ", ") + name;
  return out.empty() ? "none" : out;
}

Tree weighted(double value, double weight) { return Tree::list({Tree(scalar(value)), Tree(scalar(weight))}); }

// 100 for an example whose prediction is its target, else 0 (T5's
// exact_match / sequence_accuracy, in percent).
Tree exact_match(const std::vector<std::vector<int32_t>>& targets,
                 const std::vector<std::vector<int32_t>>& predictions) {
  double matched = 0;
  for (size_t i = 0; i < targets.size(); ++i) matched += targets[i] == predictions[i];
  const double n = double(targets.size());
  return Tree::dict({{"exact_match", weighted(n > 0 ? 100.0 * matched / n : 0.0, n)}});
}

// The percentage of target tokens the prediction has at the same position,
// over every target token of the run.
Tree token_accuracy(const std::vector<std::vector<int32_t>>& targets,
                    const std::vector<std::vector<int32_t>>& predictions) {
  double matched = 0, total = 0;
  for (size_t i = 0; i < targets.size(); ++i) {
    total += double(targets[i].size());
    for (size_t t = 0; t < targets[i].size() && t < predictions[i].size(); ++t)
      matched += targets[i][t] == predictions[i][t];
  }
  return Tree::dict({{"token_accuracy", weighted(total > 0 ? 100.0 * matched / total : 0.0, total)}});
}

// The mean log-likelihood of the batch's sequences (SeqIO's scores):
// -sum_t xent * weight per sequence with any weight, from a language model's
// per-token "xent".
Tree log_likelihood(const Tree& batch, const Tree& per_example) {
  PAX_CHECK(per_example.is_dict() && per_example.contains("xent"),
            "score metric log_likelihood: the model's per-example outputs have no per-token 'xent' (a language "
            "model's have); got ",
            per_example.str());
  const Array xent = per_example["xent"].leaf().astype(DType::f64);  // (B, T)
  Array w = batch.contains("weights")    ? batch["weights"].leaf().astype(DType::f64)
            : batch.contains("paddings") ? 1.0 - batch["paddings"].leaf().astype(DType::f64)
                                         : ones(xent.shape(), DType::f64);
  const std::vector<double> ll = (-sum(xent * w, -1)).to_vector<double>();
  const std::vector<double> has = sum(w, -1).to_vector<double>();
  double total = 0, count = 0;
  for (size_t b = 0; b < ll.size(); ++b)
    if (has[b] > 0) total += ll[b], count += 1;
  return Tree::dict({{"log_likelihood", weighted(count > 0 ? total / count : 0.0, count)}});
}

const bool kBuiltins = [] {
  register_predict_metric("exact_match", exact_match);
  register_predict_metric("token_accuracy", token_accuracy);
  register_score_metric("log_likelihood", log_likelihood);
  return true;
}();

// Every named function of `map` applied to `args`, their metrics in one dict.
template <class Fn, class... Args>
Tree apply_all(const std::map<std::string, Fn>& map, const std::vector<std::string>& names, const Args&... args) {
  Tree out = Tree::dict();
  for (const std::string& name : names) {
    Fn fn;
    {
      std::lock_guard<std::mutex> lock(registry().mu);
      fn = map.at(name);
    }
    const Tree metrics = fn(args...);
    for (const auto& [metric, value] : metrics.entries()) out.set(metric, value);
  }
  return out;
}

}  // namespace

void register_predict_metric(const std::string& name, PredictMetricFn fn) {
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().predict[name] = std::move(fn);
}

void register_score_metric(const std::string& name, ScoreMetricFn fn) {
  std::lock_guard<std::mutex> lock(registry().mu);
  registry().score[name] = std::move(fn);
}

void check_input_metrics(const data::BaseInput::HParams& input, const std::string& field) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  for (const std::string& name : input.predict_metrics)
    PAX_CHECK(r.predict.count(name), field, ".predict_metrics: unknown metric '", name,
              "'; the predict metrics are: ", names_of(r.predict));
  for (const std::string& name : input.score_metrics)
    PAX_CHECK(r.score.count(name), field, ".score_metrics: unknown metric '", name,
              "'; the score metrics are: ", names_of(r.score));
}

Tree predict_metrics(const data::BaseInput& input, const std::vector<std::string>& prompts,
                     const std::vector<std::string>& outputs, const std::vector<int64_t>& indices,
                     const std::function<std::vector<int32_t>(const std::string&)>& tokenize) {
  const data::BaseInput::HParams& hp = input.base_hparams();
  if (hp.predict_metrics.empty()) return Tree::dict();
  const std::vector<std::string>& all_targets = input.targets();
  PAX_CHECK(indices.size() == outputs.size() && prompts.size() == outputs.size(), input.description(),
            ": predict metrics need each decoded example's index (", indices.size(), " indices, ", outputs.size(),
            " outputs)");
  std::vector<std::vector<int32_t>> targets, predictions;
  for (size_t i = 0; i < outputs.size(); ++i) {
    PAX_CHECK(indices[i] >= 0 && size_t(indices[i]) < all_targets.size(), input.description(), ": example ", indices[i],
              " has no target (", all_targets.size(), " targets)");
    targets.push_back(tokenize(all_targets[size_t(indices[i])]));
    const std::string& text = outputs[i];
    std::vector<int32_t> continuation = tokenize(text.starts_with(prompts[i]) ? text.substr(prompts[i].size()) : text);
    continuation.resize(std::min(continuation.size(), targets.back().size()));
    predictions.push_back(std::move(continuation));
  }
  return apply_all(registry().predict, hp.predict_metrics, targets, predictions);
}

Tree score_metrics(const data::BaseInput::HParams& input, const Tree& batch, const Tree& per_example) {
  return apply_all(registry().score, input.score_metrics, batch, per_example);
}

}  // namespace pax::train
