// Flax's msgpack serialization against a file Flax wrote
// (testdata/make_flax_fixture.py): every array read back with its dtype,
// shape and values, and the same tree written by paxcc to the same bytes;
// round trips; and bytes that are not such a serialization.
#include "pax/train/flax_msgpack.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "pax/data/file_io.h"
#include "pax/ops/numpy.h"
#include "pax/train/checkpoint.h"
#include "pax/train/checkpoint_manager.h"
#include "pax/train/import_params.h"
#include "pax/testing/testing.h"

namespace pax::train {
namespace {

const std::string kFixture = std::string(PAX_SOURCE_DIR) + "/pax/train/testdata/flax_state.msgpack";

TEST(FlaxMsgpack, ReadsWhatFlaxWroteAndWritesTheSameBytes) {
  const Tree t = read_flax_msgpack(kFixture);
  const Tree& dense = t["params"]["dense"];
  EXPECT_EQ(dense["kernel"].leaf().dtype(), DType::f32);
  EXPECT_EQ(dense["kernel"].leaf().shape(), Shape({2, 3}));
  EXPECT_TRUE(testing::all_close(dense["kernel"].leaf(), {0, 0.25, 0.5, 0.75, 1, 1.25}, 0, 0));
  EXPECT_TRUE(testing::all_close(dense["bias"].leaf(), {-1.5, 0, 2.25}, 0, 0));
  EXPECT_EQ(t["params"]["embedding"].leaf().dtype(), DType::bf16);
  EXPECT_TRUE(testing::all_close(t["params"]["embedding"].leaf(), {1, -2, 0.5, 3}, 0, 0));
  EXPECT_EQ(t["params"]["scale"].leaf().dtype(), DType::f64);
  EXPECT_EQ(t["params"]["scale"].leaf().shape(), Shape({}));
  EXPECT_EQ(t["params"]["scale"].leaf().item<double>(), 2.5);
  EXPECT_EQ(t["step"].leaf().dtype(), DType::i32);
  EXPECT_EQ(t["step"].leaf().item<int32_t>(), 7);
  EXPECT_EQ(t["mask"].leaf().dtype(), DType::bool_);
  EXPECT_EQ(t["ids"].leaf().to_vector<int64_t>(), (std::vector<int64_t>{1, 2, 3}));
  // Written back: Flax's bytes exactly.
  EXPECT_EQ(to_flax_msgpack(t), data::read_file(kFixture));
}

TEST(FlaxMsgpack, RoundTripsATree) {
  Tree t = Tree::dict();
  t["a"] = testing::random_array({3, 4}, DType::f32, 1);
  t["b"]["c"] = testing::random_array({5}, DType::bf16, 2);
  t["b"]["d"] = testing::random_array({}, DType::f64, 3);
  t["list"] = Tree::list({testing::random_array({2}, DType::f32, 4)});
  const Tree back = from_flax_msgpack(to_flax_msgpack(t));
  EXPECT_TRUE(testing::all_close(back["a"].leaf(), t["a"].leaf(), 0, 0));
  EXPECT_EQ(back["b"]["c"].leaf().dtype(), DType::bf16);
  EXPECT_TRUE(testing::all_close(back["b"]["c"].leaf(), t["b"]["c"].leaf(), 0, 0));
  EXPECT_TRUE(testing::all_close(back["b"]["d"].leaf(), t["b"]["d"].leaf(), 0, 0));
  EXPECT_TRUE(testing::all_close(back["list"][0].leaf(), t["list"][0].leaf(), 0, 0));
}

// A job's latest checkpoint as Flax msgpack: the params, or the state
// without paxcc's own "extra".
TEST(FlaxMsgpack, ExportsTheLatestCheckpoint) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("pax_flax_export_" + std::to_string(::getpid()))).string();
  std::filesystem::remove_all(dir);
  EXPECT_PAX_ERROR(export_flax_checkpoint(dir, dir + "/out.msgpack", false), "no committed checkpoint");
  Tree params = Tree::dict();
  params["dense"]["w"] = testing::random_array({3, 2}, DType::f32, 1);
  for (int64_t step : {2, 5}) {
    const Tree state = Tree::dict({{"step", Tree(full({}, double(step), DType::i64))},
                                   {"params", params},
                                   {"opt_state", Tree::dict({{"count", Tree(full({}, 1.0, DType::i32))}})},
                                   {"extra", Tree()}});
    CheckpointManager mgr(dir, {.async = false});
    mgr.save(step, {.trees = {{"train_state", state}}});
  }
  EXPECT_EQ(export_flax_checkpoint(dir, dir + "/params.msgpack", false), 5);
  const Tree back = read_flax_msgpack(dir + "/params.msgpack");
  EXPECT_TRUE(testing::all_close(back["dense"]["w"].leaf(), params["dense"]["w"].leaf(), 0, 0));
  EXPECT_EQ(export_flax_checkpoint(dir, dir + "/state.msgpack", true), 5);
  const Tree whole = read_flax_msgpack(dir + "/state.msgpack");
  EXPECT_EQ(whole.size(), 3u);
  EXPECT_FALSE(whole.contains("extra"));
  EXPECT_EQ(whole["opt_state"]["count"].leaf().item<int32_t>(), 1);
  std::filesystem::remove_all(dir);
}

// init_from: a params file in the model's structure, converted to its
// dtypes; what does not match is listed.
TEST(FlaxMsgpack, ParamsFromAFileFollowTheModelsTree) {
  const std::string path =
      (std::filesystem::temp_directory_path() / ("pax_flax_params_" + std::to_string(::getpid()) + ".msgpack"))
          .string();
  Tree like = Tree::dict();
  like["dense"]["w"] = testing::random_array({3, 2}, DType::f32, 1);
  like["dense"]["b"] = testing::random_array({2}, DType::f32, 2);
  Tree file = Tree::dict();
  file["dense"]["w"] = testing::random_array({3, 2}, DType::f64, 3);
  file["dense"]["b"] = testing::random_array({2}, DType::f32, 4);
  write_flax_msgpack(path, file);
  const Tree got = params_from_checkpoint(path, like);
  EXPECT_EQ(got["dense"]["w"].leaf().dtype(), DType::f32);
  EXPECT_TRUE(testing::all_close(got["dense"]["w"].leaf(), file["dense"]["w"].leaf().astype(DType::f32), 0, 0));
  EXPECT_TRUE(testing::all_close(got["dense"]["b"].leaf(), file["dense"]["b"].leaf(), 0, 0));
  file["dense"]["w"] = testing::random_array({2, 3}, DType::f32, 5);
  file["other"] = testing::random_array({1}, DType::f32, 6);
  file["dense"]["b"] = Tree::dict();  // b missing as a leaf
  write_flax_msgpack(path, file);
  try {
    params_from_checkpoint(path, like);
    ADD_FAILURE() << "a mismatched file was accepted";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("the model's params it lacks: dense/b"), std::string::npos) << m;
    EXPECT_NE(m.find("names the model has not: other"), std::string::npos) << m;
    EXPECT_NE(m.find("shapes that differ: dense/w f32[2,3] (the model's: f32[3,2])"), std::string::npos) << m;
  }
  std::filesystem::remove(path);
}

// Arrays above Flax's MAX_CHUNK_SIZE (64 bytes in the fixture) are dicts of
// flat chunks; read back whole, and written to Flax's bytes.
TEST(FlaxMsgpack, ChunkedArraysAsFlaxWritesThem) {
  const std::string bytes = data::read_file(std::string(PAX_SOURCE_DIR) + "/pax/train/testdata/flax_chunked.msgpack");
  const Tree t = from_flax_msgpack(bytes, "flax_chunked.msgpack");
  std::vector<float> w(40);
  for (int i = 0; i < 40; ++i) w[size_t(i)] = float(i) - 3.5f;
  EXPECT_EQ(t["w"].leaf().aval().str(), "f32[5,8]");
  EXPECT_TRUE(testing::all_close(t["w"].leaf(), array(w, {5, 8}), 0, 0));
  EXPECT_TRUE(testing::all_close(t["b"].leaf(), array<float>({1, 2}), 0, 0));
  Tree mine = Tree::dict();
  mine["w"] = array(w, {5, 8});
  mine["b"] = array<float>({1, 2});
  EXPECT_EQ(to_flax_msgpack(mine, 64), bytes);
  const std::string whole = to_flax_msgpack(mine);  // below 2^30 bytes: one value
  EXPECT_LT(whole.size(), bytes.size());
  EXPECT_TRUE(testing::all_close(from_flax_msgpack(whole)["w"].leaf(), array(w, {5, 8}), 0, 0));
  // A chunk missing is named.
  std::string cut = to_flax_msgpack(mine, 64);
  const size_t key = cut.find("chunks");
  ASSERT_NE(key, std::string::npos);
  cut[key + 6] = char(0x82);  // the chunks map claims 2 entries instead of 3
  EXPECT_THROW(from_flax_msgpack(cut, "cut"), Error);
}

TEST(FlaxMsgpack, BadBytesAreNamed) {
  EXPECT_PAX_ERROR(from_flax_msgpack("\xc7\x05", "x.msgpack"), "x.msgpack: not msgpack");
  const std::string bytes = data::read_file(kFixture);
  EXPECT_PAX_ERROR(from_flax_msgpack(std::string_view(bytes).substr(0, bytes.size() - 3), "cut"), "cut:");
  // An extension type Flax does not write (type 9 with 1 byte).
  EXPECT_PAX_ERROR(from_flax_msgpack(std::string("\x81\xa1k\xd4\x09\x00", 6), "odd"), "extension of type 9");
  EXPECT_PAX_ERROR(read_flax_msgpack("/no/such/file.msgpack"), "/no/such/file.msgpack");
}

}  // namespace
}  // namespace pax::train
