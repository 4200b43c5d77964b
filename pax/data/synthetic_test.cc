// SyntheticInput: shapes and ranges, determinism per step and host, finite
// epochs, state / restore, and config errors.
#include "pax/data/synthetic.h"

#include <gtest/gtest.h>

#include "pax/testing/testing.h"

namespace pax::data {
namespace {

SyntheticInput::HParams lm(int64_t batch, int64_t t, int64_t vocab) {
  SyntheticInput::HParams hp;
  hp.batch_size = batch;
  hp.seq_length = t;
  hp.vocab_size = vocab;
  hp.input_random_seed = 11;
  return hp;
}

std::vector<int32_t> ids(BaseInput& input) { return input.get_next()["ids"].leaf().to_vector<int32_t>(); }

TEST(SyntheticInput, LmBatchesHaveShiftedLabelsInRange) {
  SyntheticInput input(lm(3, 16, 50));
  Tree b = input.get_next();
  EXPECT_EQ(b.keys(), (std::vector<std::string>{"ids", "labels", "paddings", "weights"}));
  EXPECT_EQ(b["ids"].leaf().aval().str(), "i32[3,16]");
  EXPECT_EQ(b["labels"].leaf().aval().str(), "i32[3,16]");
  EXPECT_EQ(b["paddings"].leaf().aval().str(), "f32[3,16]");
  std::vector<int32_t> x = b["ids"].leaf().to_vector<int32_t>(), y = b["labels"].leaf().to_vector<int32_t>();
  std::vector<int> counts(50, 0);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_TRUE(x[i] >= 0 && x[i] < 50 && y[i] >= 0 && y[i] < 50);
    ++counts[size_t(x[i])];
    if (i % 16 != 15) EXPECT_EQ(y[i], x[i + 1]);
  }
  EXPECT_GT(std::count_if(counts.begin(), counts.end(), [](int c) { return c > 0; }), 20);
  EXPECT_TRUE(testing::all_close(b["paddings"].leaf(), std::vector<double>(48, 0.0)));
  EXPECT_TRUE(testing::all_close(b["weights"].leaf(), std::vector<double>(48, 1.0)));
}

TEST(SyntheticInput, DeterministicPerStepAndDifferentPerHost) {
  SyntheticInput a(lm(2, 8, 1000)), b(lm(2, 8, 1000));
  const std::vector<int32_t> a0 = ids(a), a1 = ids(a);
  EXPECT_EQ(ids(b), a0);
  EXPECT_EQ(ids(b), a1);
  EXPECT_NE(a0, a1);
  a.reset();
  EXPECT_EQ(ids(a), a0);
  SyntheticInput::HParams other = lm(2, 8, 1000);
  other.num_infeed_hosts = 2;
  other.infeed_host_index = 1;
  SyntheticInput h1(other);
  EXPECT_NE(ids(h1), a0);
  other.input_random_seed = 12;
  other.infeed_host_index = 0;
  SyntheticInput s12(other);
  EXPECT_NE(ids(s12), a0);
  // A row does not depend on the batch size.
  SyntheticInput wide(lm(4, 8, 1000));
  std::vector<int32_t> w = ids(wide);
  EXPECT_EQ(std::vector<int32_t>(w.begin(), w.begin() + 16), a0);
}

// The hosts of a run read, together, what one host reads with their summed
// batch: host h's rows are rows [h * B, (h + 1) * B) of it, at every step.
TEST(SyntheticInput, HostsReadSlicesOfTheGlobalBatch) {
  SyntheticInput whole(lm(6, 8, 1000));
  std::vector<std::unique_ptr<SyntheticInput>> hosts;
  for (int64_t h = 0; h < 3; ++h) {
    SyntheticInput::HParams hp = lm(2, 8, 1000);
    hp.num_infeed_hosts = 3;
    hp.infeed_host_index = h;
    hosts.push_back(std::make_unique<SyntheticInput>(hp));
  }
  for (int step = 0; step < 3; ++step) {
    const std::vector<int32_t> all = ids(whole);
    std::vector<int32_t> joined;
    for (auto& host : hosts) {
      const std::vector<int32_t> mine = ids(*host);
      joined.insert(joined.end(), mine.begin(), mine.end());
    }
    EXPECT_EQ(joined, all) << "step " << step;
  }
}

TEST(SyntheticInput, FiniteEpochsEndOrRepeat) {
  SyntheticInput::HParams hp = lm(1, 4, 100);
  hp.num_batches = 3;
  hp.repeat = false;
  SyntheticInput finite(hp);
  std::vector<std::vector<int32_t>> epoch = {ids(finite), ids(finite), ids(finite)};
  EXPECT_THROW(finite.get_next(), OutOfRange);
  finite.reset();
  EXPECT_EQ(ids(finite), epoch[0]);
  hp.repeat = true;
  SyntheticInput repeating(hp);
  for (int i = 0; i < 7; ++i) EXPECT_EQ(ids(repeating), epoch[size_t(i % 3)]) << i;
  EXPECT_EQ(repeating.state()["epoch"].leaf().item<int64_t>(), 2);
  EXPECT_EQ(repeating.state()["position"].leaf().item<int64_t>(), 1);
}

TEST(SyntheticInput, StateRestoreContinuesTheStream) {
  SyntheticInput a(lm(2, 8, 1000));
  for (int i = 0; i < 5; ++i) ids(a);
  SyntheticInput b(lm(2, 8, 1000));
  b.restore_state(a.state());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(ids(b), ids(a));
  EXPECT_PAX_ERROR(b.restore_state(int_state({{"epoch", 0}})), "has no 'position'");
}

TEST(SyntheticInput, ClassificationBatches) {
  SyntheticInput::HParams hp;
  hp.task = SyntheticTask::classification;
  hp.batch_size = 5;
  hp.input_shape = {4, 3};
  hp.num_classes = 3;
  SyntheticInput input(hp);
  Tree b = input.get_next();
  EXPECT_EQ(b["inputs"].leaf().aval().str(), "f32[5,4,3]");
  EXPECT_EQ(b["labels"].leaf().aval().str(), "i32[5]");
  for (float v : b["inputs"].leaf().to_vector<float>()) ASSERT_TRUE(v >= 0 && v < 1);
  for (int32_t l : b["labels"].leaf().to_vector<int32_t>()) ASSERT_TRUE(l >= 0 && l < 3);
  EXPECT_TRUE(testing::all_close(b["weights"].leaf(), {1, 1, 1, 1, 1}));
}

TEST(SyntheticInput, ExplainsBadConfigs) {
  SyntheticInput::HParams hp = lm(1, 4, 0);
  EXPECT_PAX_ERROR(SyntheticInput{hp}, "vocab_size must be >= 1");
  hp = lm(1, 4, 10);
  hp.repeat = false;
  EXPECT_PAX_ERROR(SyntheticInput{hp}, "repeat = false needs num_batches");
  hp.num_batches = 0;
  EXPECT_PAX_ERROR(SyntheticInput{hp}, "num_batches must be >= 1");
}

}  // namespace
}  // namespace pax::data
