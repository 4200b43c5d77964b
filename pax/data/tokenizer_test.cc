// Tokenizers: the byte tokenizer's ids, SentencePiece training / loading /
// round trips on a small text written here, load_tokenizer and errors.
#include "pax/data/tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "pax/data/file_io.h"
#include "pax/data/host_random.h"
#include "pax/data/prepared_file.h"
#include "pax/data/text_lm.h"
#include "pax/testing/testing.h"

namespace pax::data {

// This test process's temporary directory, removed at exit (file_io_test.cc).
std::filesystem::path process_temp_dir();

namespace {

std::string temp_path(const std::string& name) {
  std::filesystem::path dir = process_temp_dir() / "tokenizer";
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

TEST(ByteTokenizer, BytesAreOffsetByTheSpecialIds) {
  ByteTokenizer tok;
  EXPECT_EQ(tok.vocab_size(), 259);
  EXPECT_EQ(tok.pad_id(), 0);
  EXPECT_EQ(tok.eos_id(), 1);
  EXPECT_EQ(tok.unk_id(), 2);
  EXPECT_EQ(tok.bos_id(), -1);
  EXPECT_EQ(tok.spec(), "bytes");
  // "hé": 'h' = 104, 'é' = 0xc3 0xa9 in UTF-8.
  EXPECT_EQ(tok.encode("h\xc3\xa9"), (std::vector<int32_t>{107, 0xc3 + 3, 0xa9 + 3}));
  EXPECT_EQ(tok.encode(""), std::vector<int32_t>{});
  EXPECT_EQ(tok.decode(std::vector<int32_t>{0, 107, 1, 2, 0xc3 + 3, 0xa9 + 3, 259, -5}), "h\xc3\xa9");
  std::string all;
  for (int c = 0; c < 256; ++c) all.push_back(char(c));
  EXPECT_EQ(tok.decode(tok.encode(all)), all);
}

// Small enough for the 12 words below (SentencePiece allows at most 36).
constexpr int kVocab = 32;

// A few hundred lines over a small vocabulary, the same on every run.
std::string corpus() {
  const char* words[] = {"the", "lord", "said", "unto", "moses", "and", "land", "of", "egypt", "people", "went", "out"};
  SplitMix64 gen(42);
  std::string text;
  for (int line = 0; line < 300; ++line) {
    int n = 3 + int(gen.below(8));
    for (int i = 0; i < n; ++i) text += std::string(i ? " " : "") + words[gen.below(12)];
    text += ".\n";
  }
  return text;
}

class SentencePiece : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    text_path_ = temp_path("corpus.txt.gz");
    write_file_atomic(text_path_, corpus(), /*gzip=*/true);
    model_path_ = temp_path("spm.model");
    SentencePieceTrainOptions o;
    o.vocab_size = kVocab;
    train_sentencepiece(text_path_, model_path_, o);
  }
  static std::string text_path_, model_path_;
};
std::string SentencePiece::text_path_, SentencePiece::model_path_;

TEST_F(SentencePiece, TrainsLoadsAndRoundTrips) {
  auto tok = SentencePieceTokenizer::load(model_path_);
  EXPECT_EQ(tok->vocab_size(), kVocab);
  EXPECT_EQ(tok->pad_id(), 0);
  EXPECT_EQ(tok->eos_id(), 1);
  EXPECT_EQ(tok->unk_id(), 2);
  EXPECT_EQ(tok->bos_id(), -1);
  EXPECT_EQ(tok->spec(), model_path_);
  for (const std::string s : {"the lord said unto moses.", "people of egypt went out.", "and"}) {
    std::vector<int32_t> ids = tok->encode(s);
    EXPECT_FALSE(ids.empty());
    for (int32_t id : ids) {
      EXPECT_GT(id, 2) << s;  // no special ids in ordinary text
      EXPECT_LT(id, kVocab) << s;
    }
    EXPECT_LT(ids.size(), s.size()) << s;  // pieces longer than characters
    EXPECT_EQ(tok->decode(ids), s);
  }
  // Special ids decode to nothing; a character never seen is unknown.
  std::vector<int32_t> ids = tok->encode("moses");
  ids.insert(ids.begin(), 0);
  ids.push_back(1);
  EXPECT_EQ(tok->decode(ids), "moses");
  std::vector<int32_t> unknown = tok->encode("Q");
  EXPECT_NE(std::find(unknown.begin(), unknown.end(), 2), unknown.end());
  EXPECT_EQ(tok->id_to_piece(1), "</s>");
  EXPECT_PAX_ERROR(tok->id_to_piece(kVocab), "out of range [0, 32)");
}

TEST_F(SentencePiece, LoadTokenizerAndTextLmInputUseTheModel) {
  auto tok = load_tokenizer(model_path_);
  EXPECT_EQ(tok->vocab_size(), kVocab);
  EXPECT_EQ(load_tokenizer("bytes")->vocab_size(), 259);
  TextLmInput::HParams hp;
  hp.files = {text_path_};
  hp.tokenizer = model_path_;
  hp.seq_length = 32;
  hp.batch_size = 2;
  TextLmInput input(hp);
  Tree b = input.get_next();
  for (int32_t id : b["ids"].leaf().to_vector<int32_t>()) EXPECT_LT(id, kVocab);
  // The first document, back from its labels (eos dropped).
  std::vector<int32_t> seg = b["segment_ids"].leaf().to_vector<int32_t>();
  int64_t len = std::count(seg.begin(), seg.begin() + 32, 1);
  std::string first = corpus().substr(0, corpus().find('\n'));
  EXPECT_EQ(input.ids_to_strings(b["labels"].leaf(), array<int32_t>({int32_t(len), 0}))[0], first);
}

TEST_F(SentencePiece, AModelThatDoesNotMatchItsRecordIsRefused) {
  // A model given by its path cannot be trained again where it is read: one
  // with a record (one paxcc prepared) that it does not match stops the run,
  // naming it; one without a record (a user's) is read as it is.
  const std::string model = read_file(model_path_);
  const std::string path = temp_path("recorded.model");
  write_prepared_file(path, model);
  EXPECT_EQ(load_tokenizer(path)->vocab_size(), kVocab);
  write_file_atomic(path, model.substr(0, model.size() / 2));
  EXPECT_PAX_ERROR(load_tokenizer(path), "SentencePiece model '" + path + "' is " + std::to_string(model.size() / 2) +
                                             " bytes where its record " + path + ".crc32 says " +
                                             std::to_string(model.size()));
  EXPECT_FALSE(std::filesystem::exists(record_path(model_path_)));  // train_sentencepiece writes the model alone
}

TEST(SentencePieceErrors, ExplainWhatWentWrong) {
  EXPECT_PAX_ERROR(SentencePieceTokenizer::load("/nonexistent/spm.model"), "no model file '/nonexistent/spm.model'");
  const std::string garbage = temp_path("garbage.model");
  write_file_atomic(garbage, "this is not a model");
  EXPECT_PAX_ERROR(SentencePieceTokenizer::load(garbage), "is not a SentencePiece model");
  const std::string text = temp_path("tiny.txt");
  write_file_atomic(text, "a b c\n");
  SentencePieceTrainOptions o;
  o.vocab_size = 5000;
  EXPECT_PAX_ERROR(train_sentencepiece(text, temp_path("big.model"), o), "failed");
  o.vocab_size = 2;
  EXPECT_PAX_ERROR(train_sentencepiece(text, temp_path("small.model"), o), "vocab_size must be >= 4");
  write_file_atomic(text, "\n\n");
  o.vocab_size = 8;
  EXPECT_PAX_ERROR(train_sentencepiece(text, temp_path("empty.model"), o), "has no text");
  EXPECT_PAX_ERROR(load_tokenizer(""), "use 'bytes'");
}

}  // namespace
}  // namespace pax::data
