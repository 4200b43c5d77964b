// The data directory, KJV preparation (from a sample of the `bible` output,
// and from the real command when bible-kjv is installed), locating
// Fashion-MNIST, and TextLmInput over the KJV.
#include "pax/data/datasets.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "pax/data/file_io.h"
#include "pax/data/idx_images.h"
#include "pax/data/text_lm.h"
#include "pax/testing/scoped_env.h"
#include "pax/testing/testing.h"

namespace pax::data {

// This test process's temporary directory, removed at exit (file_io_test.cc).
std::filesystem::path process_temp_dir();

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
  write_file_atomic(path, "edited\n");
  EXPECT_EQ(read_file(kjv_text_path(dir)), "edited\n");
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
