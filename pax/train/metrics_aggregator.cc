// Metrics aggregators: the rules they stand for.
#include "pax/train/metrics_aggregator.h"

#include "pax/core/error.h"

namespace pax::train {

namespace {

const char* reduction_name(MetricReduction r) { return r == MetricReduction::mean ? "mean" : "max"; }

// `keys` (empty: every metric) reduced by `r`.
void claim(MetricRules& rules, const std::vector<std::string>& keys, MetricReduction r, const char* who) {
  if (keys.empty()) {
    PAX_CHECK(!rules.others || *rules.others == r, who, " with no metric_keys claims every metric for its ",
              reduction_name(r), ", but another aggregator already takes the ", reduction_name(*rules.others),
              " of every metric: give one of them metric_keys");
    rules.others = r;
    return;
  }
  for (const std::string& key : keys) {
    PAX_CHECK(!key.empty(), who, ".metric_keys holds an empty name");
    auto [it, fresh] = rules.named.emplace(key, r);
    PAX_CHECK(fresh || it->second == r, who, " takes the ", reduction_name(r), " of metric '", key,
              "', which another aggregator already takes the ", reduction_name(it->second),
              " of: a metric is logged one way");
  }
}

}  // namespace

std::optional<MetricReduction> MetricRules::rule(const std::string& name) const {
  auto it = named.find(name);
  return it != named.end() ? std::optional(it->second) : others;
}

void MeanMetrics::add_rules(MetricRules& rules) const {
  claim(rules, metric_keys, MetricReduction::mean, "MeanMetrics");
}

void MaxMetrics::add_rules(MetricRules& rules) const { claim(rules, metric_keys, MetricReduction::max, "MaxMetrics"); }

void CompositeMetrics::add_rules(MetricRules& rules) const {
  PAX_CHECK(!metrics_p.empty(), "CompositeMetrics.metrics_p must hold at least one aggregator (",
            registered_hparams_list("metrics"), ")");
  for (size_t i = 0; i < metrics_p.size(); ++i) {
    auto* part = dynamic_cast<const MetricsAggregatorHParams*>(metrics_p[i].get());
    PAX_CHECK(part, "CompositeMetrics.metrics_p[", i, "] must be a metrics aggregator (",
              registered_hparams_list("metrics"), "), got ", metrics_p[i] ? metrics_p[i]->type_name() : "None");
    part->add_rules(rules);
  }
}

MetricRules metric_rules(const HParamsPtr& hparams, const std::string& field) {
  if (!hparams) return {};
  auto* aggregator = dynamic_cast<const MetricsAggregatorHParams*>(hparams.get());
  PAX_CHECK(aggregator, field, " must be a metrics aggregator (", registered_hparams_list("metrics"), "), got ",
            hparams->type_name());
  MetricRules rules{.others = std::nullopt};
  aggregator->add_rules(rules);
  return rules;
}

PAX_REGISTER_HPARAMS(MeanMetrics, "metrics");
PAX_REGISTER_HPARAMS(MaxMetrics, "metrics");
PAX_REGISTER_HPARAMS(CompositeMetrics, "metrics");

}  // namespace pax::train
