// SummaryAccumulator: scalars averaged over the interval (a stacked summary
// as one series per element), histograms from the latest step.
#include "pax/train/step_summaries.h"

#include <gtest/gtest.h>

#include "pax/nn/layer.h"
#include "pax/ops/numpy.h"
#include "pax/testing/testing.h"

namespace pax::train {
namespace {

Tree step_summaries(float entropy, std::vector<float> per_layer, std::vector<float> losses) {
  const int64_t layers = int64_t(per_layer.size()), n = int64_t(losses.size());
  return Tree::dict({{"lm/attention_entropy", scalar(entropy)},
                     {"lm/repeat/sub/output_rms", array(per_layer, {layers})},
                     {std::string("lm/sequence_xent") + nn::kHistogramSuffix, array(losses, {n})}});
}

TEST(SummaryAccumulator, ScalarMeansAndTheLatestHistogram) {
  SummaryAccumulator acc;
  EXPECT_TRUE(acc.empty());
  acc.add(Tree());  // a step without summaries
  acc.add(step_summaries(1.0f, {2.0f, 4.0f}, {9, 9}));
  acc.add(step_summaries(2.0f, {4.0f, 8.0f}, {1, 2, 3}));
  const auto means = acc.scalar_means();
  EXPECT_EQ(means, (std::map<std::string, double>{{"lm/attention_entropy", 1.5},
                                                  {"lm/repeat/sub/output_rms/0", 3.0},
                                                  {"lm/repeat/sub/output_rms/1", 6.0}}));
  const auto histograms = acc.histograms();
  ASSERT_EQ(histograms.size(), 1u);
  EXPECT_EQ(histograms.at("lm/sequence_xent"), Histogram::of({1, 2, 3})) << "the suffix is dropped from the tag";
  EXPECT_PAX_ERROR(acc.add(Tree::list({Tree(scalar(1.0f))})), "summaries must be a dict");
}

}  // namespace
}  // namespace pax::train
