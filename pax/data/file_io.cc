// read_file / write_file_atomic over zlib's gz* functions (which read plain
// files as they are).
#include "pax/data/file_io.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "pax/core/error.h"
#include "pax/core/regular_file.h"

namespace pax::data {
namespace {

std::string gz_error(gzFile f) {
  int code = 0;
  const char* msg = gzerror(f, &code);
  return code == Z_ERRNO ? std::strerror(errno) : (msg ? msg : "unknown zlib error");
}

// A name beside `path` that no other process or thread uses at the same time.
std::string temporary_name(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
}

}  // namespace

void check_local_path(const std::string& path, const std::string& what) {
  const size_t scheme = path.find("://");
  const bool url = scheme != std::string::npos && scheme > 0 &&
                   path.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-") ==
                       scheme;
  PAX_CHECK(!url, what, " '", path, "' is a URL; paxcc reads and writes local paths only: mount the bucket (for ",
            "example with gcsfuse) and give the mounted path");
}

std::string read_file(const std::string& path) {
  const int fd = open_regular_file(path, "file");
  gzFile f = gzdopen(fd, "rb");  // owns fd from here on
  if (!f) {
    const int err = errno;
    ::close(fd);
    PAX_FAIL("read_file: cannot open '", path, "': ", std::strerror(err));
  }
  gzbuffer(f, 1 << 17);
  std::string out;
  char buf[1 << 16];
  while (true) {
    int n = gzread(f, buf, sizeof(buf));
    if (n < 0) {
      std::string why = gz_error(f);
      gzclose(f);
      PAX_FAIL("read_file: cannot read '", path, "': ", why);
    }
    if (n == 0) break;
    out.append(buf, size_t(n));
  }
  // A gzip stream cut short reads as a short file; gzclose_r reports it.
  int rc = gzclose(f);
  PAX_CHECK(rc == Z_OK, "read_file: '", path, "' is a damaged or truncated gzip file (zlib error ", rc, ")");
  return out;
}

void make_directories(const std::string& dir, const std::string& purpose) {
  std::error_code ec;
  if (std::filesystem::is_directory(dir, ec)) return;
  std::filesystem::path walked;
  for (const std::filesystem::path& part : std::filesystem::path(dir)) {
    walked /= part;
    const std::filesystem::file_status st = std::filesystem::symlink_status(walked, ec);
    if (ec || !std::filesystem::exists(st)) break;
    if (std::filesystem::is_symlink(st)) {
      const std::filesystem::file_status target = std::filesystem::status(walked, ec);
      PAX_CHECK(std::filesystem::exists(target), purpose, ": cannot create '", dir, "': '", walked.string(),
                "' is a dangling symlink to '", std::filesystem::read_symlink(walked, ec).string(), "'");
      PAX_CHECK(std::filesystem::is_directory(target), purpose, ": cannot create '", dir, "': '", walked.string(),
                "' is a symlink to something that is not a directory");
      continue;
    }
    PAX_CHECK(std::filesystem::is_directory(st), purpose, ": cannot create '", dir, "': '", walked.string(),
              "' is not a directory");
  }
  std::filesystem::create_directories(dir, ec);
  PAX_CHECK(!ec, purpose, ": cannot create '", dir, "': ", ec.message());
}

void write_file_atomic(const std::string& path, std::string_view bytes, bool gzip) {
  std::filesystem::path p(path);
  if (p.has_parent_path()) make_directories(p.parent_path().string(), "write_file_atomic");
  std::error_code ec;
  const std::string tmp = temporary_name(path);
  bool ok = true;
  std::string why;
  if (gzip) {
    gzFile f = gzopen(tmp.c_str(), "wb");
    PAX_CHECK(f, "write_file_atomic: cannot create '", tmp, "': ", std::strerror(errno));
    size_t done = 0;
    while (ok && done < bytes.size()) {
      unsigned chunk = unsigned(std::min<size_t>(bytes.size() - done, 1u << 30));
      if (gzwrite(f, bytes.data() + done, chunk) != int(chunk)) {
        ok = false;
        why = gz_error(f);
      }
      done += chunk;
    }
    if (gzclose(f) != Z_OK && ok) {
      ok = false;
      why = "gzclose failed";
    }
  } else {
    int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    PAX_CHECK(fd >= 0, "write_file_atomic: cannot create '", tmp, "': ", std::strerror(errno));
    size_t done = 0;
    while (ok && done < bytes.size()) {
      ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        ok = false;
        why = std::strerror(errno);
      } else {
        done += size_t(n);
      }
    }
    if (ok && ::fsync(fd) != 0) {
      ok = false;
      why = std::strerror(errno);
    }
    ::close(fd);
  }
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    why = std::strerror(errno);
  }
  if (!ok) {
    std::filesystem::remove(tmp, ec);
    PAX_FAIL("write_file_atomic: cannot write '", path, "': ", why);
  }
}

}  // namespace pax::data
