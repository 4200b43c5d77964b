// The data directory, KJV preparation (from a sample of the `bible` output,
// and from the real command when bible-kjv is installed), locating
// Fashion-MNIST, TextLmInput over the KJV, and the prepared text and
// tokenizer made again when they do not match their records.
#include "pax/data/datasets.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "pax/data/file_io.h"
#include "pax/data/host_random.h"
#include "pax/data/idx_images.h"
#include "pax/data/prepared_file.h"
#include "pax/data/text_lm.h"
#include "pax/data/tokenizer.h"
#include "pax/testing/scoped_env.h"
#include "pax/testing/testing.h"

namespace pax::data {

// This test process's temporary directory, removed at exit (file_io_test.cc).
std::filesystem::path process_temp_dir();
// A model cut where a piece ends (own_tokenizer_test.cc).
std::string cut_at_piece_boundary(const std::string& model);

namespace {

// A fresh directory for one test, inside this process's own (test programs
// may run concurrently).
std::string temp_dir(const std::string& name) {
  std::filesystem::path p = process_temp_dir() / ("datasets_" + name);
  std::filesystem::remove_all(p);
  std::filesystem::create_directories(p);
  return p.string();
}

using testing::ScopedEnv;

bool have_bible() { return std::system("command -v bible >/dev/null 2>&1") == 0; }

TEST(DataDir, ConfiguredThenDefaultThenEnvironmentThenDotData) {
  ScopedEnv env("PAX_DATA_DIR", nullptr);
  EXPECT_EQ(resolve_data_dir(), "data");
  {
    ScopedEnv set("PAX_DATA_DIR", "/env/data");
    EXPECT_EQ(resolve_data_dir(), "/env/data");
    set_default_data_dir("/flag/data");
    EXPECT_EQ(resolve_data_dir(), "/flag/data");
    EXPECT_EQ(resolve_data_dir("/configured"), "/configured");
    set_default_data_dir("");
    EXPECT_EQ(resolve_data_dir(), "/env/data");
  }
}

TEST(Kjv, ParsesTheBibleCommandsOutput) {
  const std::string sample =
      "\nGenesis 1\n\n"
      "  1 In the beginning God created the heaven and the earth.\n"
      "  2 And the earth was without form, and void; and darkness was upon the face of\n"
      "the deep. And the Spirit of God moved upon the face of the waters.\n"
      "\n1 Chronicles 2\n\n"
      "  10 And Ram begat Amminadab.\n";
  EXPECT_EQ(parse_bible_output(sample),
            "In the beginning God created the heaven and the earth.\n"
            "And the earth was without form, and void; and darkness was upon the face of the deep. "
            "And the Spirit of God moved upon the face of the waters.\n"
            "And Ram begat Amminadab.\n");
  EXPECT_EQ(parse_bible_output(""), "");
}

TEST(Kjv, PreparesTheTextOnceFromTheBibleCommand) {
  if (!have_bible()) GTEST_SKIP() << "bible-kjv is not installed";
  const std::string dir = temp_dir("kjv");
  const std::string path = kjv_text_path(dir);
  EXPECT_EQ(path, dir + "/kjv/kjv.txt");
  const std::string text = read_file(path);
  std::vector<std::string> verses = split_documents(text, DocumentUnit::line);
  EXPECT_EQ(verses.size(), 31102u);
  EXPECT_EQ(verses.front(), "In the beginning God created the heaven and the earth.");
  EXPECT_EQ(verses.back(), "The grace of our Lord Jesus Christ be with you all. Amen.");
  for (const std::string& v : verses) {
    ASSERT_FALSE(std::isdigit(static_cast<unsigned char>(v[0])) || v[0] == ' ') << v;
  }
  // Once prepared, the file is used as it is.
  EXPECT_EQ(prepared_file_problem(path), "");
  const auto written = std::filesystem::last_write_time(path);
  EXPECT_EQ(kjv_text_path(dir), path);
  EXPECT_EQ(std::filesystem::last_write_time(path), written);
}

TEST(Kjv, DamagedTextIsPreparedAgainWithANotice) {
  if (!have_bible()) GTEST_SKIP() << "bible-kjv is not installed";
  const std::string dir = temp_dir("kjv_damaged");
  const std::string path = kjv_text_path(dir);
  const std::string text = read_file(path);
  // Random bytes written over the middle of the file, its size unchanged.
  {
    SplitMix64 gen(7);
    std::string noise(4096, '\0');
    for (char& c : noise) c = char(gen.below(256));
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(text.size() / 2));
    f.write(noise.data(), std::streamsize(noise.size()));
  }
  ASSERT_NE(read_file(path), text);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(kjv_text_path(dir), path);
  std::string notice = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(notice.rfind("paxcc: " + path + " has CRC-32 ", 0), 0u) << notice;
  EXPECT_NE(notice.find("; preparing it again from the `bible` command (Gen1:1-Rev22:21)\n"), std::string::npos)
      << notice;
  EXPECT_EQ(read_file(path), text);
  ::testing::internal::CaptureStderr();
  kjv_text_path(dir);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");  // one notice: the file is whole again

  // A text without a record (prepared before records existed) is taken as it
  // is and recorded; damaged afterwards, it is prepared again.
  write_file_atomic(path, text.substr(0, text.size() - 1));
  std::filesystem::remove(record_path(path));
  ::testing::internal::CaptureStderr();
  kjv_text_path(dir);
  notice = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(notice.rfind("paxcc: " + path + " has no record " + path + ".crc32 (made before records were kept)", 0), 0u)
      << notice;
  EXPECT_EQ(read_file(path), text.substr(0, text.size() - 1));
  write_file_atomic(path, "edited\n");
  ::testing::internal::CaptureStderr();
  kjv_text_path(dir);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find("preparing it again"), std::string::npos);
  EXPECT_EQ(read_file(path), text);

  // TextLmInput reads the restored text.
  write_file_atomic(path, text.substr(0, text.size() - 100));
  TextLmInput::HParams hp;
  hp.source = TextSource::kjv;
  hp.data_dir = dir;
  hp.seq_length = 4096;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(TextLmInput(hp).num_documents(), 31102);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find(path), std::string::npos);
}

TEST(Kjv, DamagedTextThatCannotBePreparedAgainIsAnErrorNamingIt) {
  const std::string dir = temp_dir("kjv_no_bible");
  const std::string path = dir + "/kjv/kjv.txt";
  write_prepared_file(path, "In the beginning God created the heaven and the earth.\n");
  write_file_atomic(path, "In the beginning");
  const std::string empty = temp_dir("empty_path_damaged");
  ScopedEnv no_bible("PATH", empty.c_str());
  ::testing::internal::CaptureStderr();
  EXPECT_PAX_ERROR(kjv_text_path(dir), path + " is 16 bytes where its record " + path +
                                           ".crc32 says 55, and preparing it again from the `bible` command");
  EXPECT_PAX_ERROR(kjv_text_path(dir), "install it with `apt-get install bible-kjv`");
  ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(read_file(path), "In the beginning");  // nothing changes
}

// A stand-in for the KJV text (small, for fast training), prepared with its
// record as kjv_text_path would.
std::string small_kjv(const std::string& dir) {
  // Words of two or three syllables: enough distinct pieces for a vocabulary of 64.
  const char* syllables[] = {"ab", "el", "ish", "mo", "ra", "seth", "ka", "nu", "do", "im", "ze", "ul"};
  std::string text;
  SplitMix64 gen(3);
  for (int line = 0; line < 400; ++line) {
    const int n = 4 + int(gen.below(8));
    for (int i = 0; i < n; ++i) {
      if (i) text += ' ';
      for (int k = 0, len = 2 + int(gen.below(2)); k < len; ++k) text += syllables[gen.below(12)];
    }
    text += ".\n";
  }
  write_prepared_file(dir + "/kjv/kjv.txt", text);
  return text;
}

TEST(Kjv, ACutSentencePieceModelIsTrainedAgain) {
  const std::string dir = temp_dir("kjv_spm_cut");
  small_kjv(dir);
  const std::string path = resolve_tokenizer_spec("kjv_spm:64", dir);
  EXPECT_EQ(path, dir + "/kjv/spm_64.model");
  EXPECT_EQ(prepared_file_problem(path), "");
  const std::string model = read_file(path);
  const int64_t vocab = load_tokenizer(path)->vocab_size();
  EXPECT_EQ(vocab, 64);

  // Cut where a piece ends, the model is still one SentencePiece loads.
  const std::string cut = cut_at_piece_boundary(model);
  write_file_atomic(dir + "/cut.model", cut);
  EXPECT_LT(load_tokenizer(dir + "/cut.model")->vocab_size(), vocab);
  write_file_atomic(path, cut);
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(resolve_tokenizer_spec("kjv_spm:64", dir), path);
  const std::string notice = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(notice, "paxcc: " + path + " is " + std::to_string(cut.size()) + " bytes where its record " + path +
                        ".crc32 says " + std::to_string(model.size()) + "; preparing it again from the KJV text " +
                        dir + "/kjv/kjv.txt (kjv_spm:64)\n");
  EXPECT_EQ(load_tokenizer(path)->vocab_size(), vocab);
  EXPECT_EQ(prepared_file_problem(path), "");

  // Without a record (cached before records were kept): kept as it is, since
  // training it again could change the ids of existing checkpoints.
  const std::string whole = read_file(path);
  std::filesystem::remove(record_path(path));
  ::testing::internal::CaptureStderr();
  resolve_tokenizer_spec("kjv_spm:64", dir);
  EXPECT_NE(::testing::internal::GetCapturedStderr().find(path + " has no record"), std::string::npos);
  EXPECT_EQ(read_file(path), whole);
  EXPECT_EQ(prepared_file_problem(path), "");

  // A model read by its path cannot be trained again there: refused, named.
  write_file_atomic(path, cut);
  EXPECT_PAX_ERROR(load_tokenizer(path),
                   "SentencePiece model '" + path + "' is " + std::to_string(cut.size()) + " bytes where its record");
}

TEST(Kjv, AMissingBibleCommandSaysHowToInstallIt) {
  const std::string empty = temp_dir("empty_path");
  ScopedEnv path("PATH", empty.c_str());
  EXPECT_PAX_ERROR(kjv_text_path(temp_dir("no_bible")), "install it with `apt-get install bible-kjv`");
}

TEST(Kjv, TextLmInputSplitsTheVerses) {
  if (!have_bible()) GTEST_SKIP() << "bible-kjv is not installed";
  TextLmInput::HParams hp;
  hp.source = TextSource::kjv;
  hp.data_dir = temp_dir("kjv_input");
  hp.seq_length = 1024;
  hp.split = TextSplit::train;
  TextLmInput train(hp);
  hp.split = TextSplit::validation;
  TextLmInput validation(hp);
  EXPECT_EQ(train.num_documents() + validation.num_documents(), 31102);
  EXPECT_NEAR(double(validation.num_documents()) / 31102, 0.05, 0.01);
  std::string first = train.ids_to_strings(train.get_next()["labels"].leaf())[0];
  EXPECT_EQ(first.rfind("In the beginning God created the heaven and the earth.", 0), 0u) << first;
}

TEST(FashionMnist, PrefersFilesInTheDataDirectory) {
  const std::string dir = temp_dir("fashion");
  for (const char* prefix : {"train", "t10k"}) {
    write_idx(dir + "/fashion-mnist/" + prefix + "-images-idx3-ubyte.gz", IdxArray{{1, 1, 1}, {9}});
    write_idx(dir + "/fashion-mnist/" + prefix + "-labels-idx1-ubyte.gz", IdxArray{{1}, {3}});
  }
  EXPECT_EQ(fashion_mnist_dir(dir), dir + "/fashion-mnist");
  const std::string empty = temp_dir("no_fashion");
  if (std::filesystem::exists(std::string(kSystemFashionMnistDir) + "/train-images-idx3-ubyte.gz")) {
    EXPECT_EQ(fashion_mnist_dir(empty), kSystemFashionMnistDir);
  } else {
    EXPECT_PAX_ERROR(fashion_mnist_dir(empty), "apt-get install dataset-fashion-mnist");
  }
}

}  // namespace
}  // namespace pax::data
