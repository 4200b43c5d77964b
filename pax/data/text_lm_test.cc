// TextLmInput: packing against hand values, documents, the validation split,
// hosts, ids_to_strings and errors.
#include "pax/data/text_lm.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "pax/data/file_io.h"
#include "pax/testing/testing.h"

namespace pax::data {

// This test process's temporary directory, removed at exit (file_io_test.cc).
std::filesystem::path process_temp_dir();

namespace {

using Ids = std::vector<int32_t>;

// A fresh directory for one test, inside this process's own (test programs
// may run concurrently).
std::string temp_dir(const std::string& name) {
  std::filesystem::path p = process_temp_dir() / ("text_lm_" + name);
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

std::string write_text(const std::string& name, const std::string& text, bool gzip = false) {
  std::string path = temp_dir(name) + "/text.txt" + (gzip ? ".gz" : "");
  write_file_atomic(path, text, gzip);
  return path;
}

// Row r of a packed array.
Ids row(const std::vector<int32_t>& a, int64_t t, int64_t r) { return Ids(a.begin() + r * t, a.begin() + (r + 1) * t); }

TEST(PackDocuments, PacksWholeDocumentsAndCutsLongOnes) {
  const std::vector<Ids> docs = {{10, 11, 12}, {20}, {30, 31, 32, 33, 34, 35, 36}, {40}};
  // start 2, eos 1, pad 99, rows of 6.
  PackedRows r = pack_documents(docs, 6, true, 2, 1, 99);
  ASSERT_EQ(r.num_rows, 3);
  // Row 0: [2 10 11 12 | 2 20]; labels are the next tokens, eos closing each.
  EXPECT_EQ(row(r.ids, 6, 0), (Ids{2, 10, 11, 12, 2, 20}));
  EXPECT_EQ(row(r.labels, 6, 0), (Ids{10, 11, 12, 1, 20, 1}));
  EXPECT_EQ(row(r.segment_ids, 6, 0), (Ids{1, 1, 1, 1, 2, 2}));
  EXPECT_EQ(row(r.segment_pos, 6, 0), (Ids{0, 1, 2, 3, 0, 1}));
  // The 8 pairs of the long document: 6 fill row 1, 2 start row 2, whose
  // inputs continue where row 1 stopped.
  EXPECT_EQ(row(r.ids, 6, 1), (Ids{2, 30, 31, 32, 33, 34}));
  EXPECT_EQ(row(r.labels, 6, 1), (Ids{30, 31, 32, 33, 34, 35}));
  EXPECT_EQ(row(r.segment_ids, 6, 1), (Ids{1, 1, 1, 1, 1, 1}));
  EXPECT_EQ(row(r.segment_pos, 6, 1), (Ids{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(row(r.ids, 6, 2), (Ids{35, 36, 2, 40, 99, 99}));
  EXPECT_EQ(row(r.labels, 6, 2), (Ids{36, 1, 40, 1, 99, 99}));
  EXPECT_EQ(row(r.segment_ids, 6, 2), (Ids{1, 1, 2, 2, 0, 0}));
  EXPECT_EQ(row(r.segment_pos, 6, 2), (Ids{0, 1, 0, 1, 0, 0}));
}

TEST(PackDocuments, StartsANewRowForADocumentThatDoesNotFit) {
  PackedRows r = pack_documents(std::vector<Ids>{{1, 2, 3}, {4, 5, 6}}, 6, true, 0, 9, 7);
  ASSERT_EQ(r.num_rows, 2);  // 4 + 4 pairs > 6
  EXPECT_EQ(row(r.ids, 6, 0), (Ids{0, 1, 2, 3, 7, 7}));
  EXPECT_EQ(row(r.segment_ids, 6, 1), (Ids{1, 1, 1, 1, 0, 0}));
}

TEST(PackDocuments, UnpackedGivesEveryDocumentItsOwnRows) {
  PackedRows r = pack_documents(std::vector<Ids>{{10, 11}, {20, 21, 22, 23, 24, 25}}, 4, false, 2, 1, 0);
  ASSERT_EQ(r.num_rows, 3);
  EXPECT_EQ(row(r.ids, 4, 0), (Ids{2, 10, 11, 0}));
  EXPECT_EQ(row(r.labels, 4, 0), (Ids{10, 11, 1, 0}));
  EXPECT_EQ(row(r.ids, 4, 1), (Ids{2, 20, 21, 22}));
  EXPECT_EQ(row(r.ids, 4, 2), (Ids{23, 24, 25, 0}));
  EXPECT_EQ(row(r.labels, 4, 2), (Ids{24, 25, 1, 0}));
  EXPECT_EQ(row(r.segment_ids, 4, 2), (Ids{1, 1, 1, 0}));
}

TEST(PackDocuments, WithoutEosTheLastTokenIsOnlyALabel) {
  PackedRows r = pack_documents(std::vector<Ids>{{10, 11, 12}, {}}, 4, true, 2, -1, 0);
  ASSERT_EQ(r.num_rows, 1);  // the empty document has no pairs
  EXPECT_EQ(row(r.ids, 4, 0), (Ids{2, 10, 11, 0}));
  EXPECT_EQ(row(r.labels, 4, 0), (Ids{10, 11, 12, 0}));
  EXPECT_PAX_ERROR(pack_documents(std::vector<Ids>{{1}}, 0, true, 0, 1, 0), "seq_length must be >= 1");
}

TEST(SplitDocuments, LinesParagraphsAndFiles) {
  const std::string text = "one\r\ntwo\n\n  \nthree\nfour\n\n";
  EXPECT_EQ(split_documents(text, DocumentUnit::line), (std::vector<std::string>{"one", "two", "three", "four"}));
  EXPECT_EQ(split_documents(text, DocumentUnit::paragraph), (std::vector<std::string>{"one\ntwo", "three\nfour"}));
  EXPECT_EQ(split_documents(text, DocumentUnit::file), (std::vector<std::string>{text}));
  EXPECT_TRUE(split_documents(" \n\n", DocumentUnit::file).empty());
}

TextLmInput::HParams text_params(const std::string& file, int64_t seq_length, int64_t batch_size) {
  TextLmInput::HParams hp;
  hp.files = {file};
  hp.seq_length = seq_length;
  hp.batch_size = batch_size;
  hp.repeat = false;
  return hp;
}

TEST(TextLmInput, BatchLayoutWithTheByteTokenizer) {
  // "ab", "cde" share row 0 (3 + 4 pairs); "f" (2 pairs) needs row 1.
  TextLmInput input(text_params(write_text("layout", "ab\n\ncde\n  \nf\n"), 8, 2));
  EXPECT_EQ(input.num_documents(), 3);
  EXPECT_EQ(input.order().num_examples(), 2);
  Tree b = input.get_next();
  EXPECT_EQ(b.keys(), (std::vector<std::string>{"ids", "labels", "paddings", "weights", "segment_ids", "segment_pos"}));
  for (const char* k : {"ids", "labels", "segment_ids", "segment_pos"}) EXPECT_EQ(b[k].leaf().dtype(), DType::i32) << k;
  for (const char* k : {"paddings", "weights"}) EXPECT_EQ(b[k].leaf().dtype(), DType::f32) << k;
  EXPECT_EQ(b["ids"].leaf().shape(), Shape({2, 8}));
  // a..f are bytes 97..102, ids 100..105; start = pad = 0, eos = 1.
  EXPECT_TRUE(testing::all_close(b["ids"].leaf(), {0, 100, 101, 0, 102, 103, 104, 0,  //
                                                   0, 105, 0, 0, 0, 0, 0, 0}));
  EXPECT_TRUE(testing::all_close(b["labels"].leaf(), {100, 101, 1, 102, 103, 104, 1, 0,  //
                                                      105, 1, 0, 0, 0, 0, 0, 0}));
  EXPECT_TRUE(testing::all_close(b["segment_ids"].leaf(), {1, 1, 1, 2, 2, 2, 2, 0,  //
                                                           1, 1, 0, 0, 0, 0, 0, 0}));
  EXPECT_TRUE(testing::all_close(b["segment_pos"].leaf(), {0, 1, 2, 0, 1, 2, 3, 0,  //
                                                           0, 1, 0, 0, 0, 0, 0, 0}));
  EXPECT_TRUE(testing::all_close(b["paddings"].leaf(), {0, 0, 0, 0, 0, 0, 0, 1,  //
                                                        0, 0, 1, 1, 1, 1, 1, 1}));
  EXPECT_TRUE(testing::all_close(b["weights"].leaf(), {1, 1, 1, 1, 1, 1, 1, 0,  //
                                                       1, 1, 0, 0, 0, 0, 0, 0}));
  EXPECT_THROW(input.get_next(), OutOfRange);
  // Text back from the labels: eos and padding are dropped.
  EXPECT_EQ(input.ids_to_strings(b["labels"].leaf()), (std::vector<std::string>{"abcde", "f"}));
  EXPECT_EQ(input.ids_to_strings(b["labels"].leaf(), array<int32_t>({2, 1})), (std::vector<std::string>{"ab", "f"}));
  EXPECT_PAX_ERROR(input.ids_to_strings(b["paddings"].leaf()), "integer ids (B, T)");
  EXPECT_PAX_ERROR(input.ids_to_strings(b["ids"].leaf(), array<int32_t>({1})), "integer lengths (2,)");
}

TEST(TextLmInput, PaddingRowsOfAFiniteSetHaveZeroWeight) {
  TextLmInput::HParams hp = text_params(write_text("pad", "abc\n"), 4, 3);
  hp.pack = false;
  TextLmInput input(hp);
  Tree b = input.get_next();
  EXPECT_FALSE(b.contains("segment_ids"));
  EXPECT_TRUE(testing::all_close(b["ids"].leaf(), {0, 100, 101, 102, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_TRUE(testing::all_close(b["labels"].leaf(), {100, 101, 102, 1, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_TRUE(testing::all_close(b["weights"].leaf(), {1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_TRUE(testing::all_close(b["paddings"].leaf(), {0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1}));
}

// The documents an input yields (pack = false, rows long enough for any).
std::multiset<std::string> documents(TextLmInput::HParams hp) {
  hp.pack = false;
  hp.seq_length = 64;
  hp.batch_size = 4;
  hp.repeat = false;
  TextLmInput input(hp);
  std::multiset<std::string> out;
  while (true) {
    Tree b;
    try {
      b = input.get_next();
    } catch (const OutOfRange&) {
      return out;
    }
    std::vector<float> w = b["weights"].leaf().to_vector<float>();
    std::vector<std::string> text = input.ids_to_strings(b["labels"].leaf());
    for (size_t i = 0; i < text.size(); ++i) {
      if (w[i * 64] > 0) out.insert(text[i]);
    }
  }
}

std::string numbered_lines(int n) {
  std::string text;
  for (int i = 0; i < n; ++i) text += "line " + std::to_string(i) + "\n";
  return text;
}

TEST(TextLmInput, TrainAndValidationSplitsAreDisjointAndDeterministic) {
  TextLmInput::HParams hp = text_params(write_text("split", numbered_lines(400)), 64, 4);
  hp.validation_fraction = 0.25;
  const std::multiset<std::string> all = documents(hp);
  hp.split = TextSplit::train;
  const std::multiset<std::string> train = documents(hp);
  hp.split = TextSplit::validation;
  const std::multiset<std::string> validation = documents(hp), again = documents(hp);
  EXPECT_EQ(all.size(), 400u);
  EXPECT_EQ(validation, again);
  EXPECT_GT(validation.size(), 60u);  // about 100
  EXPECT_LT(validation.size(), 140u);
  std::multiset<std::string> both = train;
  both.insert(validation.begin(), validation.end());
  EXPECT_EQ(both, all);
  for (const std::string& d : validation) EXPECT_FALSE(train.count(d)) << d;
  hp.validation_fraction = 0;
  EXPECT_PAX_ERROR(TextLmInput{hp}, "validation_fraction must be in (0, 1)");
}

TEST(TextLmInput, TwoHostsReadDisjointRowsCoveringTheText) {
  TextLmInput::HParams hp = text_params(write_text("hosts", numbered_lines(50)), 64, 4);
  hp.num_infeed_hosts = 2;
  hp.shuffle = true;
  std::multiset<std::string> both;
  for (int64_t h : {0, 1}) {
    hp.infeed_host_index = h;
    std::multiset<std::string> mine = documents(hp);
    EXPECT_EQ(mine.size(), 25u);
    both.insert(mine.begin(), mine.end());
  }
  std::multiset<std::string> expected;
  for (int i = 0; i < 50; ++i) expected.insert("line " + std::to_string(i));
  EXPECT_EQ(both, expected);
}

TEST(TextLmInput, ReadsGzipFilesAndSeveralFilesInOrder) {
  TextLmInput::HParams hp = text_params(write_text("gz", "alpha\nbeta\n", true), 64, 4);
  hp.files.push_back(write_text("plain", "gamma\n"));
  EXPECT_EQ(documents(hp), (std::multiset<std::string>{"alpha", "beta", "gamma"}));
  hp.document_unit = DocumentUnit::file;
  EXPECT_EQ(documents(hp), (std::multiset<std::string>{"alpha\nbeta\n", "gamma\n"}));
}

TEST(TextLmInput, StateRestoreContinuesTheStream) {
  TextLmInput::HParams hp = text_params(write_text("state", numbered_lines(60)), 16, 2);
  hp.repeat = true;
  hp.shuffle = true;
  TextLmInput a(hp), b(hp);
  for (int i = 0; i < 7; ++i) a.get_next();
  b.restore_state(a.state());
  for (int i = 0; i < 10; ++i) {
    EXPECT_TRUE(testing::all_close(b.get_next()["ids"].leaf(), a.get_next()["ids"].leaf())) << i;
  }
}

TEST(TextLmInput, ExplainsBadConfigs) {
  TextLmInput::HParams hp;
  EXPECT_PAX_ERROR(TextLmInput{hp}, "`files` is empty");
  hp.files = {"/nonexistent/text.txt"};
  EXPECT_PAX_ERROR(TextLmInput{hp}, "no such file: '/nonexistent/text.txt'");
  hp.files = {write_text("bad", "text\n")};
  hp.tokenizer = "/nonexistent/spm.model";
  EXPECT_PAX_ERROR(TextLmInput{hp}, "paxcc tokenizer");
  hp.tokenizer = "bytes";
  hp.seq_length = 0;
  EXPECT_PAX_ERROR(TextLmInput{hp}, "seq_length must be >= 1");
  hp.seq_length = 8;
  hp.files = {write_text("blank", "\n  \n")};
  EXPECT_PAX_ERROR(TextLmInput{hp}, "no documents");
}

TEST(TextLmInput, ASourceThatIgnoresFilesRefusesThem) {
  // source = kjv reads the KJV; files set beside it would be ignored without
  // a word. Train and eval inputs alike are refused, before anything is
  // prepared in the data directory.
  const std::string data_dir = temp_dir("kjv_with_files") + "/data";
  const std::string file = write_text("kjv_with_files_text", "my own text\n");
  for (const char* name : {"train", "validation"}) {
    TextLmInput::HParams hp;
    hp.name = name;
    hp.source = TextSource::kjv;
    hp.files = {file, "b.txt"};
    hp.data_dir = data_dir;
    hp.split = std::string(name) == "train" ? TextSplit::train : TextSplit::validation;
    EXPECT_PAX_ERROR(TextLmInput{hp}, std::string("TextLmInput '") + name + "': `files` is set ([" + file +
                                          ", b.txt]) but `source` is kjv, which ignores `files`");
    EXPECT_PAX_ERROR(TextLmInput{hp}, "set source = files (e.g. --set train_input.source=files");
    EXPECT_PAX_ERROR(TextLmInput{hp}, "--exp=lm.TextTransformer --set 'train_input.files=[");
  }
  EXPECT_FALSE(std::filesystem::exists(data_dir));
  // The check alone, for a config check that names the field's path.
  TextLmInput::HParams kjv;
  kjv.source = TextSource::kjv;
  check_text_source(kjv, "train_input");
  kjv.files = {"a.txt"};
  EXPECT_PAX_ERROR(check_text_source(kjv, "eval_inputs[0]"),
                   "eval_inputs[0]: `files` is set ([a.txt]) but `source` is kjv");
  // The files are read once the source says so.
  TextLmInput::HParams hp;
  hp.source = TextSource::files;
  hp.files = {file};
  hp.seq_length = 8;
  EXPECT_EQ(TextLmInput(hp).num_documents(), 1);
}

}  // namespace
}  // namespace pax::data
