// metadata.json: round trip of structures with every kind of node, the
// written form, and rejection of malformed documents.
#include "pax/train/checkpoint_metadata.h"

#include <gtest/gtest.h>

#include "pax/testing/checkpoint_testing.h"

namespace pax::train {
namespace {

CheckpointMetadata sample_metadata(const Tree& tree) {
  CheckpointMetadata m;
  m.step = 1234;
  m.paxcc_version = "0.1.0";
  m.config_hash = config_hash(R"({"lr": 0.1})");
  TreeItemRecord rec;
  rec.structure = tree_structure_records(tree);
  const std::vector<Array> leaves = tree_leaves(tree);
  const std::vector<std::string> paths = tree_paths(tree);
  for (size_t i = 0; i < leaves.size(); ++i) {
    rec.tensors.push_back({paths[i], leaves[i].dtype(), leaves[i].shape(), uint32_t(0x01020304u * (i + 1))});
  }
  m.trees["state"] = rec;
  m.json["input"] = {17, 0xdeadbeef};
  return m;
}

void expect_same(const CheckpointMetadata& a, const CheckpointMetadata& b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.format_version, b.format_version);
  EXPECT_EQ(a.paxcc_version, b.paxcc_version);
  EXPECT_EQ(a.config_hash, b.config_hash);
  ASSERT_EQ(a.trees.size(), b.trees.size());
  for (const auto& [name, ra] : a.trees) {
    const TreeItemRecord& rb = b.trees.at(name);
    ASSERT_EQ(ra.structure.size(), rb.structure.size());
    for (size_t i = 0; i < ra.structure.size(); ++i) {
      EXPECT_EQ(ra.structure[i].kind, rb.structure[i].kind) << i;
      EXPECT_EQ(ra.structure[i].key, rb.structure[i].key) << i;
      EXPECT_EQ(ra.structure[i].num_children, rb.structure[i].num_children) << i;
    }
    ASSERT_EQ(ra.tensors.size(), rb.tensors.size());
    for (size_t i = 0; i < ra.tensors.size(); ++i) {
      EXPECT_EQ(ra.tensors[i].name, rb.tensors[i].name);
      EXPECT_EQ(ra.tensors[i].dtype, rb.tensors[i].dtype);
      EXPECT_EQ(ra.tensors[i].shape, rb.tensors[i].shape);
      EXPECT_EQ(ra.tensors[i].crc32c, rb.tensors[i].crc32c);
    }
  }
  ASSERT_EQ(a.json.size(), b.json.size());
  for (const auto& [name, ja] : a.json) {
    EXPECT_EQ(ja.bytes, b.json.at(name).bytes);
    EXPECT_EQ(ja.crc32c, b.json.at(name).crc32c);
  }
}

TEST(CheckpointMetadata, RoundTrip) {
  const Tree tree = testing::every_kind_tree(3);
  const CheckpointMetadata m = sample_metadata(tree);
  const std::string text = checkpoint_metadata_to_json(m);
  expect_same(m, parse_checkpoint_metadata(text, "metadata.json"));
  // The structure rebuilds the tree, key order and empty containers included.
  const Tree rebuilt = tree_from_records(m.trees.at("state").structure, tree_leaves(tree));
  EXPECT_TRUE(testing::trees_identical(rebuilt, tree));
}

TEST(CheckpointMetadata, FloatAndNegativeStepsKeepTheirKind) {
  // flax's steps are ints or floats: 2.0 stays a float step, -3 an integer one.
  for (const auto& [step, written] : std::vector<std::pair<CheckpointStep, std::string>>{
           {-3, "-3"}, {2.0, "2.0"}, {0.5, "0.5"}, {1e-5, "1e-05"}, {1.5e16, "1.5e+16"}, {-0.25, "-0.25"}}) {
    CheckpointMetadata m = sample_metadata(Tree());
    m.step = step;
    const std::string text = checkpoint_metadata_to_json(m);
    EXPECT_NE(text.find("\"step\": " + written + ",\n"), std::string::npos) << text;
    const CheckpointStep parsed = parse_checkpoint_metadata(text, "metadata.json").step;
    EXPECT_EQ(parsed.is_integer(), step.is_integer()) << written;
    EXPECT_EQ(parsed.value(), step.value()) << written;
    EXPECT_EQ(parsed.str(), written);
  }
}

TEST(CheckpointMetadata, WrittenForm) {
  const Tree tree = Tree::dict({{"b", scalar(1.0f)}, {"a", Tree::list({Tree(), Tree::dict()})}});
  const std::string text = checkpoint_metadata_to_json(sample_metadata(tree));
  EXPECT_NE(text.find(R"("format": "paxcc-checkpoint")"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("step": 1234)"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("file": "state.safetensors")"), std::string::npos) << text;
  EXPECT_NE(text.find(R"({"name":"b","dtype":"F32","shape":[],"crc32c":"01020304"})"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("input": {"file":"input.json","bytes":17,"crc32c":"deadbeef"})"), std::string::npos) << text;
  EXPECT_NE(text.find(R"("tree": {"dict":[["b","b"],["a",[null,{"dict":[]}]]]})"), std::string::npos) << text;
  // Insertion order survives: "b" before "a".
  EXPECT_LT(text.find("\"b\""), text.find("\"a\"")) << text;
}

TEST(CheckpointMetadata, RootLeafAndNoneTrees) {
  for (const Tree& tree : {Tree(scalar(2.0)), Tree(), Tree::list(), Tree::dict()}) {
    const CheckpointMetadata m = sample_metadata(tree);
    const CheckpointMetadata back = parse_checkpoint_metadata(checkpoint_metadata_to_json(m), "m");
    expect_same(m, back);
    EXPECT_TRUE(testing::trees_identical(tree_from_records(back.trees.at("state").structure, tree_leaves(tree)), tree));
  }
}

TEST(CheckpointMetadata, ConfigHashIgnoresFormatting) {
  EXPECT_EQ(config_hash(R"({"a": 1, "b": [1, 2]})"), config_hash("{\n \"b\":[1,2],\"a\":1}"));
  EXPECT_NE(config_hash(R"({"a": 1})"), config_hash(R"({"a": 2})"));
  EXPECT_EQ(config_hash("{}").rfind("fnv1a64:", 0), 0u);
  EXPECT_EQ(config_hash("{}").size(), 8u + 16u);
  EXPECT_PAX_ERROR(config_hash("{oops"), "checkpoint config: not valid JSON");
}

TEST(CheckpointMetadata, ItemNames) {
  EXPECT_TRUE(is_valid_item_name("model"));
  EXPECT_TRUE(is_valid_item_name("opt_state-2.v1"));
  for (const char* bad : {"", ".hidden", "a/b", "..", "metadata", "commit_success", "sp ace", "x\n"}) {
    EXPECT_FALSE(is_valid_item_name(bad)) << bad;
  }
  EXPECT_FALSE(is_valid_item_name(std::string(101, 'a')));
}

TEST(CheckpointMetadata, TreeFromRecordsChecksCounts) {
  const Tree tree = Tree::dict({{"a", scalar(1.0f)}, {"b", scalar(2.0f)}});
  const auto rec = tree_structure_records(tree);
  const std::vector<Array> one{scalar(1.0f)};
  EXPECT_PAX_ERROR(tree_from_records(rec, one), "more leaves than the 1 given");
  const std::vector<Array> three{scalar(1.0f), scalar(1.0f), scalar(1.0f)};
  EXPECT_PAX_ERROR(tree_from_records(rec, three), "has 2 leaves but 3 were given");
  EXPECT_PAX_ERROR(tree_from_records(std::span(rec).first(2), tree_leaves(tree)), "ends inside");
}

// ---- malformed documents ----

std::string good_text() {
  return checkpoint_metadata_to_json(sample_metadata(Tree::dict({{"w", scalar(1.0f)}, {"v", scalar(2.0f)}})));
}

std::string replace(std::string s, const std::string& from, const std::string& to) {
  const size_t at = s.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) s.replace(at, from.size(), to);
  return s;
}

TEST(CheckpointMetadataMalformed, NotJsonOrWrongTypes) {
  EXPECT_PAX_ERROR(parse_checkpoint_metadata("{", "m.json"), "checkpoint metadata 'm.json': not valid JSON");
  EXPECT_PAX_ERROR(parse_checkpoint_metadata("[]", "m.json"), "expected a JSON object");
  EXPECT_PAX_ERROR(parse_checkpoint_metadata(replace(good_text(), "\"step\": 1234", "\"step\": true"), "m"),
                   "step must be an integer in int64's range or a finite float");
  EXPECT_PAX_ERROR(
      parse_checkpoint_metadata(replace(good_text(), "\"step\": 1234", "\"step\": 9223372036854775808"), "m"),
      "step must be an integer in int64's range");
  EXPECT_PAX_ERROR(parse_checkpoint_metadata(replace(good_text(), "\"step\": 1234", "\"step\": \"1234\""), "m"),
                   "step must be");
  EXPECT_PAX_ERROR(parse_checkpoint_metadata(replace(good_text(), "paxcc-checkpoint", "other"), "m"),
                   "format must be \"paxcc-checkpoint\"");
  EXPECT_PAX_ERROR(
      parse_checkpoint_metadata(replace(good_text(), "\"format_version\": 1", "\"format_version\": 3"), "m"),
      "format_version 3 is not readable by this paxcc (it reads versions 1 and 2)");
  // Version 2 reads version 1's items; a sharded item needs version 2.
  EXPECT_EQ(parse_checkpoint_metadata(replace(good_text(), "\"format_version\": 1", "\"format_version\": 2"), "m")
                .trees.size(),
            parse_checkpoint_metadata(good_text(), "m").trees.size());
  EXPECT_PAX_ERROR(parse_checkpoint_metadata(replace(good_text(), "\"step\": 1234", "\"step\": 1, \"extra\": 0"), "m"),
                   "unexpected field \"extra\"");
  EXPECT_PAX_ERROR(parse_checkpoint_metadata(replace(good_text(), "\"step\": 1234,", ""), "m"),
                   "missing field \"step\"");
}

TEST(CheckpointMetadataMalformed, DuplicateKeys) {
  EXPECT_PAX_ERROR(parse_checkpoint_metadata(replace(good_text(), "\"step\": 1234", "\"step\": 1, \"step\": 2"), "m"),
                   "duplicate key \"step\"");
  EXPECT_PAX_ERROR(parse_checkpoint_metadata(replace(good_text(), "\"v\",", "\"w\","), "m"),
                   "a dict node has the key 'w' twice");
}

TEST(CheckpointMetadataMalformed, TensorsAndLeavesDisagree) {
  EXPECT_PAX_ERROR(parse_checkpoint_metadata(replace(good_text(), "\"name\":\"v\"", "\"name\":\"x\""), "m"),
                   "item 'state': leaf 1 of the tree is 'v' but tensor 1 is 'x'");
  EXPECT_PAX_ERROR(parse_checkpoint_metadata(replace(good_text(), "\"name\":\"v\"", "\"name\":\"w\""), "m"),
                   "tensor 'w' is listed twice");
  EXPECT_PAX_ERROR(parse_checkpoint_metadata(replace(good_text(), "\"dtype\":\"F32\"", "\"dtype\":\"F31\""), "m"),
                   "item 'state': tensor 'w': unknown dtype \"F31\"");
  EXPECT_PAX_ERROR(
      parse_checkpoint_metadata(replace(good_text(), "\"crc32c\":\"01020304\"", "\"crc32c\":\"0102030\""), "m"),
      "tensor 'w': crc32c must be a string of 8 hex digits");
  EXPECT_PAX_ERROR(
      parse_checkpoint_metadata(replace(good_text(), "\"crc32c\":\"01020304\"", "\"crc32c\":\"0102030G\""), "m"),
      "8 lowercase hex digits");
  EXPECT_PAX_ERROR(
      parse_checkpoint_metadata(replace(good_text(), "\"state.safetensors\"", "\"../x.safetensors\""), "m"),
      "file must be \"state.safetensors\"");
}

TEST(CheckpointMetadataMalformed, BadItemNames) {
  EXPECT_PAX_ERROR(parse_checkpoint_metadata(replace(good_text(), "\"state\": {", "\"../state\": {"), "m"),
                   "invalid item name '../state'");
  EXPECT_PAX_ERROR(parse_checkpoint_metadata(replace(good_text(), "\"input\": {", "\"state\": {"), "m"),
                   "'state' is both a tree item and a JSON item");
}

TEST(CheckpointMetadataMalformed, BadTreeNodes) {
  const std::string text = good_text();
  const size_t at = text.find("\"tree\": ");
  const size_t end = text.find("\"tensors\"");
  for (const char* node :
       {"1", "true", "{\"list\": []}", "{\"dict\": 5}", "{\"dict\": [[1, null]]}", "{\"dict\": [[\"a\"]]}"}) {
    std::string bad = text;
    bad.replace(at, end - at, std::string("\"tree\": ") + node + ", ");
    EXPECT_THROW(parse_checkpoint_metadata(bad, "m"), Error) << node;
  }
}

TEST(CheckpointMetadataMalformed, DeepNesting) {
  std::string text = good_text();
  const size_t at = text.find("\"tree\": ");
  const size_t end = text.find("\"tensors\"");
  text.replace(at, end - at, "\"tree\": " + std::string(5000, '[') + std::string(5000, ']') + ", ");
  EXPECT_PAX_ERROR(parse_checkpoint_metadata(text, "m"), "nested deeper than 600 levels");
}

}  // namespace
}  // namespace pax::train
