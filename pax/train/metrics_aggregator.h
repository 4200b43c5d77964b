// Metrics aggregators (paxml's base_metrics.MeanMetrics, MaxMetrics and
// CompositeMetrics, SingleTask's `metrics`): which of the weighted scalar
// metrics compute_loss returns are logged, and how each combines over the
// processes of a data-parallel step, the steps of a summary interval and the
// batches of an eval run.
//
//   metrics = MeanMetrics {}                               // every metric, weighted mean (the default)
//   metrics = MaxMetrics {metric_keys = ["max_logit"]}     // only max_logit, the largest value
//   metrics = CompositeMetrics {metrics_p = [MeanMetrics {metric_keys = ["loss"]},
//                                            MaxMetrics {metric_keys = ["max_logit"]}]}
//
// A mean is sum(value * weight) / sum(weight); a max is the largest value
// whose weight is > 0. Either way the weights add up, and a zero-weight
// value (a NaN of an empty batch) counts for nothing. `metric_keys` empty
// means every metric; listed keys take precedence over such a catch-all.
// A listed key must be a metric of the model: check_metric_keys refuses
// any other, before training where the run can tell and at the first
// step's trace otherwise.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "pax/config/hparams.h"

namespace pax::train {

enum class MetricReduction { mean, max };

// What to do with each metric name.
struct MetricRules {
  std::map<std::string, MetricReduction> named;
  // Names not in `named`: this reduction, or dropped (not logged) when unset.
  std::optional<MetricReduction> others = MetricReduction::mean;
  // Where each of `named` is set, for errors: "metrics.metric_keys[0]".
  std::map<std::string, std::string> settings;
  std::optional<MetricReduction> rule(const std::string& name) const;
};

struct MetricsAggregatorHParams : BaseHParams {
  using BaseHParams::visit_fields;
  void visit_fields(const std::function<void(const FieldRef&)>&) override {}
  // Adds this aggregator's rules (`path`: where it sits in the config, for
  // errors); throws pax::Error for a metric claimed twice with different
  // reductions.
  virtual void add_rules(MetricRules& rules, const std::string& path) const = 0;
};

struct MeanMetrics : MetricsAggregatorHParams {
  std::vector<std::string> metric_keys;
  PAX_HPARAMS(MeanMetrics, MetricsAggregatorHParams,
              (metric_keys, "Metrics averaged (weighted) and logged (empty: all)."));
  void add_rules(MetricRules& rules, const std::string& path) const override;
};

struct MaxMetrics : MetricsAggregatorHParams {
  std::vector<std::string> metric_keys;
  PAX_HPARAMS(MaxMetrics, MetricsAggregatorHParams,
              (metric_keys, "Metrics whose largest value is logged (empty: all)."));
  void add_rules(MetricRules& rules, const std::string& path) const override;
};

struct CompositeMetrics : MetricsAggregatorHParams {
  std::vector<HParamsPtr> metrics_p;
  PAX_HPARAMS(CompositeMetrics, MetricsAggregatorHParams,
              (metrics_p, "Aggregators (MeanMetrics, MaxMetrics) each with its own metric_keys."));
  void add_rules(MetricRules& rules, const std::string& path) const override;
};

// The rules of `hparams` (a MetricsAggregatorHParams; null: every metric's
// weighted mean). `field` names the setting in errors.
MetricRules metric_rules(const HParamsPtr& hparams, const std::string& field = "metrics");

// Throws pax::Error when `rules` name a metric that is not among
// `metric_names` (the metrics `model_name`'s compute_loss reports), naming
// the setting, the key and the metrics there are: such a key would log
// nothing.
void check_metric_keys(const MetricRules& rules, const std::vector<std::string>& metric_names,
                       const std::string& model_name);

}  // namespace pax::train
