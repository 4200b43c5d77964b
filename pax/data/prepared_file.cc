// Prepared files and their records: CRC-32 over zlib, the record's one line
// of JSON, and preparing again under an exclusive file lock.
#include "pax/data/prepared_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>

#include "pax/core/error.h"
#include "pax/core/regular_file.h"
#include "pax/data/file_io.h"

namespace pax::data {
namespace {

constexpr const char* kMissing = "is missing";
constexpr std::string_view kNoRecord = "has no record ";

uint32_t crc32_extend(uint32_t crc, const char* data, size_t n) {
  // zlib's crc32 takes uInt lengths; crc32_z would do, but not every zlib has it.
  while (n > 0) {
    const uInt chunk = uInt(std::min<size_t>(n, 1u << 30));
    crc = uint32_t(::crc32(crc, reinterpret_cast<const Bytef*>(data), chunk));
    data += chunk;
    n -= chunk;
  }
  return crc;
}

std::string format_record(const FileRecord& r) {
  char line[96];
  std::snprintf(line, sizeof(line), "{\"size\": %" PRIu64 ", \"crc32\": \"%08" PRIx32 "\"}\n", r.size, r.crc32);
  return line;
}

// The record written by format_record; nullopt for anything else.
std::optional<FileRecord> parse_record(const std::string& text) {
  unsigned long long size = 0;
  unsigned crc = 0;
  int end = 0;
  if (std::sscanf(text.c_str(), "{\"size\": %llu, \"crc32\": \"%8x\"}%n", &size, &crc, &end) != 2 || end == 0) {
    return std::nullopt;
  }
  if (text.substr(size_t(end)) != "\n") return std::nullopt;
  return FileRecord{uint64_t(size), uint32_t(crc)};
}

// The record of the bytes of `path` as they are on disk (not gunzipped).
FileRecord record_of_file(const std::string& path) {
  const int fd = open_regular_file(path, "prepared file");
  FileRecord r;
  r.crc32 = uint32_t(::crc32(0, nullptr, 0));
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      PAX_FAIL("cannot read '", path, "': ", std::strerror(err));
    }
    if (n == 0) break;
    r.crc32 = crc32_extend(r.crc32, buf, size_t(n));
    r.size += uint64_t(n);
  }
  ::close(fd);
  return r;
}

std::string hex(uint32_t v) {
  char s[16];
  std::snprintf(s, sizeof(s), "%08" PRIx32, v);
  return s;
}

// An exclusive flock on <path>.lock, held for the object's life. The lock
// file stays: removing it would let a process lock a file that a third one
// has just replaced.
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    const std::filesystem::path lock = path + ".lock";
    if (lock.has_parent_path()) make_directories(lock.parent_path().string(), "data directory");
    fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    PAX_CHECK(fd_ >= 0, "cannot create the lock file '", lock.string(), "': ", std::strerror(errno));
    while (::flock(fd_, LOCK_EX) != 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd_);
      PAX_FAIL("cannot lock '", lock.string(), "': ", std::strerror(err));
    }
  }
  ~FileLock() { ::close(fd_); }  // closing releases the lock
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

FileRecord file_record_of(std::string_view bytes) {
  return {uint64_t(bytes.size()), crc32_extend(uint32_t(::crc32(0, nullptr, 0)), bytes.data(), bytes.size())};
}

std::string record_path(const std::string& path) { return path + ".crc32"; }

void write_prepared_file(const std::string& path, std::string_view bytes) {
  write_file_atomic(path, bytes);
  write_file_atomic(record_path(path), format_record(file_record_of(bytes)));
}

std::string prepared_file_problem(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(path, ec))) return kMissing;
  const std::string rec_path = record_path(path);
  if (!std::filesystem::exists(std::filesystem::symlink_status(rec_path, ec))) return std::string(kNoRecord) + rec_path;
  std::string rec_text;
  try {
    rec_text = read_file(rec_path);
  } catch (const Error& e) {
    return "has an unreadable record: " + std::string(e.what());
  }
  const std::optional<FileRecord> expected = parse_record(rec_text);
  if (!expected) return "has a malformed record " + rec_path;
  FileRecord found;
  try {
    found = record_of_file(path);
  } catch (const Error& e) {
    return "cannot be checked: " + std::string(e.what());
  }
  if (found.size != expected->size) {
    return "is " + std::to_string(found.size) + " bytes where its record " + rec_path + " says " +
           std::to_string(expected->size);
  }
  if (found.crc32 != expected->crc32) {
    return "has CRC-32 " + hex(found.crc32) + " where its record " + rec_path + " says " + hex(expected->crc32);
  }
  return "";
}

std::string ensure_prepared_file(const std::string& path, const std::string& source,
                                 const std::function<std::string()>& make) {
  std::string problem = prepared_file_problem(path);
  if (problem.empty()) return path;
  if (problem.starts_with(kNoRecord)) {
    // Made before records were kept: preparing it again could change it (a
    // retrained tokenizer's ids under existing checkpoints), and its source
    // may be gone. It is taken as it is, and recorded where that can be written.
    std::string outcome = "recorded its size and CRC-32 as it is";
    try {
      FileLock lock(path);
      if (prepared_file_problem(path).starts_with(kNoRecord))
        write_file_atomic(record_path(path), format_record(record_of_file(path)));
    } catch (const Error& e) {
      outcome = "it is read unchecked (" + std::string(e.what()) + ")";
    }
    std::fprintf(stderr, "paxcc: %s %s (made before records were kept): %s; delete it to prepare it again\n",
                 path.c_str(), problem.c_str(), outcome.c_str());
    std::fflush(stderr);
    return path;
  }
  try {
    // Look again under the lock: another process may have prepared it meanwhile.
    FileLock lock(path);
    problem = prepared_file_problem(path);
    if (problem.empty()) return path;
    if (problem != kMissing) {
      std::fprintf(stderr, "paxcc: %s %s; preparing it again from %s\n", path.c_str(), problem.c_str(), source.c_str());
      std::fflush(stderr);
    }
    write_prepared_file(path, make());
  } catch (const Error& e) {
    if (problem == kMissing) throw;  // first preparation: its own error says it all
    PAX_FAIL(path, " ", problem, ", and preparing it again from ", source, " failed: ", e.what());
  }
  return path;
}

void check_against_record(const std::string& path, const std::string& what) {
  std::error_code ec;
  if (!std::filesystem::exists(std::filesystem::symlink_status(record_path(path), ec))) return;
  const std::string problem = prepared_file_problem(path);
  PAX_CHECK(problem.empty(), what, " '", path, "' ", problem,
            ": the file is damaged; restore it, or delete it and its record and prepare it again");
}

}  // namespace pax::data
