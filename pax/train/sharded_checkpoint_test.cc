// Sharded checkpoints in one process: saves of n simulated processes (each
// process's write called with its index, then process 0's commit), restores
// with every split and count, CRC checks of whole and partial block reads,
// refused commits, and the manager's save_sharded / restore_sharded. The
// collective path under mpirun is sharded_checkpoint_multiprocess_test.cc.
#include "pax/train/sharded_checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "pax/testing/checkpoint_testing.h"
#include "pax/testing/sharded_checkpoint_testing.h"
#include "pax/train/checkpoint_manager.h"
#include "pax/train/fs_util.h"

namespace pax::train {
namespace {

using testing::default_split_dims;
using testing::local_blocks;
using testing::shard_specs_of;
using testing::sharded_global_tree;
using testing::SplitDims;
using testing::TempDir;
using testing::trees_identical;

// Processes 0..n-1 each holding block (p % count) of every split leaf.
struct Simulation {
  std::vector<PreparedShards> prepared;
  ShardWriters writers;
  std::vector<ShardWriteReport> reports;
  std::string tmp;
};

Simulation simulate_writes(const std::string& dir, const Tree& global, int64_t step, int n, int64_t count,
                           uint64_t chunk, const SplitDims& dims = default_split_dims()) {
  Simulation s;
  std::vector<std::vector<int64_t>> indices;
  for (int p = 0; p < n; ++p) {
    const dist::ShardSpecs specs = shard_specs_of(global, dims, count, p % count);
    CheckpointItems items;
    items.trees["state"] = local_blocks(global, specs);
    items.json["input"] = "{\"position\": 3}";
    s.prepared.push_back(prepare_shards(items, {{"state", specs}}, step, "", chunk));
    EXPECT_EQ(shard_agreement_text(s.prepared[size_t(p)]), shard_agreement_text(s.prepared[0]));
    indices.push_back(shard_block_indices(s.prepared.back()));
  }
  s.writers = assign_shard_writers(s.prepared[0], indices);
  s.tmp = tmp_checkpoint_path(dir, kDefaultCheckpointPrefix, step);
  fs::make_dirs(s.tmp);
  for (int p = 0; p < n; ++p) s.reports.push_back(write_process_shards(s.tmp, s.prepared[size_t(p)], p, s.writers));
  return s;
}

std::string simulate_save(const std::string& dir, const Tree& global, int64_t step, int n, int64_t count,
                          uint64_t chunk, const SplitDims& dims = default_split_dims()) {
  Simulation s = simulate_writes(dir, global, step, n, count, chunk, dims);
  return commit_shards(s.prepared[0], s.reports, s.writers, dir, kDefaultCheckpointPrefix);
}

Tree restore_block(const std::string& path, const Tree& global, const SplitDims& dims, int64_t count, int64_t index) {
  const dist::ShardSpecs specs = shard_specs_of(global, dims, count, index);
  return read_checkpoint_sharded(path, {{"state", local_blocks(global, specs)}}, {{"state", specs}}).trees.at("state");
}

void flip_byte(const std::string& file, int64_t from_end) {
  std::string bytes = testing::read_bytes(file);
  bytes[bytes.size() - size_t(from_end)] ^= 0x5a;
  testing::write_bytes(file, bytes);
}

TEST(ShardedCheckpoint, FourProcessesRestoreWithAnySplitAndCount) {
  const Tree global = sharded_global_tree(1);
  // Chunks of 8 and 24 bytes make most partial reads cover several chunks
  // and start or end inside one; 1 MiB makes every block one chunk.
  for (uint64_t chunk : {uint64_t(8), uint64_t(24), kDefaultCrcChunkBytes}) {
    SCOPED_TRACE("crc_chunk_bytes " + std::to_string(chunk));
    TempDir dir;
    const std::string path = simulate_save(dir.path(), global, 5, 4, 4, chunk);
    EXPECT_EQ(path, dir / "checkpoint_00000005");
    // A single-process reader gets whole arrays.
    CheckpointItems whole = read_checkpoint(path, {{"state", global}});
    EXPECT_TRUE(trees_identical(whole.trees.at("state"), global));
    EXPECT_EQ(whole.json.at("input"), "{\"position\": 3}");
    EXPECT_TRUE(trees_identical(restore_checkpoint(path, Tree()), global));  // flax's functional API too
    EXPECT_TRUE(trees_identical(read_checkpoint(path).trees.at("state"), global));
    // 4, 2 and 1 blocks along the saved dimensions, and along other ones.
    const SplitDims other{{"params/w", 1}, {"params/v", 0}, {"params/b", 0}, {"opt/mu", 1}, {"opt/empty", 0}};
    for (const SplitDims& dims : {default_split_dims(), other}) {
      for (int64_t count : {1, 2, 4}) {
        for (int64_t k = 0; k < count; ++k) {
          SCOPED_TRACE("count " + std::to_string(count) + ", block " + std::to_string(k));
          const Tree got = restore_block(path, global, dims, count, k);
          EXPECT_TRUE(trees_identical(got, local_blocks(global, shard_specs_of(global, dims, count, k))));
        }
      }
    }
    // 3 blocks along dimension 1 of w (12 columns) cut across every stored block.
    const SplitDims three{{"params/w", 1}};
    for (int64_t k = 0; k < 3; ++k) {
      EXPECT_TRUE(trees_identical(restore_block(path, global, three, 3, k),
                                  local_blocks(global, shard_specs_of(global, three, 3, k))));
    }
  }
}

TEST(ShardedCheckpoint, EachBlockIsWrittenOnceByTheLowestHolder) {
  TempDir dir;
  const Tree global = sharded_global_tree(2);
  // 4 processes, 2 blocks: processes 0 and 1 write; 2 and 3 write empty files.
  const std::string path = simulate_save(dir.path(), global, 1, 4, 2, 16);
  const CheckpointMetadata m = read_checkpoint_metadata(path);
  EXPECT_EQ(m.format_version, kShardedCheckpointFormatVersion);
  const TreeItemRecord& rec = m.trees.at("state");
  ASSERT_EQ(rec.files.size(), 4u);
  for (int p = 0; p < 4; ++p) EXPECT_EQ(rec.files[size_t(p)].name, shard_file_name("state", p));
  std::vector<size_t> counts;
  for (int p = 0; p < 4; ++p) counts.push_back(read_safetensors(path + "/" + rec.files[size_t(p)].name).tensors.size());
  // Process 0: block 0 of the 4 split leaves and the 2 replicated ones; process 1: block 1.
  EXPECT_EQ(counts, (std::vector<size_t>{6, 4, 0, 0}));
  for (const TensorRecord& t : rec.tensors) {
    if (t.name == "params/v") {
      EXPECT_EQ(t.split_dim, 1);
      EXPECT_EQ(t.split_count, 2);
      EXPECT_EQ(t.shape, Shape({4, 8}));
      ASSERT_EQ(t.blocks.size(), 2u);
      EXPECT_EQ(t.blocks[1].file, 1u);
      // 4x4 bf16 = 32 bytes in chunks of 16.
      EXPECT_EQ(t.blocks[1].chunk_crc32c.size(), 2u);
    }
    if (t.name == "step") EXPECT_EQ(t.split_dim, -1);
  }
  // The metadata round-trips.
  EXPECT_EQ(checkpoint_metadata_to_json(parse_checkpoint_metadata(checkpoint_metadata_to_json(m), "m")),
            checkpoint_metadata_to_json(m));
}

std::string replace_once(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return at == std::string::npos ? s : s.replace(at, from.size(), to);
}

TEST(ShardedCheckpoint, MalformedShardedMetadataIsRefused) {
  TempDir dir;
  const std::string path = simulate_save(dir.path(), sharded_global_tree(2), 1, 2, 2, 16);
  const std::string text = testing::read_bytes(path + "/metadata.json");
  auto parse = [](const std::string& t) { return parse_checkpoint_metadata(t, "m"); };
  EXPECT_PAX_ERROR(parse(replace_once(text, "\"format_version\": 2", "\"format_version\": 1")),
                   "a sharded item (\"files\") needs format_version 2, got 1");
  EXPECT_PAX_ERROR(parse(replace_once(text, "state.process-00001.safetensors", "../x.safetensors")),
                   "file 1 must be \"state.process-00001.safetensors\"");
  EXPECT_PAX_ERROR(parse(replace_once(text, "{\"dim\":0,\"count\":2}", "{\"dim\":0,\"count\":3}")),
                   "tensor 'params/w': cannot split (8, 12) along dimension 0 into 3 blocks");
  EXPECT_PAX_ERROR(parse(replace_once(text, "{\"file\":1,", "{\"file\":2,")), "block file must be a non-negative");
  EXPECT_PAX_ERROR(parse(replace_once(text, "\"crc_chunk_bytes\": 16", "\"crc_chunk_bytes\": 32")), "chunk CRCs, not");
  EXPECT_PAX_ERROR(parse(replace_once(text, "\"crc_chunk_bytes\": 16", "\"crc_chunk_bytes\": 0")),
                   "crc_chunk_bytes must be positive");
}

TEST(ShardedCheckpoint, CorruptedBlocksNameTheFileAndTensor) {
  const Tree global = sharded_global_tree(3);
  for (uint64_t chunk : {uint64_t(8), kDefaultCrcChunkBytes}) {
    SCOPED_TRACE("crc_chunk_bytes " + std::to_string(chunk));
    TempDir dir;
    const std::string path = simulate_save(dir.path(), global, 1, 4, 4, chunk);
    // The last bytes of process 3's file: the end of its smallest-element tensor, params/v's block 3 (bf16).
    const std::string file = path + "/" + shard_file_name("state", 3);
    flip_byte(file, 1);
    const std::string msg = "shard file '" + file + "': tensor 'params/v' block 3 fails its CRC32C check";
    EXPECT_PAX_ERROR(read_checkpoint(path), msg);
    // A restore of block 3 of 4 reads it whole; one along the other dimension reads part of it.
    EXPECT_PAX_ERROR(restore_block(path, global, default_split_dims(), 4, 3), msg);
    EXPECT_PAX_ERROR(restore_block(path, global, {{"params/v", 0}}, 4, 3), msg);
    // Blocks that do not overlap it restore.
    EXPECT_TRUE(trees_identical(restore_block(path, global, default_split_dims(), 4, 0),
                                local_blocks(global, shard_specs_of(global, default_split_dims(), 4, 0))));
    if (chunk == 8) {
      // Block 3 of v is bf16[4, 2], two chunks of two rows; rows 0..1 only
      // touch the first (the flipped byte is in the second).
      EXPECT_TRUE(trees_identical(restore_block(path, global, {{"params/v", 0}}, 2, 0),
                                  local_blocks(global, shard_specs_of(global, {{"params/v", 0}}, 2, 0))));
    }
  }
}

TEST(ShardedCheckpoint, MissingOrTruncatedShardFilesAreNamedAtRestore) {
  TempDir dir;
  const Tree global = sharded_global_tree(4);
  const std::string path = simulate_save(dir.path(), global, 1, 4, 4, 32);
  const std::string file = path + "/" + shard_file_name("state", 2);
  const std::string bytes = testing::read_bytes(file);
  testing::write_bytes(file, bytes.substr(0, bytes.size() - 4));
  EXPECT_PAX_ERROR(read_checkpoint(path), "shard file '" + file + "' is " + std::to_string(bytes.size() - 4) +
                                              " bytes but metadata.json says " + std::to_string(bytes.size()));
  std::filesystem::remove(file);
  EXPECT_PAX_ERROR(read_checkpoint(path), "shard file '" + file + "' of item 'state' is missing");
  // Process 0's and 1's blocks alone still restore: file 2 is never opened.
  EXPECT_TRUE(trees_identical(restore_block(path, global, default_split_dims(), 4, 1),
                              local_blocks(global, shard_specs_of(global, default_split_dims(), 4, 1))));
}

TEST(ShardedCheckpoint, CommitRefusesMissingFilesAndFailedWrites) {
  TempDir dir;
  const Tree global = sharded_global_tree(5);
  simulate_save(dir.path(), global, 1, 4, 4, 64);
  {
    Simulation s = simulate_writes(dir.path(), global, 2, 4, 4, 64);
    const std::string file = s.tmp + "/" + shard_file_name("state", 3);
    std::filesystem::remove(file);
    EXPECT_PAX_ERROR(commit_shards(s.prepared[0], s.reports, s.writers, dir.path(), kDefaultCheckpointPrefix),
                     "shard file '" + file + "' of process 3 is missing, so nothing was committed");
  }
  {
    Simulation s = simulate_writes(dir.path(), global, 2, 4, 4, 64);
    const std::string file = s.tmp + "/" + shard_file_name("state", 1);
    testing::write_bytes(file, testing::read_bytes(file).substr(0, 100));
    EXPECT_PAX_ERROR(commit_shards(s.prepared[0], s.reports, s.writers, dir.path(), kDefaultCheckpointPrefix),
                     "shard file '" + file + "' is 100 bytes but process 1 wrote");
  }
  {
    inject_shard_write_fault_for_testing(ShardWriteFault::fail);
    Simulation s = simulate_writes(dir.path(), global, 2, 4, 4, 64);  // process 0's write fails
    EXPECT_PAX_ERROR(commit_shards(s.prepared[0], s.reports, s.writers, dir.path(), kDefaultCheckpointPrefix),
                     "process 0 could not write its shards, so nothing was committed");
    EXPECT_FALSE(fs::exists(s.tmp));
  }
  EXPECT_EQ(available_steps(dir.path()), (std::vector<int64_t>{1}));
  EXPECT_TRUE(trees_identical(read_checkpoint(dir / "checkpoint_00000001").trees.at("state"), global));
}

TEST(ShardedCheckpoint, AnInterruptedSaveIsIgnoredAndCleanedUp) {
  TempDir dir;
  const Tree global = sharded_global_tree(6);
  simulate_save(dir.path(), global, 1, 4, 4, 64);
  // Every process wrote, then the job died before process 0's commit.
  Simulation s = simulate_writes(dir.path(), global, 2, 4, 4, 64);
  EXPECT_TRUE(fs::exists(s.tmp));
  EXPECT_EQ(available_steps(dir.path()), (std::vector<int64_t>{1}));
  CheckpointManager mgr(dir.path());
  EXPECT_FALSE(fs::exists(s.tmp));
  EXPECT_EQ(mgr.latest_step(), 1);
  EXPECT_TRUE(trees_identical(mgr.restore(std::nullopt, {{"state", global}}).trees.at("state"), global));
}

TEST(ShardedCheckpoint, SaveInputsAreChecked) {
  const Tree global = sharded_global_tree(7);
  dist::ShardSpecs specs = shard_specs_of(global, default_split_dims(), 4, 1);
  CheckpointItems items;
  items.trees["state"] = global;  // whole arrays where blocks are due
  EXPECT_PAX_ERROR(prepare_shards(items, {{"state", specs}}, 1, ""),
                   "item 'state', leaf 'params/w' is f32[8,12] but its spec (global (8, 12), block 1 of 4 along "
                   "dimension 0) needs the shape (2, 12)");
  items.trees["state"] = local_blocks(global, specs);
  specs["params/nothing"] = dist::ShardSpec{Shape{2}};
  EXPECT_PAX_ERROR(prepare_shards(items, {{"state", specs}}, 1, ""), "item 'state' has no leaf 'params/nothing'");
  specs.erase("params/nothing");
  specs["params/w"].count = 5;
  EXPECT_PAX_ERROR(prepare_shards(items, {{"state", specs}}, 1, ""),
                   "leaf 'params/w': cannot split (8, 12) along dimension 0 into 5 blocks");
  // Every block must be held by some process.
  specs["params/w"].count = 4;
  const PreparedShards p = prepare_shards(items, {{"state", specs}}, 1, "");
  std::vector<int64_t> k = shard_block_indices(p);
  EXPECT_PAX_ERROR(assign_shard_writers(p, {k, k, k, k}), "no process holds block 0 of 4 of item 'state', tensor");
}

TEST(ShardedCheckpoint, ProcessesSplittingAlongOtherDimensionsDisagree) {
  // The same global array split in two along dimension 0 on one process and dimension 1 on another.
  const Tree global = Tree::dict({{"w", testing::random_array({4, 4}, DType::f32, 1)}});
  std::vector<std::string> texts;
  for (int64_t dim : {0, 1}) {
    const dist::ShardSpecs specs = shard_specs_of(global, {{"w", dim}}, 2, 0);
    texts.push_back(shard_agreement_text(
        prepare_shards({.trees = {{"state", local_blocks(global, specs)}}}, {{"state", specs}}, 1, "")));
  }
  EXPECT_NE(texts[0], texts[1]);
}

TEST(ShardedCheckpoint, RestoreChecksTargetsAndSpecs) {
  TempDir dir;
  const Tree global = sharded_global_tree(8);
  const std::string path = simulate_save(dir.path(), global, 1, 2, 2, 64);
  dist::ShardSpecs specs = shard_specs_of(global, default_split_dims(), 2, 0);
  EXPECT_PAX_ERROR(read_checkpoint_sharded(path, {{"state", global}}, {{"state", specs}}),
                   "tensor 'params/w' is f32[4,12] in the checkpoint (block 0) but f32[8,12] in the target");
  specs["opt/mu"].global = Shape{16, 12};
  EXPECT_PAX_ERROR(read_checkpoint_sharded(path, {{"state", Tree()}}, {{"state", specs}}),
                   "tensor 'opt/mu': its spec's global shape is (16, 12) but the checkpoint holds f32[8,12]");
  // A None target takes the stored structure and the spec's blocks.
  specs = shard_specs_of(global, default_split_dims(), 4, 3);
  EXPECT_TRUE(trees_identical(read_checkpoint_sharded(path, {{"state", Tree()}}, {{"state", specs}}).trees.at("state"),
                              local_blocks(global, specs)));
}

TEST(ShardedCheckpoint, UnshardedCheckpointsRestoreAsBlocks) {
  TempDir dir;
  const Tree global = sharded_global_tree(9);
  CheckpointManager mgr(dir.path());
  mgr.save(3, {.trees = {{"state", global}}});
  const std::string path = dir / "checkpoint_00000003";
  EXPECT_EQ(read_checkpoint_metadata(path).format_version, kCheckpointFormatVersion);
  for (int64_t k = 0; k < 2; ++k) {
    const dist::ShardSpecs specs = shard_specs_of(global, default_split_dims(), 2, k);
    EXPECT_TRUE(
        trees_identical(mgr.restore_sharded(std::nullopt, {{"state", local_blocks(global, specs)}}, {{"state", specs}})
                            .trees.at("state"),
                        local_blocks(global, specs)));
  }
  flip_byte(path + "/state.safetensors", 1);  // the end of params/v (bf16, the smallest elements)
  const dist::ShardSpecs specs = shard_specs_of(global, default_split_dims(), 2, 0);
  EXPECT_PAX_ERROR(mgr.restore_sharded(3, {{"state", Tree()}}, {{"state", specs}}),
                   "tensor 'params/v' block 0 fails its CRC32C check");
}

TEST(ShardedCheckpoint, ManagerSavesAndRestoresShardsInOneProcess) {
  TempDir dir;
  CheckpointManager mgr(dir.path(), {.max_to_keep = 2, .async = true, .crc_chunk_bytes = 16});
  for (int64_t step : {10, 20, 30}) {
    const Tree global = sharded_global_tree(uint32_t(step));
    const dist::ShardSpecs specs = shard_specs_of(global, default_split_dims(), 1, 0);
    EXPECT_TRUE(mgr.save_sharded(step, {.trees = {{"state", global}}, .json = {{"input", "[1]"}}}, {{"state", specs}}));
    EXPECT_FALSE(mgr.save_sharded(step, {.trees = {{"state", global}}}, {{"state", specs}}));
  }
  EXPECT_EQ(mgr.all_steps(), (std::vector<int64_t>{20, 30}));
  EXPECT_EQ(available_steps(dir.path()), (std::vector<int64_t>{20, 30}));
  const Tree global = sharded_global_tree(30);
  const dist::ShardSpecs specs = shard_specs_of(global, default_split_dims(), 2, 1);
  const CheckpointItems r =
      mgr.restore_sharded(std::nullopt, {{"state", local_blocks(global, specs)}}, {{"state", specs}});
  EXPECT_TRUE(trees_identical(r.trees.at("state"), local_blocks(global, specs)));
  EXPECT_EQ(r.json.at("input"), "[1]");
  // The ordinary restore of the same checkpoint gives whole arrays.
  EXPECT_TRUE(trees_identical(mgr.restore(20, {{"state", Tree()}}).trees.at("state"), sharded_global_tree(20)));
  EXPECT_PAX_ERROR(mgr.save_sharded(25, {.trees = {{"state", global}}}, {}, {.force = true}),
                   "save_sharded: step 25 is not newer than the latest checkpoint (step 30)");
}

}  // namespace
}  // namespace pax::train
