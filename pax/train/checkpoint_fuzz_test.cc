// Random-mutation tests of the readers (the libFuzzer targets in fuzz/ go
// further): mutated safetensors images, metadata.json documents and
// checkpoint directories must either read back correctly or throw
// pax::Error, never crash or throw anything else.
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "pax/testing/checkpoint_testing.h"
#include "pax/train/checkpoint.h"

namespace pax::train {
namespace {

using testing::random_array;

// One to four random edits: bit flips, byte values that matter to JSON, cuts,
// insertions, duplicated runs and changes of the header length field.
std::string mutate(std::string s, std::mt19937& rng) {
  auto pick = [&](size_t n) { return n == 0 ? size_t(0) : size_t(rng() % n); };
  static const char kSpecial[] = "{}[]\",:0123456789-.eE \\u\0\xff";
  const int edits = 1 + int(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    switch (rng() % 8) {
      case 0:
        if (!s.empty()) s[pick(s.size())] ^= char(1 << (rng() % 8));
        break;
      case 1:
        if (!s.empty()) s[pick(s.size())] = kSpecial[pick(sizeof(kSpecial) - 1)];
        break;
      case 2:
        if (!s.empty()) s[pick(s.size())] = char(rng());
        break;
      case 3: s.resize(pick(s.size() + 1)); break;
      case 4: s.insert(pick(s.size() + 1), std::string(1 + pick(8), kSpecial[pick(sizeof(kSpecial) - 1)])); break;
      case 5:
        if (!s.empty()) {
          const size_t at = pick(s.size()), len = 1 + pick(std::min<size_t>(32, s.size() - at));
          s.insert(pick(s.size() + 1), s.substr(at, len));
        }
        break;
      case 6:
        if (!s.empty()) {
          const size_t at = pick(s.size());
          s.erase(at, 1 + pick(std::min<size_t>(16, s.size() - at)));
        }
        break;
      case 7:
        if (s.size() >= 8) {  // the safetensors length field
          uint64_t n = 0;
          for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(s[size_t(i)]);
          n = (rng() % 2) ? n + uint64_t(int(rng() % 17) - 8) : (uint64_t(rng()) << (rng() % 40));
          for (int i = 0; i < 8; ++i) s[size_t(i)] = char((n >> (8 * i)) & 0xFF);
        }
        break;
    }
  }
  return s;
}

std::vector<NamedArray> sample_tensors() {
  return {{"params/w", random_array({4, 3}, DType::f32, 1)},
          {"params/b", random_array({3}, DType::bf16, 2)},
          {"step", scalar(int64_t(42))},
          {"mask", random_array({5}, DType::u8, 3, 0, 2)},
          {"empty", random_array({0, 2}, DType::f64, 4)}};
}

TEST(CheckpointFuzz, MutatedSafetensorsImages) {
  const std::string good = serialize_safetensors(sample_tensors(), {{"format", "paxcc"}});
  std::mt19937 rng(1);
  int accepted = 0;
  for (int i = 0; i < 30000; ++i) {
    const std::string bytes = mutate(good, rng);
    try {
      const SafetensorsContents c =
          read_safetensors(std::span(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size()), "fuzz");
      for (const NamedArray& t : c.tensors) ASSERT_LE(t.array.nbytes(), bytes.size());
      ++accepted;
    } catch (const Error&) {
    }
  }
  EXPECT_LT(accepted, 30000);
}

TEST(CheckpointFuzz, MutatedMetadata) {
  const Tree tree = testing::every_kind_tree(1);
  CheckpointItems items;
  items.trees["state"] = tree;
  items.json["input"] = "{\"a\": 1}";
  const PreparedCheckpoint p = prepare_checkpoint(items, 9, "{}");
  const std::string good = checkpoint_metadata_to_json(p.metadata);
  std::mt19937 rng(2);
  for (int i = 0; i < 20000; ++i) {
    const std::string text = mutate(good, rng);
    try {
      const CheckpointMetadata m = parse_checkpoint_metadata(text, "fuzz");
      for (const auto& [name, rec] : m.trees) {
        const std::vector<Array> leaves(rec.tensors.size(), scalar(0.0f));
        tree_from_records(rec.structure, leaves);
      }
    } catch (const Error&) {
    }
  }
}

TEST(CheckpointFuzz, MutatedCheckpointDirectories) {
  testing::TempDir dir;
  const Tree tree = testing::every_kind_tree(5);
  const std::string path = save_checkpoint(dir.path(), tree, 1);
  const char* files[] = {"state.safetensors", "metadata.json", "commit_success.txt"};
  std::vector<std::string> originals;
  for (const char* f : files) originals.push_back(testing::read_bytes(path + "/" + f));
  std::mt19937 rng(3);
  int rejected = 0;
  for (int i = 0; i < 600; ++i) {
    const size_t which = rng() % 3;
    testing::write_bytes(path + "/" + files[which], mutate(originals[which], rng));
    try {
      ASSERT_TRUE(testing::trees_identical(restore_checkpoint(dir.path(), Tree()), tree)) << "iteration " << i;
    } catch (const Error&) {
      ++rejected;
    }
    testing::write_bytes(path + "/" + files[which], originals[which]);
  }
  EXPECT_GT(rejected, 500);
}

}  // namespace
}  // namespace pax::train
