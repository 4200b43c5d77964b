// SummaryAccumulator: interval means of scalar summaries, latest histograms.
#include "pax/train/step_summaries.h"

#include <cmath>

#include "pax/core/error.h"
#include "pax/nn/layer.h"

namespace pax::train {

void SummaryAccumulator::add(const Tree& summaries) {
  if (summaries.is_none()) return;
  PAX_CHECK(summaries.is_dict(), "SummaryAccumulator: summaries must be a dict {name: array}, got ", summaries.str());
  const std::string suffix = nn::kHistogramSuffix;
  for (const auto& [name, value] : summaries.entries()) {
    PAX_CHECK(value.is_leaf(), "SummaryAccumulator: summary '", name, "' must be an array");
    if (name.size() > suffix.size() && name.ends_with(suffix)) {
      histograms_[name.substr(0, name.size() - suffix.size())] = value.leaf();
      continue;
    }
    const std::vector<double> values = value.leaf().to_vector<double>();
    for (size_t i = 0; i < values.size(); ++i) {
      auto& [sum, count] = scalars_[values.size() == 1 ? name : name + "/" + std::to_string(i)];
      sum += values[i];
      ++count;
    }
  }
}

std::map<std::string, double> SummaryAccumulator::scalar_means() const {
  std::map<std::string, double> out;
  for (const auto& [tag, sc] : scalars_) out[tag] = sc.first / double(sc.second);
  return out;
}

std::map<std::string, Histogram> SummaryAccumulator::histograms() const {
  std::map<std::string, Histogram> out;
  for (const auto& [tag, values] : histograms_) out[tag] = Histogram::of(values.to_vector<double>());
  return out;
}

}  // namespace pax::train
