// The spm:<vocab> tokenizer of a TextLmInput: trained once on the train split
// and reused by every input over the same files, retrained when they change;
// spec and file errors.
#include "pax/data/own_tokenizer.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "pax/data/datasets.h"
#include "pax/data/file_io.h"
#include "pax/data/prepared_file.h"
#include "pax/data/tokenizer.h"
#include "pax/data/text_lm.h"
#include "pax/testing/testing.h"

namespace pax::data {

// This test process's temporary directory, removed at exit (file_io_test.cc).
std::filesystem::path process_temp_dir();

// The first half of a serialised SentencePiece model's pieces, cut where a
// piece ends: still a valid protobuf, and a model SentencePiece loads, only
// a smaller one (as a copy cut short would leave it).
std::string cut_at_piece_boundary(const std::string& model);
std::string cut_at_piece_boundary(const std::string& model) {
  auto varint = [&](size_t& at) {
    uint64_t v = 0;
    for (int shift = 0; at < model.size(); shift += 7) {
      const auto b = static_cast<unsigned char>(model[at++]);
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) break;
    }
    return v;
  };
  std::vector<size_t> piece_ends;  // ModelProto field 1 (repeated pieces), length-delimited
  for (size_t at = 0; at < model.size();) {
    const uint64_t tag = varint(at);
    EXPECT_EQ(tag & 7, 2u) << "a length-delimited field";
    at += varint(at);
    if (tag >> 3 == 1) piece_ends.push_back(at);
  }
  EXPECT_GT(piece_ends.size(), 8u);
  return model.substr(0, piece_ends[piece_ends.size() / 2]);
}

namespace {

namespace fs = std::filesystem;

// Lines of a small made-up language: enough repeated words for pieces.
std::string sample_text(int lines, int salt = 0) {
  const char* words[] = {"the", "river", "stone", "carries", "light", "over", "quiet", "hills", "and", "morning"};
  std::string text;
  for (int i = 0; i < lines; ++i) {
    for (int j = 0; j < 6; ++j) text += std::string(j ? " " : "") + words[(i * 7 + j * 3 + salt) % 10];
    text += "\n";
  }
  return text;
}

struct Fixture {
  std::string dir, data_dir, file;
  explicit Fixture(const std::string& name) {
    dir = (process_temp_dir() / ("own_tokenizer_" + name)).string();
    fs::remove_all(dir);
    data_dir = dir + "/data";
    file = dir + "/text.txt";
    write_file_atomic(file, sample_text(300));
  }
  TextLmInput::HParams input(TextSplit split) const {
    TextLmInput::HParams hp;
    hp.files = {file};
    hp.data_dir = data_dir;
    hp.tokenizer = "spm:64";
    hp.seq_length = 16;
    hp.batch_size = 2;
    hp.split = split;
    hp.validation_fraction = 0.1;
    return hp;
  }
  std::vector<fs::path> models() const {
    std::vector<fs::path> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(data_dir + "/text_spm", ec)) {
      if (e.path().extension() == ".model") out.push_back(e.path());
    }
    return out;
  }
};

TEST(OwnSentencePiece, SpecsAreParsed) {
  EXPECT_EQ(own_sentencepiece_vocab("spm:4096"), 4096);
  EXPECT_EQ(own_sentencepiece_vocab("bytes"), std::nullopt);
  EXPECT_EQ(own_sentencepiece_vocab("kjv_spm:4096"), std::nullopt);
  EXPECT_PAX_ERROR(own_sentencepiece_vocab("spm:lots"), "must be spm:<vocab size>, e.g. spm:4096");
  EXPECT_PAX_ERROR(own_sentencepiece_vocab("spm:8"), "must be in [16, 65536]");
  // Other inputs cannot train one: they name the model file to give instead.
  EXPECT_PAX_ERROR(resolve_tokenizer_spec("spm:64", "/some/data"), "give the path of the model it trained instead");
}

TEST(OwnSentencePiece, TrainedOnceOnTheTrainSplitAndSharedByBothSplits) {
  Fixture f("once");
  TextLmInput train(f.input(TextSplit::train));
  ASSERT_EQ(f.models().size(), 1u);
  const fs::path model = f.models()[0];
  EXPECT_EQ(train.tokenizer().spec(), model.string());
  EXPECT_LE(train.tokenizer().vocab_size(), 64);  // a soft limit: a small text may have fewer pieces
  EXPECT_GT(train.tokenizer().vocab_size(), 3);
  const auto written = fs::last_write_time(model);

  TextLmInput validation(f.input(TextSplit::validation));  // the same train documents: the cached model
  EXPECT_EQ(validation.tokenizer().spec(), model.string());
  EXPECT_EQ(fs::last_write_time(model), written);
  EXPECT_EQ(f.models().size(), 1u);
  EXPECT_GT(validation.num_documents(), 0);
  EXPECT_EQ(train.num_documents() + validation.num_documents(), 300);
  // The tokenizer reads the text back.
  const std::vector<int32_t> ids = train.tokenizer().encode("the river carries light");
  EXPECT_EQ(train.tokenizer().decode(ids), "the river carries light");

  // Held-out lines are not trained on: editing one keeps the model.
  int64_t held_out = 0;
  while (!is_validation_document(held_out, 0.1)) ++held_out;
  std::string text = sample_text(300);
  size_t at = 0;
  for (int64_t i = 0; i < held_out; ++i) at = text.find('\n', at) + 1;
  text.insert(at, "unseen words here ");
  write_file_atomic(f.file, text);
  EXPECT_EQ(TextLmInput(f.input(TextSplit::train)).tokenizer().spec(), model.string());
  EXPECT_EQ(f.models().size(), 1u);

  // Other training text is another model.
  write_file_atomic(f.file, sample_text(300, 1));
  TextLmInput edited(f.input(TextSplit::train));
  EXPECT_EQ(f.models().size(), 2u);
  EXPECT_NE(edited.tokenizer().spec(), model.string());
}

TEST(OwnSentencePiece, ACutOrUnrecordedModelIsTrainedAgain) {
  Fixture f("cut");
  const std::string model_path = TextLmInput(f.input(TextSplit::train)).tokenizer().spec();
  const std::string model = read_file(model_path);
  const int64_t vocab = load_tokenizer(model_path)->vocab_size();
  // Cut at a piece boundary, the model still loads (with fewer pieces): only
  // its record tells.
  const std::string cut = cut_at_piece_boundary(model);
  write_file_atomic(f.dir + "/cut.model", cut);
  EXPECT_LT(load_tokenizer(f.dir + "/cut.model")->vocab_size(), vocab);
  write_file_atomic(model_path, cut);
  ::testing::internal::CaptureStderr();
  TextLmInput input(f.input(TextSplit::train));
  const std::string notice = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(input.tokenizer().spec(), model_path);
  EXPECT_EQ(input.tokenizer().vocab_size(), vocab);
  EXPECT_EQ(read_file(model_path).size(), model.size());
  EXPECT_EQ(notice.rfind("paxcc: " + model_path + " is " + std::to_string(cut.size()) + " bytes where its record", 0),
            0u)
      << notice;
  EXPECT_NE(notice.find("preparing it again from its "), std::string::npos) << notice;
  EXPECT_EQ(std::count(notice.begin(), notice.end(), '\n'), 1) << notice;

  // A model without a record (cached before records existed) is kept as it
  // is and recorded.
  const std::string whole = read_file(model_path);
  fs::remove(record_path(model_path));
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(TextLmInput(f.input(TextSplit::validation)).tokenizer().vocab_size(), vocab);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find(model_path + " has no record"), std::string::npos);
  EXPECT_EQ(read_file(model_path), whole);
  EXPECT_EQ(prepared_file_problem(model_path), "");
}

TEST(OwnSentencePiece, MissingFilesAreNamedInOneError) {
  Fixture f("missing");
  TextLmInput::HParams hp = f.input(TextSplit::train);
  hp.files = {f.file, f.dir + "/a.txt", f.dir + "/b.txt"};
  EXPECT_PAX_ERROR(TextLmInput{hp}, "no such files: '" + f.dir + "/a.txt', '" + f.dir + "/b.txt'");
}

}  // namespace
}  // namespace pax::data
