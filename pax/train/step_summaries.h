// What a training loop collects of its steps' summaries (TrainStep's
// out["summaries"]) between two summary steps, as Pax does: each scalar
// averaged over the interval's steps, each histogram as of the latest step.
// A summary holding several scalars (a Repeat stacks one per repetition)
// becomes one series per element, "<name>/<i>".
//
//   SummaryAccumulator acc;
//   acc.add(out["summaries"]);                 // every step
//   m.summaries = acc.scalar_means();          // at the summary step
//   m.histograms = acc.histograms();
#pragma once

#include <map>
#include <string>
#include <utility>

#include "pax/core/tree.h"
#include "pax/train/summary.h"

namespace pax::train {

class SummaryAccumulator {
 public:
  // `summaries`: {name: array}; names ending in nn::kHistogramSuffix are
  // histograms (the suffix is dropped from their tag). None adds nothing.
  void add(const Tree& summaries);
  std::map<std::string, double> scalar_means() const;
  std::map<std::string, Histogram> histograms() const;
  bool empty() const { return scalars_.empty() && histograms_.empty(); }

 private:
  std::map<std::string, std::pair<double, int64_t>> scalars_;  // tag -> (sum, count)
  std::map<std::string, Array> histograms_;                    // tag -> latest values
};

}  // namespace pax::train
