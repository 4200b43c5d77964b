// Tests for the output-path checks of fs_util: ensure_writable_directory and
// ensure_writable_file on missing, symlinked, non-directory and read-only
// paths, each failure one pax::Error naming the path at fault and why.
#include "pax/train/fs_util.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "pax/testing/testing.h"
#include "pax/testing/unprivileged.h"

namespace pax::train::fs {
namespace {

namespace stdfs = std::filesystem;

class TempDir {
 public:
  TempDir() {
    path_ = (stdfs::temp_directory_path() /
             ("pax_fs_util_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++)))
                .string();
    stdfs::remove_all(path_);
    stdfs::create_directories(path_);
  }
  ~TempDir() { stdfs::remove_all(path_); }
  std::string operator/(const std::string& name) const { return (stdfs::path(path_) / name).string(); }
  const std::string& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  std::string path_;
};

using pax::testing::Unprivileged;

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(EnsureWritableDirectory, CreatesMissingDirectoriesAndAcceptsExistingOnes) {
  TempDir tmp;
  ensure_writable_directory(tmp / "a/b/c", "test output");
  EXPECT_TRUE(stdfs::is_directory(tmp / "a/b/c"));
  ensure_writable_directory(tmp / "a/b/c", "test output");  // again: nothing to do
  ensure_writable_directory(tmp / "a//b/c/", "test output");
  // A symlink to a directory is a directory.
  stdfs::create_directory_symlink(tmp / "a", tmp / "link");
  ensure_writable_directory(tmp / "link/b/d", "test output");
  EXPECT_TRUE(stdfs::is_directory(tmp / "a/b/d"));
}

TEST(EnsureWritableDirectory, ADanglingSymlinkIsNamedWithItsTarget) {
  TempDir tmp;
  stdfs::create_symlink(tmp / "nowhere", tmp / "out");
  EXPECT_PAX_ERROR(
      ensure_writable_directory(tmp / "out", "summaries"),
      "summaries: cannot write to '" + (tmp / "out") + "': it is a dangling symlink to '" + (tmp / "nowhere") + "'");
  // Deeper down, the message names the component at fault.
  EXPECT_PAX_ERROR(ensure_writable_directory(tmp / "out/train", "summaries"),
                   "cannot write to '" + (tmp / "out/train") + "': '" + (tmp / "out") + "' is a dangling symlink to '" +
                       (tmp / "nowhere") + "'");
  EXPECT_FALSE(stdfs::exists(tmp / "nowhere"));  // nothing was made through the link
}

TEST(EnsureWritableDirectory, AFileInThePathIsNotADirectory) {
  TempDir tmp;
  write_text(tmp / "file", "x");
  EXPECT_PAX_ERROR(ensure_writable_directory(tmp / "file", "decode samples"),
                   "decode samples: cannot write to '" + (tmp / "file") + "': it is a regular file, not a directory");
  EXPECT_PAX_ERROR(ensure_writable_directory(tmp / "file/sub", "decode samples"),
                   "'" + (tmp / "file") + "' is a regular file, not a directory");
  stdfs::create_symlink(tmp / "file", tmp / "link");
  EXPECT_PAX_ERROR(ensure_writable_directory(tmp / "link", "x"),
                   "it is a symlink to '" + (tmp / "file") + "', which is a regular file, not a directory");
  ASSERT_EQ(::mkfifo((tmp / "fifo").c_str(), 0600), 0);
  EXPECT_PAX_ERROR(ensure_writable_directory(tmp / "fifo", "x"), "it is a FIFO, not a directory");
  stdfs::create_symlink(tmp / "loop", tmp / "loop");
  EXPECT_PAX_ERROR(ensure_writable_directory(tmp / "loop", "x"), "is a symlink loop");
  EXPECT_PAX_ERROR(ensure_writable_directory("", "x"), "must not be an empty path");
}

TEST(EnsureWritableDirectory, AReadOnlyDirectoryIsNamed) {
  TempDir tmp;
  stdfs::permissions(tmp.path(), stdfs::perms::all);  // reachable and writable for the unprivileged user
  stdfs::create_directory(tmp / "ro");
  stdfs::permissions(tmp / "ro", stdfs::perms::owner_read | stdfs::perms::owner_exec | stdfs::perms::group_read |
                                     stdfs::perms::group_exec | stdfs::perms::others_read | stdfs::perms::others_exec);
  {
    Unprivileged as_user;
    if (!as_user.ok()) GTEST_SKIP() << "running as root, whom permissions do not bind, and setfsuid failed";
    EXPECT_PAX_ERROR(ensure_writable_directory(tmp / "ro", "summaries"),
                     "summaries: cannot write to '" + (tmp / "ro") + "': it is read-only");
    // A directory to be made inside it: the read-only parent is named.
    EXPECT_PAX_ERROR(ensure_writable_directory(tmp / "ro/train", "summaries"),
                     "cannot write to '" + (tmp / "ro/train") + "': '" + (tmp / "ro") + "' is read-only");
  }
  stdfs::permissions(tmp / "ro", stdfs::perms::owner_all);
}

TEST(EnsureWritableFile, AcceptsNewAndRegularFilesAndNamesAnythingElse) {
  TempDir tmp;
  ensure_writable_file(tmp / "new/report.html", "report.html");  // its directory is made
  EXPECT_TRUE(stdfs::is_directory(tmp / "new"));
  write_text(tmp / "metrics.jsonl", "");
  ensure_writable_file(tmp / "metrics.jsonl", "metrics.jsonl");
  stdfs::create_symlink(tmp / "metrics.jsonl", tmp / "linked.jsonl");
  ensure_writable_file(tmp / "linked.jsonl", "metrics.jsonl");

  stdfs::create_directory(tmp / "report.html");
  EXPECT_PAX_ERROR(
      ensure_writable_file(tmp / "report.html", "report.html"),
      "report.html: cannot write to '" + (tmp / "report.html") + "': it is a directory, not a regular file");
  stdfs::create_symlink(tmp / "gone", tmp / "dangling.jsonl");
  EXPECT_PAX_ERROR(ensure_writable_file(tmp / "dangling.jsonl", "metrics.jsonl"),
                   "it is a dangling symlink to '" + (tmp / "gone") + "'");
  stdfs::create_directory_symlink(tmp / "new", tmp / "dirlink");
  EXPECT_PAX_ERROR(ensure_writable_file(tmp / "dirlink", "x"), "which is a directory, not a file");
  ASSERT_EQ(::mkfifo((tmp / "fifo").c_str(), 0600), 0);
  EXPECT_PAX_ERROR(ensure_writable_file(tmp / "fifo", "x"), "it is a FIFO, not a regular file");
  // The directory it goes into is checked first.
  write_text(tmp / "file", "x");
  EXPECT_PAX_ERROR(ensure_writable_file(tmp / "file/report.html", "report.html"),
                   "report.html: cannot write to '" + (tmp / "file") + "': it is a regular file, not a directory");
}

TEST(EnsureWritableFile, AReadOnlyFileIsNamed) {
  TempDir tmp;
  stdfs::permissions(tmp.path(), stdfs::perms::all);
  write_text(tmp / "metrics.jsonl", "");
  stdfs::permissions(tmp / "metrics.jsonl",
                     stdfs::perms::owner_read | stdfs::perms::group_read | stdfs::perms::others_read);
  Unprivileged as_user;
  if (!as_user.ok()) GTEST_SKIP() << "running as root, whom permissions do not bind, and setfsuid failed";
  EXPECT_PAX_ERROR(ensure_writable_file(tmp / "metrics.jsonl", "metrics.jsonl"),
                   "metrics.jsonl: cannot write to '" + (tmp / "metrics.jsonl") + "': it is read-only");
}

}  // namespace
}  // namespace pax::train::fs
