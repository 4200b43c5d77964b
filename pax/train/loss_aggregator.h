// Loss aggregators (paxml's base_metrics.LossAggregator and
// MultiLossAggregator, SingleTask's `loss_aggregator`): which of the weighted
// scalar metrics compute_loss returns the learner minimises.
//
//   loss_aggregator = LossAggregator {loss_key = "total_loss"}   // one metric
//   loss_aggregator = MultiLossAggregator {loss_keys = ["xent", "aux"],
//                                          loss_weights = [1.0, 0.1]}
//
// The loss is sum_k loss_weights[k] * loss_k. Across the processes of a
// data-parallel step every loss_k is the weighted mean over all of them (each
// with its own metric weight, renormalised over the processes as paxml does
// under pmap), so a padded shard does not tilt it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pax/config/hparams.h"

namespace pax::train {

// One metric of compute_loss that enters the loss, with its coefficient.
struct LossTerm {
  std::string metric;
  double coefficient = 1.0;
  std::string setting;  // where the name comes from, for errors: "learner.loss_name", "loss_aggregator.loss_keys[1]"
};

struct LossAggregatorHParams : BaseHParams {
  using BaseHParams::visit_fields;
  void visit_fields(const std::function<void(const FieldRef&)>&) override {}
  // The terms of the loss; `default_key` (the learner's loss_name) stands for
  // an unset key. Throws pax::Error for an empty or inconsistent setting.
  virtual std::vector<LossTerm> terms(const std::string& default_key) const = 0;
};

struct LossAggregator : LossAggregatorHParams {
  std::string loss_key;
  PAX_HPARAMS(LossAggregator, LossAggregatorHParams,
              (loss_key, "The metric of compute_loss that is minimised ('': learner.loss_name)."));
  std::vector<LossTerm> terms(const std::string& default_key) const override;
};

struct MultiLossAggregator : LossAggregatorHParams {
  std::vector<std::string> loss_keys;
  std::vector<double> loss_weights;
  PAX_HPARAMS(MultiLossAggregator, LossAggregatorHParams,
              (loss_keys, "The metrics of compute_loss whose weighted sum is minimised."),
              (loss_weights, "A coefficient per loss key (empty: all 1).", range::finite));
  std::vector<LossTerm> terms(const std::string& default_key) const override;
};

// The terms of `hparams` (a LossAggregatorHParams; null: `default_key` alone).
// `field` names the setting in errors.
std::vector<LossTerm> loss_terms(const HParamsPtr& hparams, const std::string& default_key,
                                 const std::string& field = "loss_aggregator");

// Throws pax::Error when a term names a metric that is not among
// `metric_names` (the metrics `model_name`'s compute_loss reports), naming
// the setting, the key and the metrics there are.
void check_loss_keys(const std::vector<LossTerm>& terms, const std::vector<std::string>& metric_names,
                     const std::string& model_name);

// The loss the terms make of logged metric values, sum_k coefficient_k *
// metrics[metric_k] (a summary interval's means: what the console shows as
// the loss); nullopt when a term's metric is not among `metrics`.
std::optional<double> loss_value(const std::vector<LossTerm>& terms, const std::map<std::string, double>& metrics);

}  // namespace pax::train
