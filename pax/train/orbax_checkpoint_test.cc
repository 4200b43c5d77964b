// Orbax and Pax checkpoints read against fixtures orbax-checkpoint and
// TensorStore wrote (testdata/make_orbax_fixtures.py): the OCDBT default,
// zarr directories per array, an older Pax checkpoint with chunked gzip
// arrays and a missing chunk; the manager and item directories around them;
// init_from through the name table; damaged files named.
#include "pax/train/orbax_checkpoint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>

#include "pax/ops/numpy.h"
#include "pax/testing/testing.h"
#include "pax/train/import_params.h"
#include "pax/train/ocdbt.h"

namespace pax::train {
namespace {

namespace fs = std::filesystem;

const std::string kData = std::string(PAX_SOURCE_DIR) + "/pax/train/testdata/";

std::vector<float> arange(int n, float scale = 1, float offset = 0) {
  std::vector<float> v;
  for (int i = 0; i < n; ++i) v.push_back(float(i) * scale + offset);
  return v;
}

// The tree make_orbax_fixtures.py saves.
void expect_fixture_tree(const Tree& t, const std::string& which) {
  SCOPED_TRACE(which);
  ASSERT_TRUE(t.is_dict());
  const Tree& p = t["params"];
  EXPECT_EQ(p["dense"]["kernel"].leaf().aval().str(), "f32[3,4]");
  EXPECT_TRUE(testing::all_close(p["dense"]["kernel"].leaf(), array(arange(12, 0.5f), {3, 4}), 0, 0));
  EXPECT_TRUE(testing::all_close(p["dense"]["bias"].leaf(), array<float>({1, 2, 3, 4}), 0, 0));
  EXPECT_EQ(p["emb"].leaf().aval().str(), "bf16[2,3]");
  EXPECT_TRUE(testing::all_close(p["emb"].leaf().astype(DType::f32), array(arange(6, 0.25f), {2, 3}), 0, 0));
  ASSERT_TRUE(p["layers"].is_list());
  ASSERT_EQ(p["layers"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(p["layers"][size_t(i)]["w"].leaf().dtype(), DType::f64);
    EXPECT_TRUE(testing::all_close(p["layers"][size_t(i)]["w"].leaf().astype(DType::f32),
                                   array(arange(4, 1, 10.0f * float(i)), {2, 2}), 0, 0));
  }
  EXPECT_EQ(p["count"].leaf().to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2}));
  std::vector<float> table(1600);
  for (size_t i = 0; i < table.size(); ++i) table[i] = float(std::sin(double(i)));
  EXPECT_TRUE(testing::all_close(p["table"].leaf(), array(table, {40, 40}), 0, 1e-7f));
  EXPECT_EQ(t["step"].leaf().aval().str(), "i32[]");
  EXPECT_EQ(t["step"].leaf().item<int32_t>(), 7);
}

TEST(OrbaxCheckpoint, ReadsOrbaxsDefaultOcdbtCheckpoint) {
  expect_fixture_tree(read_orbax_checkpoint(kData + "orbax_ocdbt"), "ocdbt");
}

// "group_<i mod 4>/key_<i, 3 digits>", as make_orbax_fixtures.py names them.
std::string deep_key(int i) {
  std::string digits = std::to_string(i);
  return "group_" + std::to_string(i % 4) + "/key_" + std::string(3 - digits.size(), '0') + digits;
}

// A B+tree of several levels (400-byte nodes), values beyond 16 bytes in data files.
TEST(OrbaxCheckpoint, OcdbtStoreReadsEveryKeyOfADeepTree) {
  const std::unique_ptr<KeyValueReader> store = open_ocdbt_store(kData + "ocdbt_deep");
  std::vector<std::string> expected;
  for (int i = 0; i < 120; ++i) expected.push_back(deep_key(i));
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(store->keys(), expected);
  for (int i = 0; i < 120; ++i) {
    std::string value;
    for (int k = 0; k <= i % 5; ++k) value += "value " + std::to_string(i) + ";";
    EXPECT_EQ(store->read(deep_key(i)), value) << i;
  }
  EXPECT_FALSE(store->read("group_0/key_001"));  // key_001 is in group_1
}

// Damage to the manifest or a node is named, never read as other keys.
TEST(OrbaxCheckpoint, DamagedOcdbtFilesAreNamed) {
  const fs::path dir = fs::temp_directory_path() / ("pax_ocdbt_bad_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::copy(kData + "ocdbt_deep", dir, fs::copy_options::recursive);
  const fs::path manifest = dir / "manifest.ocdbt";
  std::string bytes;
  {
    std::ifstream in(manifest, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  auto write = [&](const std::string& b) { std::ofstream(manifest, std::ios::binary | std::ios::trunc) << b; };
  std::string flipped = bytes;
  flipped[20] ^= 0x10;
  write(flipped);
  EXPECT_PAX_ERROR(open_ocdbt_store(dir.string()), "does not match the bytes'");
  write(bytes.substr(0, bytes.size() - 1));
  EXPECT_PAX_ERROR(open_ocdbt_store(dir.string()), "the header says");
  flipped = bytes;
  flipped[0] = 0x7f;
  write(flipped);
  EXPECT_PAX_ERROR(open_ocdbt_store(dir.string()), "magic 0x7fdb3a2a, expected 0x0cdb3a2a");
  write(bytes);
  for (const auto& e : fs::directory_iterator(dir / "d")) {  // every data file cut in half
    fs::resize_file(e.path(), fs::file_size(e.path()) / 2);
  }
  EXPECT_PAX_ERROR(open_ocdbt_store(dir.string()), "has no bytes [");
  fs::remove_all(dir);
}

TEST(OrbaxCheckpoint, ReadsADirectoryPerArray) {
  expect_fixture_tree(read_orbax_checkpoint(kData + "orbax_zarr"), "zarr");
}

TEST(OrbaxCheckpoint, ReadsAnOlderPaxCheckpointWithChunksAndAFillValue) {
  const Tree t = read_orbax_checkpoint(kData + "pax_zarr");
  std::vector<float> w = arange(35, 1, -17);
  for (int r = 2; r < 4; ++r)  // chunk (1, 1) of (2, 3) chunks was never written
    for (int c = 3; c < 6; ++c) w[size_t(r * 7 + c)] = 0;
  EXPECT_TRUE(testing::all_close(t["mdl_vars"]["params"]["lm"]["softmax"]["w"].leaf(), array(w, {5, 7}), 0, 0));
  EXPECT_TRUE(testing::all_close(t["mdl_vars"]["params"]["lm"]["softmax"]["b"].leaf(), array(arange(7)), 0, 0));
  EXPECT_EQ(t["step"].leaf().item<int64_t>(), 1000);
  // Pax's TrainState: the params are mdl_vars/params.
  const Tree params = params_subtree(t);
  EXPECT_EQ(params.keys(), (std::vector<std::string>{"lm"}));
}

// A manager's directory: the highest numbered step, and its one item.
TEST(OrbaxCheckpoint, FindsTheLatestStepAndItsItem) {
  const fs::path dir = fs::temp_directory_path() / ("pax_orbax_manager_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir / "100" / "default");
  fs::create_directories(dir / "2000" / "default");
  fs::copy(kData + "orbax_zarr", dir / "2000" / "default", fs::copy_options::recursive);
  EXPECT_TRUE(is_orbax_checkpoint(dir.string()));
  expect_fixture_tree(read_orbax_checkpoint(dir.string()), "manager");
  EXPECT_FALSE(is_orbax_checkpoint((dir / "100").string()));
  EXPECT_PAX_ERROR(read_orbax_checkpoint((dir / "100").string()), "holds no Orbax checkpoint");
  fs::remove_all(dir);
}

TEST(OrbaxCheckpoint, InitFromMapsTheStateAroundTheParams) {
  Tree like = Tree::dict();
  like["lm"]["softmax"]["w"] = Tree(zeros(Shape{5, 7}, DType::bf16));
  like["lm"]["softmax"]["b"] = Tree(zeros(Shape{7}, DType::f32));
  const Tree got = params_from_checkpoint(kData + "pax_zarr", like);
  EXPECT_EQ(got["lm"]["softmax"]["w"].leaf().dtype(), DType::bf16);  // the model's dtype
  EXPECT_TRUE(testing::all_close(got["lm"]["softmax"]["b"].leaf(), array(arange(7)), 0, 0));
  // A sharded model's block, with the whole shape given: the whole array comes back.
  like["lm"]["softmax"]["w"] = Tree(zeros(Shape{5, 1}, DType::f32));
  const Tree whole = params_from_checkpoint(kData + "pax_zarr", like, {{"lm/softmax/w", Shape{5, 7}}});
  EXPECT_EQ(whole["lm"]["softmax"]["w"].leaf().aval().str(), "f32[5,7]");
  EXPECT_PAX_ERROR(params_from_checkpoint(kData + "pax_zarr", like, {{"lm/softmax/w", Shape{5, 8}}}),
                   "shapes that differ: lm/softmax/w f32[5,7] (the model's: f32[5,8])");
  like["lm"]["softmax"]["w"] = Tree(zeros(Shape{7, 5}, DType::f32));
  like["lm"]["extra"] = Tree(zeros(Shape{1}, DType::f32));
  EXPECT_PAX_ERROR(params_from_checkpoint(kData + "pax_zarr", like),
                   "the model's params it lacks: lm/extra; shapes that differ: lm/softmax/w f32[5,7] (the model's: "
                   "f32[7,5])");
  // Orbax's tree {params: ..., step}: the params subtree.
  Tree dense = Tree::dict();
  dense["kernel"] = Tree(zeros(Shape{3, 4}, DType::f32));
  dense["bias"] = Tree(zeros(Shape{4}, DType::f32));
  Tree model = Tree::dict();
  model["dense"] = dense;
  model["emb"] = Tree(zeros(Shape{2, 3}, DType::f32));
  model["layers"] = Tree::list();
  for (int i = 0; i < 2; ++i) {
    Tree layer = Tree::dict();
    layer["w"] = Tree(zeros(Shape{2, 2}, DType::f32));
    model["layers"].push_back(layer);
  }
  model["count"] = Tree(zeros(Shape{3}, DType::i64));
  model["table"] = Tree(zeros(Shape{40, 40}, DType::f32));
  const Tree from_ocdbt = params_from_checkpoint(kData + "orbax_ocdbt", model);
  EXPECT_TRUE(testing::all_close(from_ocdbt["dense"]["kernel"].leaf(), array(arange(12, 0.5f), {3, 4}), 0, 0));
  EXPECT_PAX_ERROR(params_from_checkpoint(kData + "no_such_checkpoint", model), "no such file or directory");
}

TEST(OrbaxCheckpoint, DamagedArraysAreNamed) {
  const fs::path dir = fs::temp_directory_path() / ("pax_orbax_bad_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::copy(kData + "orbax_zarr", dir, fs::copy_options::recursive);
  const fs::path chunk = dir / "params.dense.kernel" / "0.0";
  fs::resize_file(chunk, fs::file_size(chunk) - 4);  // a cut zstd frame
  EXPECT_PAX_ERROR(read_orbax_checkpoint(dir.string()), "zarr array 'params.dense.kernel'");
  std::ofstream(dir / "params.dense.kernel" / ".zarray")
      << R"({"chunks":[3,4],"compressor":{"id":"blosc"},"dtype":"<f4","fill_value":null,"filters":null,)"
      << R"("order":"C","shape":[3,4],"zarr_format":2})";
  EXPECT_PAX_ERROR(read_orbax_checkpoint(dir.string()), "compressor 'blosc' is not supported");
  std::ofstream(dir / "params.dense.kernel" / ".zarray")
      << R"({"chunks":[3,4],"compressor":null,"dtype":">f4","fill_value":null,"filters":null,)"
      << R"("order":"C","shape":[3,4],"zarr_format":2})";
  EXPECT_PAX_ERROR(read_orbax_checkpoint(dir.string()), "dtype '>f4' is not one paxcc holds");
  fs::remove(dir / "params.dense.kernel" / ".zarray");
  EXPECT_PAX_ERROR(read_orbax_checkpoint(dir.string()), "no params.dense.kernel/.zarray");
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pax::train
