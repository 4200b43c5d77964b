// Loss aggregators: the terms of the loss and their checks.
#include "pax/train/loss_aggregator.h"

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

PAX_REGISTER_HPARAMS(LossAggregator, "loss_aggregator");
PAX_REGISTER_HPARAMS(MultiLossAggregator, "loss_aggregator");

}  // namespace pax::train
