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
  std::optional<MetricReduction> rule(const std::string& name) const;
};

struct MetricsAggregatorHParams : BaseHParams {
  using BaseHParams::visit_fields;
  void visit_fields(const std::function<void(const FieldRef&)>&) override {}
  // Adds this aggregator's rules; throws pax::Error for a metric claimed
  // twice with different reductions.
  virtual void add_rules(MetricRules& rules) const = 0;
};

struct MeanMetrics : MetricsAggregatorHParams {
  std::vector<std::string> metric_keys;
  PAX_HPARAMS(MeanMetrics, MetricsAggregatorHParams,
              (metric_keys, "Metrics averaged (weighted) and logged (empty: all)."));
  void add_rules(MetricRules& rules) const override;
};

struct MaxMetrics : MetricsAggregatorHParams {
  std::vector<std::string> metric_keys;
  PAX_HPARAMS(MaxMetrics, MetricsAggregatorHParams,
              (metric_keys, "Metrics whose largest value is logged (empty: all)."));
  void add_rules(MetricRules& rules) const override;
};

struct CompositeMetrics : MetricsAggregatorHParams {
  std::vector<HParamsPtr> metrics_p;
  PAX_HPARAMS(CompositeMetrics, MetricsAggregatorHParams,
              (metrics_p, "Aggregators (MeanMetrics, MaxMetrics) each with its own metric_keys."));
  void add_rules(MetricRules& rules) const override;
};

// The rules of `hparams` (a MetricsAggregatorHParams; null: every metric's
// weighted mean). `field` names the setting in errors.
MetricRules metric_rules(const HParamsPtr& hparams, const std::string& field = "metrics");

}  // namespace pax::train
