// Corpus record files against fixtures written by independent writers
// (pax/data/testdata/make_corpus_fixtures.py: the `tfrecord` package and
// Python's json / gzip): TFRecord shards of tf.Example found by a shard
// pattern, gzipped JSON lines, the documents TextLmInput makes of them; and
// every kind of damage, as an error naming the file and record or, with
// skip_bad, counted.
#include "pax/data/record_files.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "pax/data/file_io.h"
#include "pax/data/text_lm.h"
#include "pax/testing/testing.h"

namespace pax::data {
namespace {

const std::string kDir = std::string(PAX_SOURCE_DIR) + "/pax/data/testdata/";
const std::string kShards = kDir + "c4-mini.tfrecord-*-of-00002";

// The fixtures' documents, in order (make_corpus_fixtures.py's DOCS).
const std::vector<std::string> kDocs = {
    "In the beginning God created the heaven and the earth.",
    "And the earth was without form, and void; and darkness was upon the face of the deep.",
    "Caf\xc3\xa9 na\xc3\xafve r\xc3\xa9sum\xc3\xa9: text that is not ASCII.",
    "A line with \"quotes\", a tab\there and a backslash \\ too.",
    "",
    "The last document of the corpus.",
};

std::string scratch(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("pax_records_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

std::vector<std::string> all_documents(const std::vector<std::string>& files, const std::string& field = "text") {
  std::vector<std::string> docs;
  BadRecords bad;
  for (const std::string& f : files)
    for (std::string& d : read_record_documents(f, record_format(f), field, false, bad)) docs.push_back(d);
  EXPECT_EQ(bad.count, 0);
  return docs;
}

TEST(RecordFiles, FormatsByName) {
  EXPECT_EQ(record_format("c4-train.00000-of-01024.json.gz"), RecordFormat::json_lines);
  EXPECT_EQ(record_format("/a/b.jsonl"), RecordFormat::json_lines);
  EXPECT_EQ(record_format("c4-train.tfrecord-00000-of-01024"), RecordFormat::tfrecord);
  EXPECT_EQ(record_format("corpus.txt.gz"), RecordFormat::text);
}

TEST(RecordFiles, TfRecordShardsOfTfExamplesByPattern) {
  const std::vector<std::string> files = expand_file_patterns({kShards});
  ASSERT_EQ(files.size(), 2u);
  EXPECT_NE(files[0].find("00000-of-00002"), std::string::npos);
  EXPECT_EQ(all_documents(files), kDocs);
  // Another bytes feature; a missing one; an int64 one.
  EXPECT_EQ(all_documents(files, "url")[0], "https://example.com/0/0");
  EXPECT_PAX_ERROR(all_documents(files, "body"), "record 0: the tf.Example has no feature 'body'");
  EXPECT_PAX_ERROR(all_documents(files, "length"), "feature 'length' is a int64 list");
}

TEST(RecordFiles, GzippedJsonLines) {
  EXPECT_EQ(all_documents({kDir + "c4-mini.json.gz"}), kDocs);
  const std::string bad_file = kDir + "c4-mini-bad.jsonl";
  EXPECT_PAX_ERROR(all_documents({bad_file}), "c4-mini-bad.jsonl', line 2: no field 'text'");
  BadRecords bad;
  const std::vector<std::string> docs = read_record_documents(bad_file, RecordFormat::json_lines, "text", true, bad);
  EXPECT_EQ(docs, (std::vector<std::string>{kDocs[0], kDocs[1]}));
  EXPECT_EQ(bad.count, 2);
  EXPECT_NE(bad.first.find("line 2"), std::string::npos) << bad.first;
}

TEST(RecordFiles, DamagedTfRecordsAreNamedOrSkipped) {
  const std::string bytes = read_file(kDir + "c4-mini.tfrecord-00000-of-00002");
  BadRecords none;
  const std::vector<std::string_view> records = tfrecord_records(bytes, "f", false, none);
  ASSERT_EQ(records.size(), 3u);
  // A flipped byte in record 1's data: its CRC no longer matches.
  std::string flipped = bytes;
  flipped[size_t(records[1].data() - bytes.data()) + 3] ^= 0x20;
  EXPECT_PAX_ERROR(tfrecord_records(flipped, "f", false, none), "record 1 (byte");
  EXPECT_PAX_ERROR(tfrecord_records(flipped, "f", false, none), "the data's CRC does not match");
  BadRecords bad;
  EXPECT_EQ(tfrecord_records(flipped, "f", true, bad).size(), 2u);
  EXPECT_EQ(bad.count, 1);
  // Cut short, and a damaged length: the framing is lost from there.
  EXPECT_PAX_ERROR(tfrecord_records(std::string_view(bytes).substr(0, bytes.size() - 5), "f", false, none),
                   "record 2 (byte");
  std::string bad_length = bytes;
  bad_length[size_t(records[1].data() - bytes.data()) - 12] ^= 0x01;
  EXPECT_PAX_ERROR(tfrecord_records(bad_length, "f", false, none), "the length's CRC does not match");
  // Not a TFRecord file at all.
  EXPECT_PAX_ERROR(tfrecord_records("this is plain text, not records", "f", false, none), "record 0 (byte 0)");
  // Our own framing reads back.
  std::string mine;
  for (const char* r : {"one", "", "three"}) append_tfrecord(mine, r);
  const std::vector<std::string_view> back = tfrecord_records(mine, "mine", false, none);
  EXPECT_EQ(std::vector<std::string>(back.begin(), back.end()), (std::vector<std::string>{"one", "", "three"}));
}

TEST(RecordFiles, ATruncatedGzipFileIsAnErrorOrCounted) {
  const std::string whole = [] {
    std::ifstream in(kDir + "c4-mini.json.gz", std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  const std::string cut = scratch("cut.json.gz");
  std::ofstream(cut, std::ios::binary) << whole.substr(0, whole.size() - 10);
  BadRecords bad;
  EXPECT_PAX_ERROR(read_record_documents(cut, RecordFormat::json_lines, "text", false, bad), "truncated gzip");
  EXPECT_TRUE(read_record_documents(cut, RecordFormat::json_lines, "text", true, bad).empty());
  EXPECT_EQ(bad.count, 1);
}

TEST(RecordFiles, PatternsThatMatchNothingAreNamed) {
  EXPECT_PAX_ERROR(expand_file_patterns({kDir + "c4-mini.tfrecord-*-of-01024"}), "matches no file");
  EXPECT_EQ(expand_file_patterns({"plain-name.txt"}), (std::vector<std::string>{"plain-name.txt"}));
}

// TextLmInput over both formats: the same documents (the empty one dropped,
// as blank text documents are), hence the same rows.
TEST(RecordFiles, TextLmInputReadsBothFormatsAlike) {
  auto input = [](const std::vector<std::string>& files) {
    TextLmInput::HParams hp;
    hp.files = files;
    hp.seq_length = 32;
    hp.batch_size = 2;
    hp.repeat = false;
    return TextLmInput(hp);
  };
  const TextLmInput shards = input({kShards}), json = input({kDir + "c4-mini.json.gz"});
  EXPECT_EQ(shards.num_documents(), 5);
  EXPECT_EQ(shards.rows().ids, json.rows().ids);
  TextLmInput::HParams hp;
  hp.files = {kDir + "c4-mini-bad.jsonl"};
  EXPECT_PAX_ERROR(TextLmInput{hp}, "line 2: no field 'text'");
  hp.skip_bad_records = true;
  EXPECT_EQ(TextLmInput(hp).num_documents(), 2);
  hp.files = {kDir + "c4-mini.json.gz"};
  hp.text_field = "url";
  EXPECT_EQ(TextLmInput(hp).num_documents(), 6);
}

}  // namespace
}  // namespace pax::data
