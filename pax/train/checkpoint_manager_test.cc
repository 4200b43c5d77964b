// CheckpointManager: save intervals, max_to_keep / keep_period retention,
// named tree and JSON items, restore by step or latest, reopening, async
// saves and their errors, and sharing the layout with the functional API.
#include "pax/train/checkpoint_manager.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "pax/testing/checkpoint_testing.h"
#include "pax/train/fs_util.h"

namespace pax::train {
namespace {

using testing::random_array;
using testing::TempDir;
using testing::trees_identical;

CheckpointItems items_at(int64_t step) {
  const uint32_t seed = uint32_t(step);
  CheckpointItems items;
  items.trees["model"] =
      Tree::dict({{"w", random_array({4, 4}, DType::f32, seed)}, {"b", random_array({4}, DType::bf16, seed + 1)}});
  items.trees["optimizer"] = Tree::list(
      {Tree::dict({{"count", scalar(int32_t(step))}, {"mu", random_array({4, 4}, DType::f32, seed + 2)}}), Tree()});
  items.json["input"] = R"({"epoch": 1, "position": )" + std::to_string(step * 32) + "}";
  return items;
}

void expect_items(const CheckpointItems& got, int64_t step) {
  const CheckpointItems want = items_at(step);
  ASSERT_EQ(got.trees.size(), want.trees.size());
  for (const auto& [name, tree] : want.trees) EXPECT_TRUE(trees_identical(got.trees.at(name), tree)) << name;
  EXPECT_EQ(got.json, want.json);
}

TEST(CheckpointManager, ShouldSaveFollowsTheInterval) {
  TempDir dir;
  CheckpointManager mgr(dir.path(), {.save_interval_steps = 10});
  EXPECT_TRUE(mgr.should_save(0));
  EXPECT_FALSE(mgr.should_save(5));
  EXPECT_TRUE(mgr.should_save(10));
  EXPECT_FALSE(mgr.save(5, items_at(5)));
  EXPECT_TRUE(mgr.save(10, items_at(10)));
  EXPECT_FALSE(mgr.should_save(10));  // already saved
  EXPECT_FALSE(mgr.save(10, items_at(10)));
  EXPECT_TRUE(mgr.save(15, items_at(15), {.force = true}));
  EXPECT_FALSE(mgr.should_save(10));
  EXPECT_TRUE(mgr.should_save(20));
  EXPECT_EQ(mgr.all_steps(), (std::vector<int64_t>{10, 15}));
  EXPECT_PAX_ERROR(mgr.save(12, items_at(12), {.force = true}),
                   "step 12 is not newer than the latest checkpoint (step 15)");
}

TEST(CheckpointManager, MaxToKeep) {
  TempDir dir;
  CheckpointManager mgr(dir.path(), {.max_to_keep = 3});
  for (int64_t s = 1; s <= 8; ++s) mgr.save(s, items_at(s));
  EXPECT_EQ(mgr.all_steps(), (std::vector<int64_t>{6, 7, 8}));
  EXPECT_EQ(available_steps(dir.path()), (std::vector<int64_t>{6, 7, 8}));
}

TEST(CheckpointManager, KeepPeriod) {
  // max_to_keep = 2 and keep_period = 4 over steps 1..13: the newest two plus
  // every multiple of 4.
  TempDir dir;
  CheckpointManager mgr(dir.path(), {.max_to_keep = 2, .keep_period = 4});
  for (int64_t s = 1; s <= 13; ++s) mgr.save(s, items_at(s));
  EXPECT_EQ(mgr.all_steps(), (std::vector<int64_t>{4, 8, 12, 13}));
  EXPECT_EQ(available_steps(dir.path()), (std::vector<int64_t>{4, 8, 12, 13}));
}

TEST(CheckpointManager, KeepsEverythingByDefault) {
  TempDir dir;
  CheckpointManager mgr(dir.path(), {.save_interval_steps = 2});
  for (int64_t s = 0; s <= 10; ++s) {
    if (mgr.should_save(s)) mgr.save(s, items_at(s));
  }
  EXPECT_EQ(mgr.all_steps(), (std::vector<int64_t>{0, 2, 4, 6, 8, 10}));
}

TEST(CheckpointManager, RestoreLatestOrStepWithTargets) {
  TempDir dir;
  CheckpointManager mgr(dir.path(), {.max_to_keep = 5});
  EXPECT_FALSE(mgr.latest_step().has_value());
  EXPECT_PAX_ERROR(mgr.restore(), "no checkpoint in '" + dir.path() + "'");
  for (int64_t s = 1; s <= 3; ++s) mgr.save(s, items_at(s));
  EXPECT_EQ(mgr.latest_step(), 3);
  expect_items(mgr.restore(), 3);
  expect_items(mgr.restore(2), 2);
  // Targets pick and check items; JSON items always come back.
  const CheckpointItems r = mgr.restore(1, {{"model", items_at(9).trees.at("model")}});
  EXPECT_EQ(r.trees.size(), 1u);
  EXPECT_TRUE(trees_identical(r.trees.at("model"), items_at(1).trees.at("model")));
  EXPECT_EQ(r.json.at("input"), items_at(1).json.at("input"));
  EXPECT_PAX_ERROR(mgr.restore(7), "no checkpoint for step 7");
  EXPECT_PAX_ERROR(mgr.restore(1, {{"params", Tree()}}), "has no item 'params' (its items: 'model', 'optimizer')");
  EXPECT_PAX_ERROR(mgr.restore(1, {{"model", Tree::dict({{"w", scalar(1.0f)}})}}), "differs from the target");
}

TEST(CheckpointManager, ReopeningSeesCommittedStepsAndCleansUp) {
  TempDir dir;
  {
    CheckpointManager mgr(dir.path(), {.max_to_keep = 2});
    for (int64_t s = 1; s <= 3; ++s) mgr.save(s * 100, items_at(s * 100));
  }
  fs::make_dirs(dir / "tmp_checkpoint_00000400");  // an interrupted save
  CheckpointManager mgr(dir.path(), {.max_to_keep = 2});
  EXPECT_EQ(mgr.all_steps(), (std::vector<int64_t>{200, 300}));
  EXPECT_FALSE(fs::exists(dir / "tmp_checkpoint_00000400"));
  expect_items(mgr.restore(), 300);
  // The functional API reads what the manager wrote, item by item.
  const CheckpointItems any = read_checkpoint(*latest_checkpoint(dir.path()));
  EXPECT_EQ(any.trees.size(), 2u);
}

TEST(CheckpointManager, JsonItemsAreValidatedAndChecksummed) {
  TempDir dir;
  CheckpointManager mgr(dir.path());
  CheckpointItems bad = items_at(1);
  bad.json["input"] = "{not json";
  EXPECT_PAX_ERROR(mgr.save(1, bad), "JSON item 'input': not valid JSON");
  bad = items_at(1);
  bad.json["model"] = "{}";
  EXPECT_PAX_ERROR(mgr.save(1, bad), "'model' is both a tree item and a JSON item");
  bad = items_at(1);
  bad.trees["bad/name"] = Tree();
  EXPECT_PAX_ERROR(mgr.save(1, bad), "invalid item name 'bad/name'");
  EXPECT_TRUE(mgr.all_steps().empty());

  mgr.save(1, items_at(1));
  const std::string file = dir / "checkpoint_00000001/input.json";
  std::string text = testing::read_bytes(file);
  text[text.find("32")] = '4';
  testing::write_bytes(file, text);
  EXPECT_PAX_ERROR(mgr.restore(), "'" + file + "' fails its CRC32C check");
  testing::write_bytes(file, text.substr(0, 5));
  EXPECT_PAX_ERROR(mgr.restore(), "'" + file + "' is 5 bytes but metadata.json says");
}

TEST(CheckpointManager, ConfigHashInEveryCheckpoint) {
  TempDir dir;
  CheckpointManager mgr(dir.path(), {.config_json = R"({"lr": 0.001})"});
  mgr.save(0, items_at(0));
  EXPECT_EQ(read_checkpoint_metadata(dir / "checkpoint_00000000").config_hash, config_hash(R"({"lr":0.001})"));
}

TEST(CheckpointManager, AsyncSavesOneAtATime) {
  TempDir dir;
  CheckpointManager mgr(dir.path(), {.max_to_keep = 2, .async = true});
  for (int64_t s = 1; s <= 6; ++s) {
    EXPECT_TRUE(mgr.save(s, items_at(s)));
    EXPECT_EQ(mgr.latest_step(), s);  // counts the save in flight
    EXPECT_FALSE(mgr.should_save(s));
  }
  mgr.wait_until_finished();
  EXPECT_EQ(available_steps(dir.path()), (std::vector<int64_t>{5, 6}));
  expect_items(mgr.restore(), 6);
}

TEST(CheckpointManager, AsyncWriteFailureSurfaces) {
  TempDir dir;
  const std::string ckpt = dir / "ckpt";
  CheckpointManager mgr(ckpt, {.async = true});
  mgr.save(1, items_at(1));
  mgr.wait_until_finished();
  // The directory turns into a file: the next background write must fail.
  fs::remove_all(ckpt);
  testing::write_bytes(ckpt, "not a directory");
  EXPECT_TRUE(mgr.save(2, items_at(2)));
  EXPECT_THROW(mgr.wait_until_finished(), Error);
  mgr.wait_until_finished();  // reported once
  const std::vector<int64_t> steps = mgr.all_steps();
  EXPECT_EQ(std::count(steps.begin(), steps.end(), 2), 0);
  // And at the next save, when nobody waited.
  fs::remove_all(ckpt);
  fs::make_dirs(ckpt);
  mgr.save(3, items_at(3));
  mgr.wait_until_finished();
  fs::remove_all(ckpt);
  testing::write_bytes(ckpt, "not a directory");
  mgr.save(4, items_at(4));
  EXPECT_THROW(mgr.save(5, items_at(5)), Error);
}

TEST(CheckpointManager, AsyncWriteFailureSurfacesEvenWhenNotSaving) {
  // A loop that calls save() every step but saves every 10th must hear of a
  // failed write before its next real save.
  TempDir dir;
  const std::string ckpt = dir / "ckpt";
  CheckpointManager mgr(ckpt, {.save_interval_steps = 10, .async = true});
  fs::remove_all(ckpt);
  testing::write_bytes(ckpt, "not a directory");
  const CheckpointItems items = items_at(10);
  EXPECT_TRUE(mgr.save(10, items));
  EXPECT_EQ(mgr.latest_step(), 10);
  bool reported = false;
  for (int64_t s = 11; s < 20 && !reported; ++s) {
    // Steps 11..19 do not save; poll until the background write has failed.
    for (int tries = 0; tries < 60000 && !reported; ++tries) {
      try {
        EXPECT_FALSE(mgr.save(s, items));
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(ckpt), std::string::npos) << e.what();
        reported = true;
      }
    }
  }
  EXPECT_TRUE(reported);
  EXPECT_FALSE(mgr.latest_step().has_value());  // the failed step is forgotten
  fs::remove_all(ckpt);
  fs::make_dirs(ckpt);
  EXPECT_TRUE(mgr.save(20, items));
  mgr.wait_until_finished();
  EXPECT_EQ(available_steps(ckpt), (std::vector<int64_t>{20}));
}

TEST(CheckpointManager, BadOptions) {
  TempDir dir;
  EXPECT_PAX_ERROR(CheckpointManager(dir.path(), {.save_interval_steps = 0}), "save_interval_steps must be >= 1");
  EXPECT_PAX_ERROR(CheckpointManager(dir.path(), {.max_to_keep = 0}), "max_to_keep must be >= 1");
  EXPECT_PAX_ERROR(CheckpointManager(dir.path(), {.keep_period = -2}), "keep_period must be >= 1");
}

}  // namespace
}  // namespace pax::train
