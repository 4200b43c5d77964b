// Durable file-system helpers: POSIX calls with EINTR / short-transfer
// handling, and errors that name the path.
#include "pax/train/fs_util.h"

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "pax/core/error.h"
#include "pax/core/regular_file.h"

namespace pax::train::fs {
namespace {

[[noreturn]] void fail(const char* what, const std::string& path, int err) {
  PAX_FAIL("checkpoint I/O: cannot ", what, " '", path, "': ", std::strerror(err));
}

int open_or_fail(const std::string& path, int flags, const char* what) {
  int fd;
  do {
    fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) fail(what, path, errno);
  return fd;
}

constexpr size_t kMaxIov = IOV_MAX < 1024 ? IOV_MAX : 1024;

}  // namespace

File File::create(const std::string& path) {
  return File(open_or_fail(path, O_WRONLY | O_CREAT | O_TRUNC, "create"), path);
}

File File::open_read(const std::string& path) { return File(open_regular_file(path, "checkpoint file"), path); }

File::File(File&& other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) { other.fd_ = -1; }

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

File::~File() {
  if (fd_ >= 0) ::close(fd_);
}

void File::write_all(std::span<const ConstBuffer> buffers) {
  std::vector<iovec> iov;
  iov.reserve(buffers.size());
  for (const ConstBuffer& b : buffers) {
    if (b.size > 0) iov.push_back({const_cast<void*>(b.data), b.size});
  }
  size_t first = 0;
  while (first < iov.size()) {
    const int count = int(std::min(kMaxIov, iov.size() - first));
    ssize_t n = ::writev(fd_, iov.data() + first, count);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("write", path_, errno);
    }
    if (n == 0) fail("write", path_, EIO);
    // Drop the fully written buffers and advance into a partly written one.
    size_t left = size_t(n);
    while (first < iov.size() && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (left > 0) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
}

void File::write_all(const void* data, size_t n) {
  const ConstBuffer b{data, n};
  write_all(std::span<const ConstBuffer>(&b, 1));
}

void File::pread_exact(void* dst, size_t n, uint64_t offset) const {
  char* p = static_cast<char*>(dst);
  while (n > 0) {
    ssize_t got = ::pread(fd_, p, std::min<size_t>(n, size_t(1) << 30), off_t(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      fail("read", path_, errno);
    }
    PAX_CHECK(got > 0, "checkpoint I/O: '", path_, "' ended at byte ", offset, " while ", n,
              " more bytes were expected (truncated file)");
    p += got;
    n -= size_t(got);
    offset += uint64_t(got);
  }
}

uint64_t File::size() const {
  struct stat st {};
  if (::fstat(fd_, &st) != 0) fail("stat", path_, errno);
  return uint64_t(st.st_size);
}

void File::sync() {
  if (::fsync(fd_) != 0) fail("fsync", path_, errno);
}

void File::close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0 && errno != EINTR) fail("close", path_, errno);
}

void write_file_synced(const std::string& path, std::string_view bytes) {
  File f = File::create(path);
  f.write_all(bytes.data(), bytes.size());
  f.sync();
  f.close();
}

std::string read_file(const std::string& path, uint64_t max_bytes) {
  File f = File::open_read(path);
  const uint64_t n = f.size();
  PAX_CHECK(n <= max_bytes, "checkpoint I/O: '", path, "' is ", n, " bytes, more than the ", max_bytes,
            " allowed for this file");
  std::string out(size_t(n), '\0');
  f.pread_exact(out.data(), out.size(), 0);
  return out;
}

void sync_dir(const std::string& path) {
  const int fd = open_or_fail(path, O_RDONLY | O_DIRECTORY, "open directory");
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) fail("fsync directory", path, err);
}

void make_dirs(const std::string& path) {
  if (is_dir(path)) return;
  const std::string parent = dirname(path);
  if (parent != path) make_dirs(parent);
  if (::mkdir(path.c_str(), 0755) != 0) {
    if (errno == EEXIST && is_dir(path)) return;
    fail("create directory", path, errno);
  }
  sync_dir(parent);
}

bool exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

bool is_dir(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::vector<std::string> list_dir(const std::string& path) {
  std::vector<std::string> out;
  std::error_code ec;
  std::filesystem::directory_iterator it(path, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) return out;
    fail("list directory", path, ec.value());
  }
  for (; it != std::filesystem::directory_iterator(); it.increment(ec)) {
    if (ec) fail("list directory", path, ec.value());
    out.push_back(it->path().filename().string());
  }
  if (ec) fail("list directory", path, ec.value());
  std::sort(out.begin(), out.end());
  return out;
}

void rename(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) fail("rename", from + "' to '" + to, errno);
}

bool exchange(const std::string& a, const std::string& b) {
#ifdef SYS_renameat2
  if (::syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), RENAME_EXCHANGE) == 0) return true;
  if (errno == EINVAL || errno == ENOSYS || errno == ENOTSUP) return false;
  fail("exchange", a + "' and '" + b, errno);
#else
  return false;
#endif
}

void remove_all(const std::string& path) {
  std::error_code ec;
  std::filesystem::remove_all(path, ec);
  if (ec) fail("remove", path, ec.value());
}

std::string join(const std::string& dir, const std::string& name) {
  if (dir.empty()) return name;
  return dir.back() == '/' ? dir + name : dir + "/" + name;
}

std::string basename(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::string dirname(const std::string& path) {
  std::string p = path;
  while (p.size() > 1 && p.back() == '/') p.pop_back();
  const size_t slash = p.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
}

}  // namespace pax::train::fs
