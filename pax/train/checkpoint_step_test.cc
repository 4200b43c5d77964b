// Checkpoint steps as flax has them: natural sort against flax's docstring
// and the seed's examples (and orders computed with flax's natural_sort),
// Python's spelling of floats, comparison by value, and the functional API
// with float and negative steps (names, latest, keep, overwrite,
// keep_every_n_steps), checked against flax's rules.
#include "pax/train/checkpoint_step.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>

#include "pax/ops/numpy.h"
#include "pax/testing/checkpoint_testing.h"
#include "pax/train/checkpoint.h"
#include "pax/train/checkpoint_manager.h"
#include "pax/train/fs_util.h"

namespace pax::train {
namespace {

using testing::TempDir;
using testing::trees_identical;
using Names = std::vector<std::string>;

Tree tree_of(float v) { return Tree::dict({{"w", full({2}, v)}}); }

TEST(NaturalSort, FlaxDocstringAndSeedExamples) {
  // flax.training.checkpoints.natural_sort's docstring.
  EXPECT_EQ(natural_sort({"file_1", "file_10", "file_2"}), (Names{"file_1", "file_2", "file_10"}));
  EXPECT_EQ(natural_sort({"file_0.1", "file_-0.2", "file_2.0"}), (Names{"file_-0.2", "file_0.1", "file_2.0"}));
  // The seed's restore_checkpoint: "ckpt_0.01, ckpt_0.1, ckpt_0.001 --> ckpt_0.1" and
  // "ckpt_-1.0, ckpt_1.0, ckpt_1e5 --> ckpt_1e5".
  EXPECT_EQ(natural_sort({"ckpt_1", "ckpt_2", "ckpt_3"}).back(), "ckpt_3");
  EXPECT_EQ(natural_sort({"ckpt_0.01", "ckpt_0.1", "ckpt_0.001"}), (Names{"ckpt_0.001", "ckpt_0.01", "ckpt_0.1"}));
  EXPECT_EQ(natural_sort({"ckpt_-1.0", "ckpt_1.0", "ckpt_1e5"}), (Names{"ckpt_-1.0", "ckpt_1.0", "ckpt_1e5"}));
  // signed=False: the '-' is dropped, so -0.2 sorts as 0.2.
  EXPECT_EQ(natural_sort({"file_0.1", "file_-0.2", "file_2.0"}, false), (Names{"file_0.1", "file_-0.2", "file_2.0"}));
}

TEST(NaturalSort, SeveralNumbersSignsAndExponentsAsFlax) {
  // The orders flax's natural_sort gives for these names (stable: "a2b9"
  // before "a02b9", equal keys).
  const Names names = {"a2b10", "a2b9", "a10b1", "a1.5e1b0", "b",    "a",     "",    "a-3",
                       "a+3x",  "A1",   "a2.b",  "a02b9",    "x1e+", "x1e+2", "x1E1"};
  EXPECT_EQ(natural_sort(names), (Names{"", "A1", "a", "a-3", "a2.b", "a2b9", "a02b9", "a2b10", "a+3x", "a10b1",
                                        "a1.5e1b0", "b", "x1e+", "x1E1", "x1e+2"}));
  EXPECT_EQ(natural_sort(names, false), (Names{"", "A1", "a", "a2.b", "a2b9", "a02b9", "a2b10", "a-3", "a+3x", "a10b1",
                                               "a1.5e1b0", "b", "x1e+", "x1E1", "x1e+2"}));
}

TEST(CheckpointStep, PythonSpellingOfFloats) {
  // repr() of each value in Python.
  const std::vector<std::pair<double, std::string>> cases = {{0.5, "0.5"},
                                                             {1e5, "100000.0"},
                                                             {1e-5, "1e-05"},
                                                             {1e16, "1e+16"},
                                                             {1.5e16, "1.5e+16"},
                                                             {9999999999999998.0, "9999999999999998.0"},
                                                             {0.0001, "0.0001"},
                                                             {-0.0, "-0.0"},
                                                             {0.0, "0.0"},
                                                             {123.456, "123.456"},
                                                             {1e22, "1e+22"},
                                                             {5e-324, "5e-324"},
                                                             {1.7976931348623157e308, "1.7976931348623157e+308"},
                                                             {2.0, "2.0"},
                                                             {0.1 + 0.2, "0.30000000000000004"},
                                                             {-1.0, "-1.0"},
                                                             {1e100, "1e+100"}};
  for (const auto& [value, want] : cases) EXPECT_EQ(python_float_repr(value), want) << want;
  EXPECT_EQ(CheckpointStep(42).str(), "42");
  EXPECT_EQ(CheckpointStep(-3).str(), "-3");
  EXPECT_EQ(CheckpointStep(0.5f).str(), "0.5");
}

TEST(CheckpointStep, ComparesByValue) {
  EXPECT_EQ(CheckpointStep(2), CheckpointStep(2.0));
  EXPECT_LT(CheckpointStep(-1), CheckpointStep(0.5));
  EXPECT_LT(CheckpointStep(0.001), CheckpointStep(0.01));
  EXPECT_GT(CheckpointStep(1e5), CheckpointStep(99999));
  // Exact at the ends of int64 (a double would round 2^63 - 1 up to 2^63).
  EXPECT_LT(CheckpointStep(INT64_MAX), CheckpointStep(0x1p63));
  EXPECT_EQ(CheckpointStep(INT64_MAX - 1) <=> CheckpointStep(INT64_MAX), std::weak_ordering::less);
  EXPECT_EQ(CheckpointStep(3.0).as_integer(), 3);
  EXPECT_FALSE(CheckpointStep(3.5).as_integer().has_value());
  EXPECT_FALSE(CheckpointStep(0x1p63).as_integer().has_value());
  EXPECT_PAX_ERROR(CheckpointStep(std::nan("")), "checkpoint step must be a finite number");
}

TEST(CheckpointFloatSteps, LatestIsTheNaturallyLargestAsTheSeedSays) {
  TempDir dir;
  for (double step : {0.01, 0.1, 0.001})
    save_checkpoint(dir.path(), tree_of(float(step)), step, {.keep = 10, .overwrite = true});
  // Saved in the seed's order; the last save (0.001) with overwrite removed the larger ones.
  EXPECT_EQ(available_float_steps(dir.path()), (std::vector<double>{0.001}));

  TempDir seed;
  for (double step : {0.001, 0.01, 0.1}) save_checkpoint(seed.path(), tree_of(float(step)), step, {.keep = 10});
  EXPECT_EQ(fs::list_dir(seed.path()), (Names{"checkpoint_0.001", "checkpoint_0.01", "checkpoint_0.1"}));
  EXPECT_EQ(latest_checkpoint(seed.path()), seed / "checkpoint_0.1");
  EXPECT_EQ(available_float_steps(seed.path()), (std::vector<double>{0.001, 0.01, 0.1}));
  EXPECT_TRUE(trees_identical(restore_checkpoint(seed.path(), tree_of(0)), tree_of(0.1f)));
  EXPECT_TRUE(trees_identical(restore_checkpoint(seed.path(), tree_of(0), {.step = 0.01}), tree_of(0.01f)));
  // flax's available_steps with step_type int cannot list float steps.
  EXPECT_PAX_ERROR(available_steps(seed.path()), "non-integer step 0.001 (checkpoint_0.001); available_float_steps");
  EXPECT_PAX_ERROR(CheckpointManager{seed.path()}, "non-integer step 0.001");

  // ckpt_-1.0, ckpt_1.0, ckpt_1e5 --> ckpt_1e5, with the names as flax writes them.
  TempDir signs;
  for (double step : {-1.0, 1.0})
    save_checkpoint(signs.path(), tree_of(float(step)), step, {.prefix = "ckpt_", .keep = 10});
  save_checkpoint(signs.path(), tree_of(1e5f), 1e5, {.prefix = "ckpt_", .keep = 10});
  fs::rename(signs / "ckpt_100000.0", signs / "ckpt_1e5");
  EXPECT_EQ(latest_checkpoint(signs.path(), "ckpt_"), signs / "ckpt_1e5");
  EXPECT_TRUE(trees_identical(restore_checkpoint(signs.path(), Tree(), {.prefix = "ckpt_"}), tree_of(1e5f)));
  EXPECT_TRUE(
      trees_identical(restore_checkpoint(signs.path(), Tree(), {.step = 100000, .prefix = "ckpt_"}), tree_of(1e5f)));
  EXPECT_EQ(available_float_steps(signs.path(), "ckpt_"), (std::vector<double>{-1.0, 1.0, 1e5}));
  // The metadata keeps the step as saved.
  EXPECT_EQ(read_checkpoint_metadata(signs / "ckpt_-1.0").step.str(), "-1.0");
}

TEST(CheckpointFloatSteps, KeepRemovesTheNaturallySmallest) {
  TempDir dir;
  // A metric that grows: 0.5 < 2.0 < 10.0 < 30.0, where the names sort
  // otherwise as text ("checkpoint_10.0" < "checkpoint_2.0").
  for (double step : {0.5, 2.0, 10.0, 30.0}) save_checkpoint(dir.path(), tree_of(float(step)), step, {.keep = 2});
  EXPECT_EQ(fs::list_dir(dir.path()), (Names{"checkpoint_10.0", "checkpoint_30.0"}));
}

TEST(CheckpointFloatSteps, OverwriteComparesValues) {
  TempDir dir;
  for (double step : {0.1, 0.2, 0.3}) save_checkpoint(dir.path(), tree_of(float(step)), step, {.keep = 10});
  EXPECT_PAX_ERROR(save_checkpoint(dir.path(), tree_of(9), 0.15, {.keep = 10}),
                   "step 0.15 is older than the latest checkpoint (step 0.3)");
  EXPECT_PAX_ERROR(save_checkpoint(dir.path(), tree_of(9), 3e-1, {.keep = 10}),
                   "a checkpoint for step 0.3 already exists");
  // With overwrite, the larger values go.
  save_checkpoint(dir.path(), tree_of(15), 0.15, {.keep = 10, .overwrite = true});
  EXPECT_EQ(available_float_steps(dir.path()), (std::vector<double>{0.1, 0.15}));
  // An integer step and a float step of one value are one step: 2.0 after 2
  // exists without overwrite, and replaces it with.
  TempDir mixed;
  save_checkpoint(mixed.path(), tree_of(2), 2);
  EXPECT_PAX_ERROR(save_checkpoint(mixed.path(), tree_of(3), 2.0), "a checkpoint for step 2.0 already exists");
  save_checkpoint(mixed.path(), tree_of(3), 2.0, {.overwrite = true});
  EXPECT_EQ(fs::list_dir(mixed.path()), (Names{"checkpoint_2.0"}));
  EXPECT_TRUE(trees_identical(restore_checkpoint(mixed.path(), Tree(), {.step = 2}), tree_of(3)));
}

TEST(CheckpointFloatSteps, KeepEveryNStepsOnValuesAsFlax) {
  // keep = 1, every 1, saves 0.0, 0.5, ..., 3.0: flax keeps no 0.0, then 0.5,
  // 1.5 (1.5 - 0.5 >= 1) and 2.5, plus the newest.
  TempDir dir;
  for (int i = 0; i <= 6; ++i) {
    save_checkpoint(dir.path(), tree_of(float(i)), 0.5 * i, {.keep = 1, .keep_every_n_steps = 1});
  }
  EXPECT_EQ(available_float_steps(dir.path()), (std::vector<double>{0.5, 1.5, 2.5, 3.0}));
}

TEST(CheckpointFloatSteps, NegativeIntegerSteps) {
  TempDir dir;
  for (int64_t step : {-2, -1, 0}) save_checkpoint(dir.path(), tree_of(float(step)), step, {.keep = 10});
  EXPECT_EQ(fs::list_dir(dir.path()), (Names{"checkpoint_-1", "checkpoint_-2", "checkpoint_0"}));
  EXPECT_EQ(available_steps(dir.path()), (std::vector<int64_t>{-2, -1, 0}));
  EXPECT_EQ(latest_checkpoint(dir.path()), dir / "checkpoint_0");
  EXPECT_PAX_ERROR(CheckpointManager(dir.path()).save(-3, {}, {.force = true}), "step must be >= 0, got -3");
}

}  // namespace
}  // namespace pax::train
