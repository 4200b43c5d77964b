// Sharded checkpoints across processes (ctest train_mpirun4_sharded_checkpoint,
// train_mpirun2_sharded_checkpoint, train_sharded_checkpoint_restore_on_1):
// every process saves its blocks through CheckpointManager::save_sharded and
// restores with the same, fewer or other splits; a write that fails on one
// process commits nothing anywhere; processes that disagree are refused; and
// a checkpoint saved by 4 processes (in $PAX_TEST_SHARDED_CKPT_DIR) restores
// on 2 and on 1; a process killed during a save (ctest
// train_mpirun2_sharded_checkpoint_killed, then
// train_sharded_checkpoint_after_kill) leaves the previous checkpoint
// restorable. In a plain run (one process) the tests run as n = 1 or skip.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "pax/dist/jax_utils.h"
#include "pax/dist/process_group.h"
#include "pax/testing/checkpoint_testing.h"
#include "pax/testing/sharded_checkpoint_testing.h"
#include "pax/train/checkpoint_manager.h"
#include "pax/train/fs_util.h"
#include "pax/train/sharded_checkpoint.h"

namespace pax::train {
namespace {

using dist::process_count;
using dist::process_index;
using testing::default_split_dims;
using testing::local_blocks;
using testing::shard_specs_of;
using testing::sharded_global_tree;
using testing::SharedDir;
using testing::SplitDims;
using testing::trees_identical;

const SplitDims kOtherDims{{"params/w", 1}, {"params/v", 0}, {"params/b", 0}, {"opt/mu", 1}, {"opt/empty", 0}};

// Restores this process's block `index` of `count` along `dims` and compares it with the global tree's.
void expect_block(CheckpointManager& mgr, int64_t step, const Tree& global, const SplitDims& dims, int64_t count,
                  int64_t index) {
  SCOPED_TRACE("count " + std::to_string(count) + ", block " + std::to_string(index));
  const dist::ShardSpecs specs = shard_specs_of(global, dims, count, index);
  const Tree want = local_blocks(global, specs);
  EXPECT_TRUE(
      trees_identical(mgr.restore_sharded(step, {{"state", want}}, {{"state", specs}}).trees.at("state"), want));
}

// This process's blocks of the global tree along default_split_dims(), and their specs.
struct MyShards {
  CheckpointItems items;
  ItemShardSpecs specs;
};
MyShards my_shards(const Tree& global) {
  const dist::ShardSpecs specs = shard_specs_of(global, default_split_dims(), process_count(), process_index());
  return {{.trees = {{"state", local_blocks(global, specs)}}, .json = {{"input", "{\"position\": 7}"}}},
          {{"state", specs}}};
}
bool save(CheckpointManager& mgr, int64_t step, const Tree& global) {
  const MyShards s = my_shards(global);
  return mgr.save_sharded(step, s.items, s.specs);
}

TEST(ShardedCheckpointMultiprocess, SaveAndRestoreWithAnySplit) {
  SharedDir dir;
  const int n = process_count(), me = process_index();
  const Tree global = sharded_global_tree(11);
  CheckpointManager mgr(dir.path(), {.max_to_keep = 2, .crc_chunk_bytes = 16});
  EXPECT_TRUE(save(mgr, 1, global));
  EXPECT_TRUE(is_committed_checkpoint(dir / "checkpoint_00000001"));
  EXPECT_EQ(read_checkpoint_metadata(dir / "checkpoint_00000001").trees.at("state").files.size(), size_t(n));
  // The same split, half as many blocks, the whole, and other dimensions.
  expect_block(mgr, 1, global, default_split_dims(), n, me);
  if (n % 2 == 0) expect_block(mgr, 1, global, default_split_dims(), n / 2, me % (n / 2));
  expect_block(mgr, 1, global, default_split_dims(), 1, 0);
  expect_block(mgr, 1, global, kOtherDims, 2, me % 2);
  CheckpointItems whole = mgr.restore(1, {{"state", global}});
  EXPECT_TRUE(trees_identical(whole.trees.at("state"), global));
  EXPECT_EQ(whole.json.at("input"), "{\"position\": 7}");
  // Pruning (max_to_keep 2) as in unsharded saves.
  for (int64_t step : {2, 3}) save(mgr, step, sharded_global_tree(uint32_t(step)));
  EXPECT_EQ(mgr.all_steps(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(available_steps(dir.path()), (std::vector<int64_t>{2, 3}));
  expect_block(mgr, 3, sharded_global_tree(3), kOtherDims, n, me);
}

TEST(ShardedCheckpointMultiprocess, AFailedWriteOnOneProcessCommitsNothing) {
  SharedDir dir;
  const int n = process_count();
  const Tree global = sharded_global_tree(12);
  CheckpointManager mgr(dir.path());
  save(mgr, 1, global);
  if (process_index() == n - 1) inject_shard_write_fault_for_testing(ShardWriteFault::fail);
  EXPECT_PAX_ERROR(save(mgr, 2, sharded_global_tree(13)),
                   "process " + std::to_string(n - 1) + " could not write its shards, so nothing was committed");
  EXPECT_EQ(mgr.all_steps(), (std::vector<int64_t>{1}));
  EXPECT_FALSE(fs::exists(dir / "tmp_checkpoint_00000002"));
  expect_block(mgr, 1, global, default_split_dims(), n, process_index());
  // The next save works.
  EXPECT_TRUE(save(mgr, 3, global));
  EXPECT_EQ(available_steps(dir.path()), (std::vector<int64_t>{1, 3}));
}

TEST(ShardedCheckpointMultiprocess, ProcessesThatDisagreeAreRefused) {
  if (process_count() == 1) GTEST_SKIP() << "needs several processes";
  SharedDir dir;
  const int me = process_index();
  const Tree global = sharded_global_tree(14);
  const MyShards s = my_shards(global);
  EXPECT_PAX_ERROR(save_sharded_checkpoint(dir.path(), s.items, s.specs, me == 1 ? 6 : 5),
                   "every process must save the same checkpoint (directory, step, items, tree structures, dtypes, "
                   "global shapes and splits); process(es) 1 differ from process 0");
  // An error of one process's own (a leaf that does not match its spec) reaches every process.
  CheckpointItems bad = s.items;
  if (me == 1) bad.trees["state"] = global;
  EXPECT_PAX_ERROR(save_sharded_checkpoint(dir.path(), bad, s.specs, 5),
                   "process 1: save sharded checkpoint: item 'state', leaf 'params/w' is f32[8,12]");
  // Two processes holding the same block and none holding another.
  dist::ShardSpecs same = shard_specs_of(global, default_split_dims(), process_count(), 0);
  EXPECT_PAX_ERROR(
      save_sharded_checkpoint(dir.path(), {.trees = {{"state", local_blocks(global, same)}}}, {{"state", same}}, 5),
      "no process holds block 1 of");
  EXPECT_TRUE(available_steps(dir.path()).empty());
}

// A directory shared by consecutive ctest runs, from the environment.
std::optional<std::string> env_dir(const char* name) {
  const char* d = std::getenv(name);
  if (d == nullptr || *d == '\0') return std::nullopt;
  return std::string(d);
}
// The directory that the 4-process run saves into and the 2- and 1-process runs restore from.
std::optional<std::string> fixture_dir() { return env_dir("PAX_TEST_SHARDED_CKPT_DIR"); }

TEST(ShardedCheckpointMultiprocess, SaveForOtherProcessCounts) {
  const std::optional<std::string> dir = fixture_dir();
  if (!dir || process_count() != 4) GTEST_SKIP() << "the 4-process run with $PAX_TEST_SHARDED_CKPT_DIR saves";
  if (process_index() == 0) std::filesystem::remove_all(*dir);
  dist::process_group().barrier();
  CheckpointManager mgr(*dir, {.crc_chunk_bytes = 24});
  EXPECT_TRUE(save(mgr, 100, sharded_global_tree(100)));
}

TEST(ShardedCheckpointMultiprocess, RestoreWhatFourProcessesSaved) {
  const std::optional<std::string> dir = fixture_dir();
  if (!dir || process_count() == 4) GTEST_SKIP() << "the 2- and 1-process runs with $PAX_TEST_SHARDED_CKPT_DIR restore";
  CheckpointManager mgr(*dir);
  ASSERT_EQ(mgr.latest_step(), 100);
  EXPECT_EQ(read_checkpoint_metadata(*dir + "/checkpoint_00000100").trees.at("state").files.size(), 4u);
  const Tree global = sharded_global_tree(100);
  const int n = process_count(), me = process_index();
  expect_block(mgr, 100, global, default_split_dims(), n, me);
  expect_block(mgr, 100, global, kOtherDims, n, me);
  EXPECT_TRUE(trees_identical(mgr.restore(100, {{"state", global}}).trees.at("state"), global));
  dist::process_group().barrier();
}

// The 2-process run in $PAX_TEST_SHARDED_KILL_DIR: process 1 is killed
// (SIGKILL) halfway through writing its shards of step 2, and mpirun ends the
// job; ctest expects it to fail.
TEST(ShardedCheckpointKill, AProcessDiesDuringASave) {
  const std::optional<std::string> dir = env_dir("PAX_TEST_SHARDED_KILL_DIR");
  if (!dir || process_count() != 2) GTEST_SKIP() << "the 2-process run with $PAX_TEST_SHARDED_KILL_DIR";
  if (process_index() == 0) std::filesystem::remove_all(*dir);
  dist::process_group().barrier();
  CheckpointManager mgr(*dir);
  save(mgr, 1, sharded_global_tree(21));
  if (process_index() == 1) inject_shard_write_fault_for_testing(ShardWriteFault::kill);
  save(mgr, 2, sharded_global_tree(22));
  ADD_FAILURE() << "a save with a killed process returned";
}

// The run after it, in one process: the half-written step 2 is ignored and
// cleaned up, and step 1 restores.
TEST(ShardedCheckpointKill, ThePreviousCheckpointRestoresAfterwards) {
  const std::optional<std::string> dir = env_dir("PAX_TEST_SHARDED_KILL_DIR");
  if (!dir || process_count() != 1) GTEST_SKIP() << "the run after the killed one, with $PAX_TEST_SHARDED_KILL_DIR";
  const std::string tmp = *dir + "/tmp_checkpoint_00000002";
  ASSERT_TRUE(fs::exists(tmp + "/" + shard_file_name("state", 1))) << "the save was not interrupted while writing";
  EXPECT_EQ(available_steps(*dir), (std::vector<int64_t>{1}));
  CheckpointManager mgr(*dir);
  EXPECT_FALSE(fs::exists(tmp));
  EXPECT_EQ(mgr.latest_step(), 1);
  const Tree global = sharded_global_tree(21);
  EXPECT_TRUE(trees_identical(mgr.restore(std::nullopt, {{"state", global}}).trees.at("state"), global));
  expect_block(mgr, 1, global, kOtherDims, 2, 1);
}

}  // namespace
}  // namespace pax::train
