// Metrics aggregators: the rules they stand for.
#include "pax/train/metrics_aggregator.h"

#include <algorithm>

#include "pax/core/error.h"

namespace pax::train {

namespace {

const char* reduction_name(MetricReduction r) { return r == MetricReduction::mean ? "mean" : "max"; }

// `keys` (empty: every metric) reduced by `r`; `path` is the aggregator's
// place in the config.
void claim(MetricRules& rules, const std::vector<std::string>& keys, MetricReduction r, const char* who,
           const std::string& path) {
  if (keys.empty()) {
    PAX_CHECK(!rules.others || *rules.others == r, who, " with no metric_keys claims every metric for its ",
              reduction_name(r), ", but another aggregator already takes the ", reduction_name(*rules.others),
              " of every metric: give one of them metric_keys");
    rules.others = r;
    return;
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string& key = keys[i];
    PAX_CHECK(!key.empty(), who, ".metric_keys holds an empty name");
    auto [it, fresh] = rules.named.emplace(key, r);
    PAX_CHECK(fresh || it->second == r, who, " takes the ", reduction_name(r), " of metric '", key,
              "', which another aggregator already takes the ", reduction_name(it->second),
              " of: a metric is logged one way");
    rules.settings.emplace(key, path + ".metric_keys[" + std::to_string(i) + "]");
  }
}

}  // namespace

std::optional<MetricReduction> MetricRules::rule(const std::string& name) const {
  auto it = named.find(name);
  return it != named.end() ? std::optional(it->second) : others;
}

void MeanMetrics::add_rules(MetricRules& rules, const std::string& path) const {
  claim(rules, metric_keys, MetricReduction::mean, "MeanMetrics", path);
}

void MaxMetrics::add_rules(MetricRules& rules, const std::string& path) const {
  claim(rules, metric_keys, MetricReduction::max, "MaxMetrics", path);
}

void CompositeMetrics::add_rules(MetricRules& rules, const std::string& path) const {
  PAX_CHECK(!metrics_p.empty(), "CompositeMetrics.metrics_p must hold at least one aggregator (",
            registered_hparams_list("metrics"), ")");
  for (size_t i = 0; i < metrics_p.size(); ++i) {
    auto* part = dynamic_cast<const MetricsAggregatorHParams*>(metrics_p[i].get());
    PAX_CHECK(part, "CompositeMetrics.metrics_p[", i, "] must be a metrics aggregator (",
              registered_hparams_list("metrics"), "), got ", metrics_p[i] ? metrics_p[i]->type_name() : "None");
    part->add_rules(rules, path + ".metrics_p[" + std::to_string(i) + "]");
  }
}

MetricRules metric_rules(const HParamsPtr& hparams, const std::string& field) {
  if (!hparams) return {};
  auto* aggregator = dynamic_cast<const MetricsAggregatorHParams*>(hparams.get());
  PAX_CHECK(aggregator, field, " must be a metrics aggregator (", registered_hparams_list("metrics"), "), got ",
            hparams->type_name());
  MetricRules rules{.others = std::nullopt};
  aggregator->add_rules(rules, field);
  return rules;
}

void check_metric_keys(const MetricRules& rules, const std::vector<std::string>& metric_names,
                       const std::string& model_name) {
  for (const auto& [key, reduction] : rules.named) {
    if (std::find(metric_names.begin(), metric_names.end(), key) != metric_names.end()) continue;
    std::string names;
    for (const std::string& n : metric_names) names += (names.empty() ? "" : ", ") + n;
    auto where = rules.settings.find(key);
    PAX_FAIL(where != rules.settings.end() ? where->second : "metrics.metric_keys", " '", key, "' is not a metric of ",
             model_name, ", so nothing would be logged for it; its metrics: ", names.empty() ? "(none)" : names);
  }
}

PAX_REGISTER_HPARAMS(MeanMetrics, "metrics");
PAX_REGISTER_HPARAMS(MaxMetrics, "metrics");
PAX_REGISTER_HPARAMS(CompositeMetrics, "metrics");

}  // namespace pax::train
