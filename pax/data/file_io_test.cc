// read_file / write_file_atomic: plain and gzip round trips, parent
// directories, errors naming the file. Also defines the per-process
// temporary directory the data tests share.
#include "pax/data/file_io.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "pax/testing/testing.h"

namespace pax::data {

// The temporary directory of this test process, shared by the pax/data tests
// (declared in each): unique per process, since test programs may run
// concurrently, and removed when the program ends.
std::filesystem::path process_temp_dir();
std::filesystem::path process_temp_dir() {
  return std::filesystem::path(::testing::TempDir()) / ("pax_data_test_" + std::to_string(::getpid()));
}

namespace {

class RemoveTempDir : public ::testing::Environment {
 public:
  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(process_temp_dir(), ec);
  }
};
const auto* const kRemoveTempDir = ::testing::AddGlobalTestEnvironment(new RemoveTempDir);

TEST(FileIo, RoundTripsPlainAndGzipFilesAndCreatesDirectories) {
  const std::string dir = (process_temp_dir() / "file_io" / "a" / "b").string();
  std::string bytes = "line one\nline two\n";
  bytes.push_back('\0');
  bytes += std::string(100000, 'z');
  write_file_atomic(dir + "/plain.txt", bytes);
  write_file_atomic(dir + "/packed.gz", bytes, /*gzip=*/true);
  EXPECT_EQ(read_file(dir + "/plain.txt"), bytes);
  EXPECT_EQ(read_file(dir + "/packed.gz"), bytes);
  EXPECT_LT(std::filesystem::file_size(dir + "/packed.gz"), 1000u);
  write_file_atomic(dir + "/plain.txt", "");  // replaced whole
  EXPECT_EQ(read_file(dir + "/plain.txt"), "");
  // No temporary files are left behind.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.is_regular_file();
  EXPECT_EQ(files, 2);
}

TEST(FileIo, ErrorsNameTheFile) {
  EXPECT_PAX_ERROR(read_file("/nonexistent/x.txt"), "no such file: '/nonexistent/x.txt'");
  EXPECT_PAX_ERROR(read_file(process_temp_dir().parent_path().string()), "is a directory, not a regular file");
  const std::string blocker = (process_temp_dir() / "file_io_blocker").string();
  write_file_atomic(blocker, "x");
  EXPECT_PAX_ERROR(write_file_atomic(blocker + "/inside.txt", "y"), "'" + blocker + "' is not a directory");
  // A dangling symlink in the path is named with its target.
  const std::string link = (process_temp_dir() / "file_io_dangling").string();
  std::filesystem::remove(link);
  std::filesystem::create_symlink("/nonexistent/target", link);
  EXPECT_PAX_ERROR(make_directories(link + "/kjv", "data directory"),
                   "data directory: cannot create '" + link + "/kjv': '" + link +
                       "' is a dangling symlink to '/nonexistent/target'");
  make_directories((process_temp_dir() / "made" / "deep").string(), "data directory");
  EXPECT_TRUE(std::filesystem::is_directory(process_temp_dir() / "made" / "deep"));
}

}  // namespace
}  // namespace pax::data
