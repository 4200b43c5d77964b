// Reading, writing and checking the files of the kernel cache (see
// kernel_cache_file.h).
#include "pax/backend/cpu/kernel_cache_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <vector>

namespace pax::cpu {
namespace {

constexpr const char* kRecordMagic = "paxcc-kernel-record 1";

// A library larger than this is not one that the code generator wrote.
constexpr size_t kMaxLibraryBytes = size_t(1) << 30;

std::string type_phrase(mode_t mode) {
  if (S_ISDIR(mode)) return "is a directory, not a regular file";
  if (S_ISFIFO(mode)) return "is a FIFO (named pipe), not a regular file";
  if (S_ISLNK(mode)) return "is a symbolic link, not a regular file";
  if (S_ISCHR(mode)) return "is a character device, not a regular file";
  if (S_ISBLK(mode)) return "is a block device, not a regular file";
  if (S_ISSOCK(mode)) return "is a socket, not a regular file";
  return "is not a regular file";
}

std::string errno_phrase(const char* doing, int err) {
  if (err == ENOENT) return "does not exist";
  return std::string("cannot be ") + doing + ": " + std::strerror(err);
}

// A read-only descriptor of `path` when it is a regular file, else -1 and
// *why; *size is its size then.
int open_regular(const std::string& path, size_t* size, std::string* why) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    *why = errno_phrase("inspected", errno);
    return -1;
  }
  if (!S_ISREG(st.st_mode)) {
    *why = type_phrase(st.st_mode);
    return -1;
  }
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    *why = errno == ELOOP ? type_phrase(S_IFLNK) : errno_phrase("opened", errno);
    return -1;
  }
  // What was opened, which may not be what lstat saw.
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    *why = S_ISREG(st.st_mode) ? errno_phrase("inspected", errno) : type_phrase(st.st_mode);
    ::close(fd);
    return -1;
  }
  *size = size_t(st.st_size);
  return fd;
}

// Reads up to `size` bytes of `fd`; what was read (shorter when the file is).
std::string read_all(int fd, size_t size) {
  std::string out(size, '\0');
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd, out.data() + done, size - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += size_t(n);
  }
  out.resize(done);
  return out;
}

}  // namespace

uint64_t kernel_cache_checksum(std::string_view bytes) {
  const size_t n = bytes.size();
  const char* p = bytes.data();
  uint64_t h = 0x9e3779b97f4a7c15ull ^ uint64_t(n);
  // Each step is a bijection of the state for a given word, so two inputs
  // that differ in one word leave different states.
  auto mix = [&h](uint64_t w) {
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  };
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    mix(w);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, p + i, n - i);
  mix(tail ^ (uint64_t(n - i) << 56));
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

std::optional<std::string> read_kernel_cache_file(const std::string& path, size_t max_bytes, std::string* why) {
  size_t size = 0;
  const int fd = open_regular(path, &size, why);
  if (fd < 0) return std::nullopt;
  if (size > max_bytes) {
    ::close(fd);
    *why = "is larger than " + std::to_string(max_bytes) + " bytes";
    return std::nullopt;
  }
  std::string bytes = read_all(fd, size);
  ::close(fd);
  return bytes;
}

bool write_kernel_cache_file(const std::string& path, std::string_view bytes, std::string* why) {
  struct stat st;
  if (::lstat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode) && !remove_kernel_cache_file(path, why)) return false;
  int fd;
  do {
    fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) {
    *why = "cannot create " + path + ": " + std::strerror(errno);
    return false;
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      *why = "cannot write " + path + ": " + std::strerror(n < 0 ? errno : EIO);
      ::close(fd);
      return false;
    }
    done += size_t(n);
  }
  if (::close(fd) != 0) {
    *why = "cannot write " + path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

std::string kernel_library_record(const std::string& key, std::string_view library) {
  char line[256];
  std::snprintf(line, sizeof(line), "%s %s %zu %016" PRIx64 "\n", kRecordMagic, key.c_str(), library.size(),
                kernel_cache_checksum(library));
  return line;
}

std::string check_kernel_library(const std::string& library_path, const std::string& record_path,
                                 const std::string& key) {
  std::string why;
  size_t size = 0;
  const int fd = open_regular(library_path, &size, &why);
  if (fd < 0) return why;
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  const std::optional<std::string> record = read_kernel_cache_file(record_path, 4096, &why);
  if (!record) return "has no checksum record (" + record_path + " " + why + ")";
  const std::string expected_head = std::string(kRecordMagic) + " " + key + " ";
  size_t recorded_size = 0;
  uint64_t recorded_sum = 0;
  char end = 0;
  if (record->rfind(expected_head, 0) != 0 ||
      std::sscanf(record->c_str() + expected_head.size(), "%zu %" SCNx64 "%c", &recorded_size, &recorded_sum, &end) !=
          3 ||
      end != '\n') {
    return "has a checksum record that is not one (" + record_path + ")";
  }
  if (size != recorded_size) {
    return "is " + std::to_string(size) + " bytes where its record says " + std::to_string(recorded_size);
  }
  if (size > kMaxLibraryBytes) return "is larger than " + std::to_string(kMaxLibraryBytes) + " bytes";
  const std::string bytes = read_all(fd, size);
  if (bytes.size() != size)
    return "ends after " + std::to_string(bytes.size()) + " of its " + std::to_string(size) + " bytes";
  if (kernel_cache_checksum(bytes) != recorded_sum) return "does not match the checksum of its record";
  return "";
}

bool remove_kernel_cache_file(const std::string& path, std::string* why) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return true;
    *why = "cannot inspect " + path + ": " + std::strerror(errno);
    return false;
  }
  const int rc = S_ISDIR(st.st_mode) ? ::rmdir(path.c_str()) : ::unlink(path.c_str());
  if (rc != 0 && errno != ENOENT) {
    *why = "cannot remove " + path + ": " + std::strerror(errno);
    return false;
  }
  return true;
}

std::string kernel_cache_dir_unwritable(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return "it cannot be created: " + ec.message();
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) return "it is not a directory";
  if (::access(dir.c_str(), W_OK | X_OK) != 0) return std::strerror(errno);
  return "";
}

void notice_once(const std::string& key, const std::string& text) {
  static std::mutex m;
  static std::vector<std::string> seen;
  std::lock_guard<std::mutex> lock(m);
  for (const std::string& k : seen) {
    if (k == key) return;
  }
  seen.push_back(key);
  std::fprintf(stderr, "paxcc: %s\n", text.c_str());
}

}  // namespace pax::cpu
