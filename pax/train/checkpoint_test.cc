// The functional checkpoint API: round trips of every kind of tree, the
// on-disk layout, flax's keep / keep_every_n_steps / overwrite rules, restore
// semantics, leftover cleanup, validation against the target, and corrupted
// files (each error naming the file and the tensor).
#include "pax/train/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <cmath>
#include <csignal>
#include <functional>

#include "pax/api/jit.h"
#include "pax/ops/numpy.h"
#include "pax/testing/checkpoint_testing.h"
#include "pax/train/fs_util.h"

namespace pax::train {
namespace {

using testing::every_kind_tree;
using testing::random_array;
using testing::read_bytes;
using testing::TempDir;
using testing::trees_identical;
using testing::write_bytes;

Tree small_tree(uint32_t seed) {
  return Tree::dict({{"params", Tree::dict({{"w", random_array({3, 4}, DType::f32, seed)},
                                            {"b", random_array({4}, DType::bf16, seed + 1)}})},
                     {"count", scalar(int32_t(seed))}});
}

std::string state_file(const std::string& dir, int64_t step) {
  return dir + "/" + checkpoint_dir_name(kDefaultCheckpointPrefix, step, StepNames::flax) + "/state.safetensors";
}

// File offset of a tensor's first byte.
uint64_t tensor_offset(const std::string& file, const std::string& name) {
  SafetensorsReader r(file);
  return r.header().data_start + r.find(name)->begin;
}

TEST(Checkpoint, RoundTripEveryKindOfTree) {
  TempDir dir;
  const Tree saved = every_kind_tree(1);
  const std::string path = save_checkpoint(dir.path(), saved, 5);
  EXPECT_EQ(path, dir / "checkpoint_5");
  // A target of the same structure with other values, and None (rebuilt from metadata.json).
  EXPECT_TRUE(trees_identical(restore_checkpoint(dir.path(), every_kind_tree(99)), saved));
  EXPECT_TRUE(trees_identical(restore_checkpoint(dir.path(), Tree()), saved));
  EXPECT_TRUE(trees_identical(restore_checkpoint(path, Tree()), saved));
}

TEST(Checkpoint, RootLeafNoneAndEmptyTrees) {
  for (const Tree& t : {Tree(scalar(bf16(2.5f))), Tree(), Tree::list(), Tree::dict(),
                        Tree::dict({{"a", Tree()}, {"b", Tree::list({Tree::dict()})}})}) {
    TempDir dir;
    save_checkpoint(dir.path(), t, 0);
    EXPECT_TRUE(trees_identical(restore_checkpoint(dir.path(), Tree()), t)) << t.str();
    EXPECT_TRUE(trees_identical(restore_checkpoint(dir.path(), t), t)) << t.str();
  }
}

TEST(Checkpoint, FlaxDocExample) {
  TempDir dir;
  const Tree obj = Tree::dict({{"a", array<int32_t>({1, 2, 3})}, {"b", array<int32_t>({1, 1, 1})}});
  const std::string file_path = save_checkpoint(dir.path(), obj, 0, {.prefix = "test_", .keep = 1});
  EXPECT_EQ(file_path, dir / "test_0");
  const Tree restored = restore_checkpoint(file_path, Tree(), {.prefix = "test_"});
  EXPECT_EQ(restored["a"].leaf().to_vector<int32_t>(), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(restored["b"].leaf().to_vector<int32_t>(), (std::vector<int32_t>{1, 1, 1}));
}

TEST(Checkpoint, OnDiskLayout) {
  TempDir dir;
  const Tree t = small_tree(1);
  save_checkpoint(dir.path(), t, 7, {.config_json = R"({"model": {"layers": 2}})"});
  EXPECT_EQ(fs::list_dir(dir.path()), (std::vector<std::string>{"checkpoint_7"}));
  EXPECT_EQ(fs::list_dir(dir / "checkpoint_7"),
            (std::vector<std::string>{"commit_success.txt", "metadata.json", "state.safetensors"}));
  // A standard safetensors file named by tree paths.
  const SafetensorsContents c = read_safetensors(state_file(dir.path(), 7));
  std::vector<std::string> names;
  for (const NamedArray& n : c.tensors) names.push_back(n.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"count", "params/b", "params/w"}));
  const CheckpointMetadata m = read_checkpoint_metadata(dir / "checkpoint_7");
  EXPECT_EQ(m.step, 7);
  EXPECT_EQ(m.config_hash, config_hash(R"({"model":{"layers":2}})"));
  EXPECT_EQ(m.trees.at("state").tensors.size(), 3u);
  // Steps past 8 digits simply print more.
  save_checkpoint(dir.path(), t, 1234567890);
  EXPECT_EQ(latest_checkpoint(dir.path()), dir / "checkpoint_1234567890");
}

TEST(Checkpoint, DirectoryNames) {
  EXPECT_EQ(checkpoint_dir_name("checkpoint_", 42), "checkpoint_00000042");
  EXPECT_EQ(checkpoint_dir_name("test_", 0, StepNames::flax), "test_0");  // flax's names
  EXPECT_EQ(checkpoint_dir_name("test_", 0.5, StepNames::flax), "test_0.5");
  EXPECT_EQ(parse_checkpoint_dir_name("checkpoint_00000042", "checkpoint_"), 42);
  EXPECT_EQ(parse_checkpoint_dir_name("checkpoint_123456789", "checkpoint_"), 123456789);
  // flax writes unpadded names: read too.
  EXPECT_EQ(parse_checkpoint_dir_name("checkpoint_42", "checkpoint_"), 42);
  EXPECT_EQ(parse_checkpoint_dir_name("checkpoint_000000042", "checkpoint_"), 42);
  // Every number flax's pattern reads: signs, floats, exponents.
  EXPECT_EQ(parse_checkpoint_dir_name("checkpoint_+42", "checkpoint_"), 42);
  EXPECT_EQ(parse_checkpoint_dir_name("checkpoint_-0000042", "checkpoint_"), -42);
  EXPECT_EQ(parse_checkpoint_dir_name("checkpoint_4.5", "checkpoint_"), 4.5);
  EXPECT_EQ(parse_checkpoint_dir_name("checkpoint_1e5", "checkpoint_"), 100000.0);
  EXPECT_EQ(parse_checkpoint_dir_name("checkpoint_.5", "checkpoint_"), 0.5);
  EXPECT_EQ(parse_checkpoint_dir_name("checkpoint_2.", "checkpoint_"), 2.0);
  EXPECT_FALSE(parse_checkpoint_dir_name("checkpoint_2.0", "checkpoint_")->is_integer());
  EXPECT_TRUE(parse_checkpoint_dir_name("checkpoint_42", "checkpoint_")->is_integer());
  // Beyond int64 an integer spelling is read as flax reads it, a float.
  EXPECT_EQ(parse_checkpoint_dir_name("checkpoint_99999999999999999999", "checkpoint_"), 1e20);
  for (const char* bad : {"checkpoint_", "checkpoint_0000004x", "ckpt_00000042", "tmp_checkpoint_00000042",
                          "checkpoint_tmp", "checkpoint_1e", "checkpoint_.", "checkpoint_1e999", "checkpoint_1-2",
                          "checkpoint_nan", "checkpoint_inf", "checkpoint_ 1"}) {
    EXPECT_FALSE(parse_checkpoint_dir_name(bad, "checkpoint_").has_value()) << bad;
  }
  // The names saves write: integers >= 0 padded, other steps as flax (Python) spells them.
  EXPECT_EQ(checkpoint_dir_name("ckpt_", -1), "ckpt_-1");
  EXPECT_EQ(checkpoint_dir_name("ckpt_", 0.5), "ckpt_0.5");
  EXPECT_EQ(checkpoint_dir_name("ckpt_", 1e5), "ckpt_100000.0");
  EXPECT_EQ(checkpoint_dir_name("ckpt_", 1e-5), "ckpt_1e-05");
}

TEST(Checkpoint, KeepNewest) {
  TempDir dir;
  for (int64_t s = 1; s <= 10; ++s) save_checkpoint(dir.path(), small_tree(uint32_t(s)), s, {.keep = 3});
  EXPECT_EQ(available_steps(dir.path()), (std::vector<int64_t>{8, 9, 10}));
  EXPECT_TRUE(trees_identical(restore_checkpoint(dir.path(), small_tree(0), {.step = 8}), small_tree(8)));
}

TEST(Checkpoint, KeepEveryNSteps) {
  // keep = 1, keep_every_n_steps = 3, saves 1..10: walking the older ones from
  // the oldest, 1 is kept, then 4 (4 - 1 >= 3), then 7; 10 is the newest.
  TempDir dir;
  for (int64_t s = 1; s <= 10; ++s) {
    save_checkpoint(dir.path(), small_tree(uint32_t(s)), s, {.keep = 1, .keep_every_n_steps = 3});
  }
  EXPECT_EQ(available_steps(dir.path()), (std::vector<int64_t>{1, 4, 7, 10}));
  // keep = 2, every 5, saves every 2 steps from 0 to 20: flax never keeps
  // step 0 for the rule (`if step_number and ...`), so 2 is the first kept,
  // then 8 (8 - 2 >= 5) and 14, plus 18 and 20.
  TempDir dir2;
  for (int64_t s = 0; s <= 20; s += 2) {
    save_checkpoint(dir2.path(), small_tree(uint32_t(s)), s, {.keep = 2, .keep_every_n_steps = 5});
  }
  EXPECT_EQ(available_steps(dir2.path()), (std::vector<int64_t>{2, 8, 14, 18, 20}));
}

TEST(Checkpoint, PaddedNamesOfPaxRunsAreListedRestoredReplacedAndPruned) {
  // Checkpoints named as Pax's runner names them (checkpoint_<8 digits>)
  // beside the functional API's flax names (checkpoint_<step>).
  TempDir dir;
  for (int64_t s : {5, 40}) {
    save_checkpoint(dir.path(), small_tree(uint32_t(s)), s, {.keep = 10});
    fs::rename(dir / ("checkpoint_" + std::to_string(s)), dir / checkpoint_dir_name("checkpoint_", s));
  }
  EXPECT_EQ(available_steps(dir.path()), (std::vector<int64_t>{5, 40}));
  EXPECT_EQ(latest_checkpoint(dir.path()), std::optional<std::string>(dir / "checkpoint_00000040"));
  EXPECT_TRUE(trees_identical(restore_checkpoint(dir.path(), small_tree(0)), small_tree(40)));
  EXPECT_TRUE(trees_identical(restore_checkpoint(dir.path(), small_tree(0), {.step = 5}), small_tree(5)));
  // Natural order by value, whatever the spelling.
  save_checkpoint(dir.path(), small_tree(100), 100, {.keep = 2});
  EXPECT_EQ(available_steps(dir.path()), (std::vector<int64_t>{40, 100}));
  EXPECT_FALSE(fs::exists(dir / "checkpoint_00000005"));
  EXPECT_TRUE(fs::exists(dir / "checkpoint_100"));
  // Replacing step 40 leaves one directory for it, the name flax writes.
  save_checkpoint(dir.path(), small_tree(41), 40, {.keep = 2, .overwrite = true});
  EXPECT_FALSE(fs::exists(dir / "checkpoint_00000040"));
  EXPECT_TRUE(fs::exists(dir / "checkpoint_40"));
  EXPECT_TRUE(trees_identical(restore_checkpoint(dir.path(), small_tree(0), {.step = 40}), small_tree(41)));
  EXPECT_EQ(available_steps(dir.path()), (std::vector<int64_t>{40}));
}

TEST(Checkpoint, OverwriteSemantics) {
  TempDir dir;
  for (int64_t s = 1; s <= 3; ++s) save_checkpoint(dir.path(), small_tree(uint32_t(s)), s, {.keep = 10});
  EXPECT_PAX_ERROR(save_checkpoint(dir.path(), small_tree(9), 2, {.keep = 10}),
                   "a checkpoint for step 2 already exists");
  EXPECT_PAX_ERROR(save_checkpoint(dir.path(), small_tree(9), 3, {.keep = 10}), "already exists");
  EXPECT_PAX_ERROR(save_checkpoint(dir.path(), small_tree(9), 0, {.keep = 10}),
                   "step 0 is older than the latest checkpoint (step 3)");
  EXPECT_EQ(available_steps(dir.path()), (std::vector<int64_t>{1, 2, 3}));

  // Replacing step 2 removes the newer step 3.
  save_checkpoint(dir.path(), small_tree(20), 2, {.keep = 10, .overwrite = true});
  EXPECT_EQ(available_steps(dir.path()), (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(trees_identical(restore_checkpoint(dir.path(), small_tree(0)), small_tree(20)));
  // Replacing the latest step in place (an atomic exchange of the directories).
  save_checkpoint(dir.path(), small_tree(21), 2, {.keep = 10, .overwrite = true});
  EXPECT_EQ(available_steps(dir.path()), (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(trees_identical(restore_checkpoint(dir.path(), small_tree(0)), small_tree(21)));
  EXPECT_EQ(fs::list_dir(dir.path()), (std::vector<std::string>{"checkpoint_1", "checkpoint_2"}));
  // An older step with overwrite and keep = 1.
  save_checkpoint(dir.path(), small_tree(5), 0, {.keep = 1, .overwrite = true});
  EXPECT_EQ(available_steps(dir.path()), (std::vector<int64_t>{0}));
}

TEST(Checkpoint, PrefixesAreSeparate) {
  TempDir dir;
  save_checkpoint(dir.path(), small_tree(1), 5, {.prefix = "a_"});
  save_checkpoint(dir.path(), small_tree(2), 3, {.prefix = "b_"});
  EXPECT_EQ(available_steps(dir.path(), "a_"), (std::vector<int64_t>{5}));
  EXPECT_EQ(available_steps(dir.path(), "b_"), (std::vector<int64_t>{3}));
  EXPECT_TRUE(available_steps(dir.path()).empty());
  EXPECT_TRUE(trees_identical(restore_checkpoint(dir.path(), Tree(), {.prefix = "b_"}), small_tree(2)));
}

TEST(Checkpoint, RestoreWithoutCheckpointsReturnsTheTarget) {
  TempDir dir;
  const Tree target = small_tree(1);
  const Tree missing_dir = restore_checkpoint(dir / "not_created_yet", target);
  EXPECT_EQ(missing_dir["params"]["w"].leaf().id(), target["params"]["w"].leaf().id());
  EXPECT_TRUE(restore_checkpoint(dir.path(), Tree()).is_none());
  EXPECT_FALSE(latest_checkpoint(dir.path()).has_value());
  EXPECT_TRUE(available_steps(dir / "not_created_yet").empty());
}

TEST(Checkpoint, AnExplicitStepMustExistAMissingPathReturnsTheTarget) {
  TempDir dir;
  save_checkpoint(dir.path(), small_tree(1), 3);
  EXPECT_PAX_ERROR(restore_checkpoint(dir.path(), Tree(), {.step = 7}),
                   "no checkpoint for step 7 in '" + dir.path() + "' (committed steps: 3)");
  // flax.training.checkpoints.restore_checkpoint returns the target for a
  // path that does not exist, a checkpoint's path included.
  const Tree target = small_tree(2);
  const Tree got = restore_checkpoint(dir / "checkpoint_7", target);
  EXPECT_EQ(got["params"]["w"].leaf().id(), target["params"]["w"].leaf().id());
  EXPECT_TRUE(restore_checkpoint(dir / "checkpoint_7", Tree()).is_none());
}

TEST(Checkpoint, UncommittedDirectoriesAreNeverListedOrRestored) {
  TempDir dir;
  save_checkpoint(dir.path(), small_tree(1), 3);
  // A complete-looking step 4 without its marker (a save killed before the commit).
  fs::make_dirs(dir / "checkpoint_4");
  for (const char* f : {"state.safetensors", "metadata.json"}) {
    write_bytes(dir / ("checkpoint_4/" + std::string(f)), read_bytes(dir / ("checkpoint_3/" + std::string(f))));
  }
  EXPECT_EQ(available_steps(dir.path()), (std::vector<int64_t>{3}));
  EXPECT_EQ(latest_checkpoint(dir.path()), dir / "checkpoint_3");
  EXPECT_TRUE(trees_identical(restore_checkpoint(dir.path(), Tree()), small_tree(1)));
  EXPECT_PAX_ERROR(restore_checkpoint(dir / "checkpoint_4", Tree()),
                   "'" + (dir / "checkpoint_4") + "' is not a committed checkpoint");
  EXPECT_PAX_ERROR(restore_checkpoint(dir.path(), Tree(), {.step = 4}), "is not a committed checkpoint");
}

TEST(Checkpoint, LeftoverTmpDirectoriesAreRemovedAtTheNextSave) {
  TempDir dir;
  save_checkpoint(dir.path(), small_tree(1), 1);
  for (const char* d :
       {"tmp_checkpoint_9", "tmp_checkpoint_1.del", "tmp_checkpoint_2.old", "tmp_unrelated", "tmp_other_00000001"}) {
    fs::make_dirs(dir / d);
    write_bytes(dir / (std::string(d) + "/state.safetensors"), "partial");
  }
  save_checkpoint(dir.path(), small_tree(2), 2, {.keep = 5});
  EXPECT_EQ(fs::list_dir(dir.path()),
            (std::vector<std::string>{"checkpoint_1", "checkpoint_2", "tmp_other_00000001", "tmp_unrelated"}));
}

TEST(Checkpoint, AnOverwriteThatNeverLandedIsRolledBack) {
  // Where the file system cannot exchange directories, an overwrite moves the
  // old checkpoint aside first; a crash before the new one lands must bring it back.
  TempDir dir;
  save_checkpoint(dir.path(), small_tree(1), 4);
  fs::rename(dir / "checkpoint_4", dir / "tmp_checkpoint_4.old");
  fs::make_dirs(dir / "tmp_checkpoint_4");
  remove_tmp_checkpoints(dir.path(), kDefaultCheckpointPrefix);
  EXPECT_EQ(fs::list_dir(dir.path()), (std::vector<std::string>{"checkpoint_4"}));
  EXPECT_TRUE(trees_identical(restore_checkpoint(dir.path(), Tree()), small_tree(1)));
  // When the new one did land, the old one is just removed.
  fs::make_dirs(dir / "tmp_checkpoint_4.old");
  write_bytes(dir / "tmp_checkpoint_4.old/commit_success.txt", "x");
  remove_tmp_checkpoints(dir.path(), kDefaultCheckpointPrefix);
  EXPECT_EQ(fs::list_dir(dir.path()), (std::vector<std::string>{"checkpoint_4"}));
}

TEST(Checkpoint, SaveRejectsBadInput) {
  TempDir dir;
  const Array x = scalar(1.0f);
  EXPECT_PAX_ERROR(save_checkpoint(dir.path(), small_tree(1), std::nan("")), "step must be a finite number");
  EXPECT_PAX_ERROR(save_checkpoint(dir.path(), small_tree(1), -INFINITY), "step must be a finite number");
  EXPECT_PAX_ERROR(save_checkpoint(dir.path(), small_tree(1), 1, {.keep = 0}), "keep must be >= 1");
  EXPECT_PAX_ERROR(save_checkpoint(dir.path(), small_tree(1), 1, {.keep_every_n_steps = 0}), "keep_every_n_steps");
  EXPECT_PAX_ERROR(save_checkpoint(dir.path(), small_tree(1), 1, {.prefix = "a/b"}), "prefix");
  EXPECT_PAX_ERROR(save_checkpoint(dir.path(), Tree::dict({{"a/b", x}, {"a", Tree::dict({{"b", x}})}}), 1),
                   "two leaves at the path 'a/b'");
  EXPECT_PAX_ERROR(save_checkpoint(dir.path(), Tree::dict({{"__metadata__", x}}), 1), "__metadata__");
  EXPECT_PAX_ERROR(save_checkpoint(dir.path(), small_tree(1), 1, {.config_json = "{bad"}), "not valid JSON");
  EXPECT_TRUE(available_steps(dir.path()).empty());
}

// ---- validation against the target ----

// A target that differs from the stored tree in its structure, a shape or a
// dtype is refused with the file and the path of the difference.
TEST(CheckpointTarget, MismatchesNameTheFileAndThePath) {
  struct Case {
    std::function<void(Tree&)> change;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](Tree& t) { t.set("extra", scalar(1.0f)); },
       "': the stored tree differs from the target at the root: keys differ (unexpected 'extra')"},
      {[](Tree& t) {
         t["params"].set("w", random_array({4, 3}, DType::f32, 1));
       },
       "': tensor 'params/w' is f32[3,4] in the checkpoint but f32[4,3] in the target"},
      {[](Tree& t) { t["params"].set("b", random_array({4}, DType::f32, 1)); },
       "': tensor 'params/b' is bf16[4] in the checkpoint but f32[4] in the target"},
  };
  TempDir dir;
  save_checkpoint(dir.path(), small_tree(1), 1);
  for (const Case& c : cases) {
    Tree target = small_tree(1);
    c.change(target);
    EXPECT_PAX_ERROR(restore_checkpoint(dir.path(), target), "'" + state_file(dir.path(), 1) + c.message);
  }
}

TEST(CheckpointTarget, WeakTypesFollowTheTarget) {
  TempDir dir;
  save_checkpoint(dir.path(), Tree::dict({{"lr", scalar(0.5, DType::f32, true)}}), 1);
  EXPECT_FALSE(restore_checkpoint(dir.path(), Tree())["lr"].leaf().weak_type());
  EXPECT_TRUE(
      restore_checkpoint(dir.path(), Tree::dict({{"lr", scalar(0.0, DType::f32, true)}}))["lr"].leaf().weak_type());
}

// ---- corrupted files ----

class CheckpointCorruption : public ::testing::Test {
 protected:
  void SetUp() override { path_ = save_checkpoint(dir_.path(), small_tree(1), 1); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  TempDir dir_;
  std::string path_;
};

TEST_F(CheckpointCorruption, BitFlipInTensorData) {
  const std::string f = file("state.safetensors");
  std::string bytes = read_bytes(f);
  bytes[tensor_offset(f, "params/w") + 5] ^= 0x10;
  write_bytes(f, bytes);
  EXPECT_PAX_ERROR(restore_checkpoint(dir_.path(), Tree()),
                   "safetensors file '" + f + "': tensor 'params/w' fails its CRC32C check");
}

TEST_F(CheckpointCorruption, BitFlipInEveryByteIsCaught) {
  // Every single-bit flip anywhere in the tensor file is rejected (or, in header
  // whitespace, harmless: the values then still verify).
  const std::string f = file("state.safetensors");
  const std::string good = read_bytes(f);
  int rejected = 0;
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bytes = good;
    bytes[i] ^= char(1 << (i % 8));
    write_bytes(f, bytes);
    try {
      EXPECT_TRUE(trees_identical(restore_checkpoint(dir_.path(), small_tree(0)), small_tree(1))) << "byte " << i;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(f), std::string::npos) << e.what();
      ++rejected;
    }
  }
  EXPECT_GT(rejected, int(good.size()) * 9 / 10);
}

TEST_F(CheckpointCorruption, TruncatedTensorFile) {
  const std::string f = file("state.safetensors");
  const std::string bytes = read_bytes(f);
  write_bytes(f, bytes.substr(0, bytes.size() - 3));
  EXPECT_PAX_ERROR(restore_checkpoint(dir_.path(), Tree()), "safetensors file '" + f + "': tensor '");
  EXPECT_PAX_ERROR(restore_checkpoint(dir_.path(), Tree()), "extend past the end of the data");
}

TEST_F(CheckpointCorruption, BadHeaderLength) {
  const std::string f = file("state.safetensors");
  std::string bytes = read_bytes(f);
  bytes[6] = 1;  // 2^48 + n
  write_bytes(f, bytes);
  EXPECT_PAX_ERROR(restore_checkpoint(dir_.path(), Tree()), "safetensors file '" + f + "': header length");
}

TEST_F(CheckpointCorruption, TensorRenamedInTheHeader) {
  const std::string f = file("state.safetensors");
  std::string bytes = read_bytes(f);
  bytes.replace(bytes.find("\"count\""), 7, "\"cnunt\"");
  write_bytes(f, bytes);
  EXPECT_PAX_ERROR(restore_checkpoint(dir_.path(), Tree()),
                   "safetensors file '" + f + "': tensor 'count' is listed in metadata.json but missing from the file");
}

TEST_F(CheckpointCorruption, DtypeChangedInTheHeader) {
  const std::string f = file("state.safetensors");
  std::string bytes = read_bytes(f);
  bytes.replace(bytes.find("\"F32\""), 5, "\"I32\"");
  write_bytes(f, bytes);
  EXPECT_PAX_ERROR(
      restore_checkpoint(dir_.path(), Tree()),
      "safetensors file '" + f + "': tensor 'params/w' is i32[3,4] in the file but f32[3,4] in metadata.json");
}

TEST_F(CheckpointCorruption, MetadataEdited) {
  const std::string f = file("metadata.json");
  std::string text = read_bytes(f);
  const size_t at = text.find("\"crc32c\":\"") + 10;
  text[at] = text[at] == '0' ? '1' : '0';
  write_bytes(f, text);
  EXPECT_PAX_ERROR(restore_checkpoint(dir_.path(), Tree()),
                   "'" + file("commit_success.txt") + "' does not match '" + f + "'");
}

TEST_F(CheckpointCorruption, MetadataNotJson) {
  write_bytes(file("metadata.json"), "{\"step\": ");
  EXPECT_PAX_ERROR(restore_checkpoint(dir_.path(), Tree()),
                   "checkpoint metadata '" + file("metadata.json") + "': not valid JSON");
}

TEST_F(CheckpointCorruption, MissingTensorFile) {
  std::remove(file("state.safetensors").c_str());
  EXPECT_PAX_ERROR(restore_checkpoint(dir_.path(), Tree()), "no such file: '" + file("state.safetensors") + "'");
}

// A FIFO in place of a tensor file would block the restore until a writer
// came: it is refused at once instead.
TEST_F(CheckpointCorruption, TensorFileIsAFifo) {
  std::remove(file("state.safetensors").c_str());
  ASSERT_EQ(::mkfifo(file("state.safetensors").c_str(), 0600), 0);
  EXPECT_PAX_ERROR(restore_checkpoint(dir_.path(), Tree()), "'" + file("state.safetensors") + "' is a FIFO");
}

TEST_F(CheckpointCorruption, MissingMarker) {
  std::remove(file("commit_success.txt").c_str());
  EXPECT_TRUE(available_steps(dir_.path()).empty());
  EXPECT_PAX_ERROR(restore_checkpoint(path_, Tree()), "is not a committed checkpoint");
}

// ---- async ----

TEST(CheckpointAsync, SaveRestoreAndPruneInTheBackground) {
  TempDir dir;
  AsyncManager async;
  for (int64_t s = 1; s <= 5; ++s) {
    save_checkpoint(dir.path(), small_tree(uint32_t(s)), s, {.keep = 2, .async_manager = &async});
  }
  async.wait_previous_save();
  EXPECT_FALSE(async.in_flight());
  EXPECT_EQ(available_steps(dir.path()), (std::vector<int64_t>{4, 5}));
  EXPECT_TRUE(trees_identical(restore_checkpoint(dir.path(), Tree()), small_tree(5)));
}

TEST(CheckpointAsync, ErrorsSurfaceAtTheNextSaveOrWait) {
  TempDir dir;
  AsyncManager async;
  async.run([] { PAX_FAIL("disk full"); });
  EXPECT_PAX_ERROR(save_checkpoint(dir.path(), small_tree(1), 1, {.async_manager = &async}), "disk full");
  EXPECT_TRUE(available_steps(dir.path()).empty());                          // the failed call saved nothing
  save_checkpoint(dir.path(), small_tree(1), 1, {.async_manager = &async});  // the error was reported once
  async.run([] { PAX_FAIL("no space left"); });
  EXPECT_PAX_ERROR(async.wait_previous_save(), "no space left");
  async.wait_previous_save();
  EXPECT_EQ(available_steps(dir.path()), (std::vector<int64_t>{1}));
}

// A full disk, as RLIMIT_FSIZE makes one (writes past the limit fail with
// EFBIG, SIGXFSZ ignored): the save fails with the file and the reason, the
// committed checkpoints still restore, and the next save in room works.
TEST(Checkpoint, AFullDiskFailsTheSaveAndKeepsEarlierCheckpoints) {
  TempDir dir;
  const Tree big = Tree::dict({{"w", random_array({1024, 256}, DType::f32, 7)}});  // 1 MiB
  save_checkpoint(dir.path(), small_tree(1), 1);
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  void (*old_handler)(int) = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = 64 * 1024;  // no file may grow past 64 KiB
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string message;
  try {
    save_checkpoint(dir.path(), big, 2);
  } catch (const Error& e) {
    message = e.what();
  }
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_NE(message.find("safetensors"), std::string::npos) << message;
  EXPECT_NE(message.find("File too large"), std::string::npos) << message;
  EXPECT_EQ(available_steps(dir.path()), (std::vector<int64_t>{1}));
  EXPECT_TRUE(trees_identical(restore_checkpoint(dir.path(), Tree()), small_tree(1)));
  save_checkpoint(dir.path(), big, 2, {.keep = 3});
  EXPECT_EQ(available_steps(dir.path()), (std::vector<int64_t>{1, 2}));
  EXPECT_TRUE(trees_identical(restore_checkpoint(dir.path(), Tree()), big));
}

TEST(CheckpointAsync, HeldArraysAreASnapshot) {
  // The save holds the arrays; the caller dropping or replacing its tree
  // cannot change what is written.
  TempDir dir;
  AsyncManager async;
  {
    Tree t = small_tree(3);
    save_checkpoint(dir.path(), t, 1, {.async_manager = &async});
    t = small_tree(4);
  }
  async.wait_previous_save();
  EXPECT_TRUE(trees_identical(restore_checkpoint(dir.path(), Tree()), small_tree(3)));
}

TEST(CheckpointAsync, DonatingTrainingStepsCannotChangeASaveInFlight) {
  // A jitted step that donates its argument reuses a buffer only when nothing
  // else holds it, and a save in flight holds every array it writes.
  TempDir dir;
  AsyncManager async;
  auto step = jit([](const Array& p) { return p * 0.5 + 1.0; }, {.donate_argnums = {0}});
  Array p = random_array({1 << 20}, DType::f32, 7);
  const std::vector<float> saved = p.to_vector<float>();
  save_checkpoint(dir.path(), Tree::dict({{"p", p}}), 1, {.async_manager = &async});
  for (int i = 0; i < 4; ++i) p = step(std::move(p));
  async.wait_previous_save();
  EXPECT_EQ(restore_checkpoint(dir.path(), Tree())["p"].leaf().to_vector<float>(), saved);
}

}  // namespace
}  // namespace pax::train
