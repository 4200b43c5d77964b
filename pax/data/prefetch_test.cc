// PrefetchInput: the same stream as the wrapped input, state() of consumed
// batches only (exact resume), errors in order, reset / restore while the
// worker runs ahead, and clean shutdown.
#include "pax/data/prefetch.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <thread>

#include "pax/data/indexed_input.h"
#include "pax/testing/testing.h"

namespace pax::data {
namespace {

ArrayInput::HParams params(int64_t batch_size, bool repeat) {
  ArrayInput::HParams hp;
  hp.batch_size = batch_size;
  hp.repeat = repeat;
  hp.shuffle = true;
  hp.input_random_seed = 5;
  return hp;
}

std::unique_ptr<BaseInput> numbers(int64_t n, const ArrayInput::HParams& hp) {
  std::vector<int32_t> x(static_cast<size_t>(n));
  std::iota(x.begin(), x.end(), 0);
  return std::make_unique<ArrayInput>(hp, Tree::dict({{"x", array(x)}}));
}

std::vector<int32_t> next_x(BaseInput& input) { return input.get_next()["x"].leaf().to_vector<int32_t>(); }

std::vector<std::vector<int32_t>> read(BaseInput& input, int n) {
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) out.push_back(next_x(input));
  return out;
}

// Gives the worker time to fill its queue, so that it has run ahead of the
// consumer (results never depend on it; it only makes the tests meaningful).
void let_worker_run() { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }

bool same_state(const Tree& a, const Tree& b) {
  if (a.keys() != b.keys()) return false;
  for (const std::string& k : a.keys()) {
    if (a[k].leaf().item<int64_t>() != b[k].leaf().item<int64_t>()) return false;
  }
  return true;
}

TEST(Prefetch, YieldsTheSameStreamAsTheWrappedInput) {
  auto direct = numbers(23, params(3, true));
  PrefetchInput prefetched(numbers(23, params(3, true)), 4);
  EXPECT_EQ(prefetched.buffer_size(), 4);
  EXPECT_EQ(read(prefetched, 20), read(*direct, 20));
}

TEST(Prefetch, StateCountsConsumedBatchesNotPrefetchedOnes) {
  auto direct = numbers(23, params(3, true));
  PrefetchInput prefetched(numbers(23, params(3, true)), 8);
  EXPECT_TRUE(same_state(prefetched.state(), direct->state()));
  read(prefetched, 3);
  read(*direct, 3);
  let_worker_run();
  const Tree saved = prefetched.state();
  EXPECT_TRUE(same_state(saved, direct->state()));
  const auto expected = read(*direct, 12);

  // A resumed run, with or without prefetching, continues exactly.
  auto plain = numbers(23, params(3, true));
  plain->restore_state(saved);
  EXPECT_EQ(read(*plain, 12), expected);
  PrefetchInput resumed(numbers(23, params(3, true)), 8);
  resumed.restore_state(saved);
  EXPECT_TRUE(same_state(resumed.state(), saved));
  EXPECT_EQ(read(resumed, 12), expected);
  // Restoring the running one rewinds it past what it had prefetched.
  let_worker_run();
  prefetched.restore_state(saved);
  EXPECT_EQ(read(prefetched, 12), expected);
}

TEST(Prefetch, OutOfRangeComesAfterTheLastBatchAndStaysUntilReset) {
  auto direct = numbers(5, params(2, false));
  PrefetchInput prefetched(numbers(5, params(2, false)), 8);
  let_worker_run();
  const auto epoch = read(*direct, 3);
  EXPECT_EQ(read(prefetched, 3), epoch);
  EXPECT_THROW(prefetched.get_next(), OutOfRange);
  EXPECT_THROW(prefetched.get_next(), OutOfRange);
  EXPECT_EQ(prefetched.state()["position"].leaf().item<int64_t>(), 6);
  prefetched.reset();
  EXPECT_EQ(read(prefetched, 3), epoch);
  EXPECT_THROW(prefetched.get_next(), OutOfRange);
}

// An input that fails at a given batch, and optionally reads slowly.
class FlakyInput : public BaseInput {
 public:
  struct HParams : BaseInput::HParams {
    PAX_HPARAMS_NO_FIELDS(TestFlakyInput, BaseInput::HParams);
  };
  FlakyInput(int fail_at, int sleep_ms) : BaseInput(HParams()), fail_at_(fail_at), sleep_ms_(sleep_ms) {}
  Tree get_next() override {
    if (sleep_ms_) std::this_thread::sleep_for(std::chrono::milliseconds(sleep_ms_));
    if (step_ == fail_at_) throw Error("flaky: disk on fire");
    return Tree::dict({{"step", scalar<int32_t>(step_++)}});
  }
  void reset() override { step_ = 0; }
  Tree state() const override { return int_state({{"step", step_}}); }
  void restore_state(const Tree& s) override { step_ = int(state_value(s, "step", "FlakyInput")); }

 private:
  int step_ = 0;
  const int fail_at_, sleep_ms_;
};

TEST(Prefetch, OtherErrorsPropagateInOrderWithTheirType) {
  PrefetchInput prefetched(std::make_unique<FlakyInput>(2, 0), 4);
  let_worker_run();
  EXPECT_EQ(prefetched.get_next()["step"].leaf().item<int32_t>(), 0);
  EXPECT_EQ(prefetched.get_next()["step"].leaf().item<int32_t>(), 1);
  try {
    prefetched.get_next();
    ADD_FAILURE() << "expected an error";
  } catch (const OutOfRange&) {
    ADD_FAILURE() << "not an OutOfRange";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("disk on fire"), std::string::npos);
  }
  EXPECT_PAX_ERROR(prefetched.get_next(), "disk on fire");
  EXPECT_EQ(prefetched.state()["step"].leaf().item<int64_t>(), 2);
  // restore_state rejects a bad state and keeps the stream where it was.
  prefetched.restore_state(int_state({{"step", 1}}));
  EXPECT_EQ(prefetched.get_next()["step"].leaf().item<int32_t>(), 1);
  EXPECT_PAX_ERROR(prefetched.restore_state(Tree::dict()), "has no 'step'");
  EXPECT_PAX_ERROR(prefetched.get_next(), "disk on fire");
}

// A counting input whose reset() (and, when asked, restore_state()) fails.
class StuckInput : public BaseInput {
 public:
  struct HParams : BaseInput::HParams {
    PAX_HPARAMS_NO_FIELDS(TestStuckInput, BaseInput::HParams);
  };
  StuckInput() : BaseInput(HParams()) {}
  Tree get_next() override { return Tree::dict({{"step", scalar<int32_t>(step_++)}}); }
  void reset() override {
    if (fail_reset) throw Error("stuck: cannot rewind");
    step_ = 0;
  }
  Tree state() const override { return int_state({{"step", step_}}); }
  void restore_state(const Tree& s) override {
    if (fail_restore) throw Error("stuck: cannot seek");
    step_ = int(state_value(s, "step", "StuckInput"));
  }
  bool fail_reset = true, fail_restore = false;

 private:
  int step_ = 0;
};

std::vector<int32_t> steps(BaseInput& input, int n) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back(input.get_next()["step"].leaf().item<int32_t>());
  return out;
}

TEST(Prefetch, AFailedInnerResetKeepsTheStream) {
  auto owned = std::make_unique<StuckInput>();
  StuckInput& inner = *owned;
  PrefetchInput prefetched(std::move(owned), 4);
  EXPECT_EQ(steps(prefetched, 2), (std::vector<int32_t>{0, 1}));
  let_worker_run();  // steps 2..5 queued, the worker waiting (or reading 6)
  EXPECT_PAX_ERROR(prefetched.reset(), "cannot rewind");
  EXPECT_EQ(prefetched.state()["step"].leaf().item<int64_t>(), 2);
  // The queued batches come out, then the ones after them, none twice.
  EXPECT_EQ(steps(prefetched, 8), (std::vector<int32_t>{2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(prefetched.state()["step"].leaf().item<int64_t>(), 10);
  // If the inner input cannot go back either, the stream fails rather than skip.
  let_worker_run();
  inner.fail_restore = true;
  EXPECT_PAX_ERROR(prefetched.reset(), "cannot rewind");
  EXPECT_PAX_ERROR(prefetched.get_next(), "cannot rewind");
  EXPECT_PAX_ERROR(prefetched.get_next(), "cannot rewind");
  // A reset that succeeds starts afresh.
  inner.fail_reset = false;
  prefetched.reset();
  EXPECT_EQ(steps(prefetched, 3), (std::vector<int32_t>{0, 1, 2}));
}

TEST(Prefetch, ShutsDownCleanlyWhileTheWorkerWaitsOrReads) {
  for (int i = 0; i < 20; ++i) {
    PrefetchInput full(numbers(10, params(2, true)), 1);  // worker blocks on a full queue
    if (i % 2) let_worker_run();
  }
  PrefetchInput slow(std::make_unique<FlakyInput>(-1, 20), 2);  // worker inside get_next
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

TEST(Prefetch, EvalRunsAndResetsThroughThePrefetcher) {
  ArrayInput::HParams hp = params(2, false);
  hp.reset_for_eval = true;
  PrefetchInput prefetched(numbers(5, hp), 3);
  std::vector<std::vector<int32_t>> first, second;
  EXPECT_EQ(
      for_each_eval_batch(prefetched, [&](const Tree& b) { first.push_back(b["x"].leaf().to_vector<int32_t>()); }), 3);
  EXPECT_EQ(
      for_each_eval_batch(prefetched, [&](const Tree& b) { second.push_back(b["x"].leaf().to_vector<int32_t>()); }), 3);
  EXPECT_EQ(first, second);
  EXPECT_PAX_ERROR(PrefetchInput(numbers(5, hp), 0), "buffer_size must be >= 1");
  EXPECT_PAX_ERROR(PrefetchInput(nullptr, 2), "inner input is null");
}

}  // namespace
}  // namespace pax::data
