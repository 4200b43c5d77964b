// open_regular_file: a regular file opens; a missing path, a directory, a
// character device and a FIFO (which would block a plain open until a writer
// came) are errors that name the path and what was found, at once.
#include "pax/core/regular_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "pax/testing/testing.h"

namespace pax {
namespace {

TEST(RegularFile, OpensOnlyRegularFiles) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("pax_regular_file_test_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string file = (dir / "data.bin").string(), fifo = (dir / "fifo").string();
  std::ofstream(file) << "abc";
  const int fd = open_regular_file(file, "data file");
  char buf[4] = {};
  EXPECT_EQ(::read(fd, buf, sizeof(buf)), 3);  // blocking reads work as usual
  EXPECT_EQ(std::string(buf), "abc");
  ::close(fd);

  EXPECT_PAX_ERROR(open_regular_file((dir / "missing").string(), "checkpoint file"),
                   "no such file: '" + (dir / "missing").string() + "' (the checkpoint file)");
  EXPECT_PAX_ERROR(open_regular_file(dir.string(), "data file"), "is a directory, not a regular file");
  EXPECT_PAX_ERROR(open_regular_file("/dev/null", "data file"), "is a character device");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_PAX_ERROR(open_regular_file(fifo, "checkpoint file"), "'" + fifo + "' is a FIFO (named pipe)");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pax
