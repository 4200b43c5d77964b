// Loss aggregators: the terms of the loss and their checks.
#include "pax/train/loss_aggregator.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "pax/core/error.h"

namespace pax::train {

std::vector<LossTerm> LossAggregator::terms(const std::string& default_key) const {
  const std::string key = loss_key.empty() ? default_key : loss_key;
  PAX_CHECK(!key.empty(), "LossAggregator.loss_key must name a metric of compute_loss, e.g. total_loss");
  return {{key, 1.0, loss_key.empty() ? "learner.loss_name" : "loss_aggregator.loss_key"}};
}

std::vector<LossTerm> MultiLossAggregator::terms(const std::string&) const {
  PAX_CHECK(!loss_keys.empty(), "MultiLossAggregator.loss_keys must name at least one metric of compute_loss");
  PAX_CHECK(loss_weights.empty() || loss_weights.size() == loss_keys.size(), "MultiLossAggregator.loss_weights has ",
            loss_weights.size(), " entries for ", loss_keys.size(), " loss_keys: give one per key, or none (all 1)");
  std::vector<LossTerm> out;
  std::set<std::string> seen;
  for (size_t i = 0; i < loss_keys.size(); ++i) {
    PAX_CHECK(!loss_keys[i].empty() && seen.insert(loss_keys[i]).second, "MultiLossAggregator.loss_keys[", i, "] is ",
              loss_keys[i].empty() ? "empty" : "repeated ('" + loss_keys[i] + "')",
              ": each key names a different metric");
    const double c = loss_weights.empty() ? 1.0 : loss_weights[i];
    PAX_CHECK(std::isfinite(c), "MultiLossAggregator.loss_weights[", i, "] must be finite, got ", c);
    out.push_back({loss_keys[i], c, "loss_aggregator.loss_keys[" + std::to_string(i) + "]"});
  }
  return out;
}

std::vector<LossTerm> loss_terms(const HParamsPtr& hparams, const std::string& default_key, const std::string& field) {
  if (!hparams) return LossAggregator().terms(default_key);
  auto* aggregator = dynamic_cast<const LossAggregatorHParams*>(hparams.get());
  PAX_CHECK(aggregator, field, " must be a loss aggregator (", registered_hparams_list("loss_aggregator"), "), got ",
            hparams->type_name());
  return aggregator->terms(default_key);
}

void check_loss_keys(const std::vector<LossTerm>& terms, const std::vector<std::string>& metric_names,
                     const std::string& model_name) {
  for (const LossTerm& t : terms) {
    if (std::find(metric_names.begin(), metric_names.end(), t.metric) != metric_names.end()) continue;
    std::string names;
    for (const std::string& n : metric_names) names += (names.empty() ? "" : ", ") + n;
    PAX_FAIL(t.setting, " '", t.metric, "' is not a metric of ", model_name,
             "; its metrics: ", names.empty() ? "(none)" : names);
  }
}

std::optional<double> loss_value(const std::vector<LossTerm>& terms, const std::map<std::string, double>& metrics) {
  if (terms.empty()) return std::nullopt;
  double loss = 0;
  for (const LossTerm& t : terms) {
    auto it = metrics.find(t.metric);
    if (it == metrics.end()) return std::nullopt;
    loss += t.coefficient * it->second;
  }
  return loss;
}

PAX_REGISTER_HPARAMS(LossAggregator, "loss_aggregator");
PAX_REGISTER_HPARAMS(MultiLossAggregator, "loss_aggregator");

}  // namespace pax::train
