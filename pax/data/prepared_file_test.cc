// Prepared files and their checksum records: each kind of damage is named,
// a damaged or unrecorded file is prepared again with one notice, a failed
// preparation names the file, concurrent callers prepare it once, and a file
// that cannot be prepared again is refused only when it has a record.
#include "pax/data/prepared_file.h"

#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>
#include <vector>

#include "pax/data/file_io.h"
#include "pax/testing/testing.h"

namespace pax::data {

// This test process's temporary directory, removed at exit (file_io_test.cc).
std::filesystem::path process_temp_dir();

namespace {

namespace fs = std::filesystem;

std::string temp_dir(const std::string& name) {
  fs::path p = process_temp_dir() / ("prepared_" + name);
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

// Overwrites bytes of `path` in place (not atomically, as a failing disk or
// a stray write would), keeping its size.
void scribble(const std::string& path, size_t offset, const std::string& bytes) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  ASSERT_TRUE(f) << path;
  f.seekp(std::streamoff(offset));
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

TEST(PreparedFile, TheRecordIsSizeAndCrc32) {
  EXPECT_EQ(file_record_of("123456789"), (FileRecord{9, 0xCBF43926u}));  // the CRC-32 check value
  const std::string dir = temp_dir("record");
  write_prepared_file(dir + "/a.txt", "123456789");
  EXPECT_EQ(read_file(dir + "/a.txt"), "123456789");
  EXPECT_EQ(record_path(dir + "/a.txt"), dir + "/a.txt.crc32");
  EXPECT_EQ(read_file(dir + "/a.txt.crc32"), "{\"size\": 9, \"crc32\": \"cbf43926\"}\n");
  EXPECT_EQ(prepared_file_problem(dir + "/a.txt"), "");
}

TEST(PreparedFile, EachProblemIsNamed) {
  const std::string dir = temp_dir("problems");
  const std::string path = dir + "/a.txt";
  EXPECT_EQ(prepared_file_problem(path), "is missing");
  write_prepared_file(path, "some prepared text\n");
  scribble(path, 5, "XXXX");
  EXPECT_EQ(prepared_file_problem(path).rfind("has CRC-32 ", 0), 0u) << prepared_file_problem(path);
  write_file_atomic(path, "some prepared");  // cut short
  EXPECT_EQ(prepared_file_problem(path), "is 13 bytes where its record " + path + ".crc32 says 19");
  write_file_atomic(record_path(path), "{\"size\": 13}\n");
  EXPECT_EQ(prepared_file_problem(path), "has a malformed record " + path + ".crc32");
  fs::remove(record_path(path));
  EXPECT_EQ(prepared_file_problem(path), "has no record " + path + ".crc32");
}

TEST(PreparedFile, ADamagedOrUnrecordedFileIsPreparedAgainWithOneNotice) {
  const std::string dir = temp_dir("ensure");
  const std::string path = dir + "/sub/a.txt";
  int made = 0;
  auto make = [&] {
    ++made;
    return std::string("the source's text\n");
  };
  // Missing: prepared silently.
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(ensure_prepared_file(path, "the source", make), path);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(made, 1);
  // Intact: used as it is.
  ensure_prepared_file(path, "the source", make);
  EXPECT_EQ(made, 1);
  // Damaged: prepared again, with a notice naming it.
  scribble(path, 0, "\x07\xff\x13");
  ::testing::internal::CaptureStderr();
  ensure_prepared_file(path, "the source", make);
  std::string notice = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(made, 2);
  EXPECT_EQ(read_file(path), "the source's text\n");
  EXPECT_EQ(notice.rfind("paxcc: " + path + " has CRC-32 ", 0), 0u) << notice;
  EXPECT_NE(notice.find("; preparing it again from the source\n"), std::string::npos) << notice;
  // Without a record (prepared before records existed): taken as it is and
  // recorded, not prepared again; from then on checked like any other.
  write_file_atomic(path, "an older preparation\n");
  fs::remove(record_path(path));
  ::testing::internal::CaptureStderr();
  ensure_prepared_file(path, "the source", make);
  notice = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(made, 2);
  EXPECT_EQ(read_file(path), "an older preparation\n");
  EXPECT_EQ(notice, "paxcc: " + path + " has no record " + path +
                        ".crc32 (made before records were kept): recorded its size and CRC-32 as it is; delete it "
                        "to prepare it again\n");
  EXPECT_EQ(prepared_file_problem(path), "");
}

TEST(PreparedFile, AFailedPreparationNamesTheDamagedFile) {
  const std::string dir = temp_dir("fail");
  const std::string path = dir + "/a.txt";
  write_prepared_file(path, "good text\n");
  write_file_atomic(path, "good");
  ::testing::internal::CaptureStderr();
  EXPECT_PAX_ERROR(ensure_prepared_file(path, "the source", []() -> std::string { PAX_FAIL("no source here"); }),
                   path + " is 4 bytes where its record " + path +
                       ".crc32 says 10, and preparing it again from the source failed: no source here");
  ::testing::internal::GetCapturedStderr();
  // A first preparation that fails passes its own error on.
  EXPECT_PAX_ERROR(ensure_prepared_file(dir + "/b.txt", "the source", []() -> std::string { PAX_FAIL("no source"); }),
                   "no source");
}

TEST(PreparedFile, ConcurrentCallersPrepareItOnce) {
  const std::string dir = temp_dir("concurrent");
  const std::string path = dir + "/a.txt";
  write_prepared_file(path, "the text\n");
  scribble(path, 0, "X");
  std::atomic<int> made{0};
  ::testing::internal::CaptureStderr();
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      ensure_prepared_file(path, "the source", [&] {
        ++made;
        std::this_thread::sleep_for(std::chrono::milliseconds(50));  // widens the window for a second maker
        return std::string("the text\n");
      });
    });
  }
  for (std::thread& t : threads) t.join();
  const std::string notices = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(made.load(), 1);
  EXPECT_EQ(std::count(notices.begin(), notices.end(), '\n'), 1) << notices;
  EXPECT_EQ(read_file(path), "the text\n");
}

TEST(PreparedFile, AFileThatCannotBePreparedAgainIsRefusedOnlyWithARecord) {
  const std::string dir = temp_dir("check");
  const std::string path = dir + "/user.model";
  write_file_atomic(path, "a user's file");
  check_against_record(path, "model");  // no record: not paxcc's, read as it is
  write_prepared_file(path, "a prepared file");
  check_against_record(path, "model");
  write_file_atomic(path, "a prepared");
  EXPECT_PAX_ERROR(check_against_record(path, "model"),
                   "model '" + path + "' is 10 bytes where its record " + path + ".crc32 says 15: the file is damaged");
}

}  // namespace
}  // namespace pax::data
