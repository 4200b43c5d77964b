// File-system helpers: POSIX calls with EINTR / short-transfer handling,
// checks of output paths, and errors that name the path.
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

namespace {

// What a file of mode `mode` is, for messages ("a regular file", "a FIFO").
std::string kind_of(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISLNK(mode)) return "a symlink";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "a special file";
}

std::string link_target(const std::string& path) {
  char buf[4096];
  const ssize_t n = ::readlink(path.c_str(), buf, sizeof(buf));
  return n < 0 ? std::string("?") : std::string(buf, size_t(n));
}

// Why the symlink `path` cannot be followed ("" when it can; then `*target`
// holds what it leads to).
std::string why_unfollowable(const std::string& path, struct stat* target) {
  if (::stat(path.c_str(), target) == 0) return "";
  const int err = errno;
  const std::string to = link_target(path);
  if (err == ENOENT || err == ENOTDIR) return "is a dangling symlink to '" + to + "'";
  if (err == ELOOP) return "is a symlink loop (it leads to '" + to + "')";
  return "is a symlink to '" + to + "' that cannot be followed: " + std::strerror(err);
}

// Why `path`, whose lstat is `lst`, cannot be used as a directory ("" when it can).
std::string why_not_a_directory(const std::string& path, const struct stat& lst) {
  if (S_ISDIR(lst.st_mode)) return "";
  if (!S_ISLNK(lst.st_mode)) return "is " + kind_of(lst.st_mode) + ", not a directory";
  struct stat st {};
  std::string why = why_unfollowable(path, &st);
  if (!why.empty() || S_ISDIR(st.st_mode)) return why;
  return "is a symlink to '" + link_target(path) + "', which is " + kind_of(st.st_mode) + ", not a directory";
}

// Why writing into (a directory) or to (a file) `path` is refused, from the
// errno of access() or of a failed mkdir / open.
std::string why_refused(int err) {
  if (err == EROFS) return "is on a read-only file system";
  if (err == EACCES || err == EPERM) return "is read-only (no permission to write to it)";
  return std::string("cannot be written: ") + std::strerror(err);
}

// Whether this process may write to `path` (and search it, for a
// directory), with its effective ids; errno says why not.
bool writable(const std::string& path, bool directory) {
  return ::faccessat(AT_FDCWD, path.c_str(), directory ? W_OK | X_OK : W_OK, AT_EACCESS) == 0;
}

[[noreturn]] void fail_output(std::string_view purpose, const std::string& path, const std::string& culprit,
                              const std::string& why) {
  if (culprit == path) PAX_FAIL(purpose, ": cannot write to '", path, "': it ", why);
  PAX_FAIL(purpose, ": cannot write to '", path, "': '", culprit, "' ", why);
}

}  // namespace

void ensure_writable_directory(const std::string& path, std::string_view purpose) {
  PAX_CHECK(!path.empty(), purpose, ": the output directory must not be an empty path");
  std::string whole = path;
  while (whole.size() > 1 && whole.back() == '/') whole.pop_back();
  // The paths of `whole`'s components, shortest first ("a", "a/b", "a/b/c").
  std::vector<std::string> prefixes;
  for (size_t slash = whole.find('/', 1); slash != std::string::npos; slash = whole.find('/', slash + 1)) {
    if (whole[slash - 1] != '/') prefixes.push_back(whole.substr(0, slash));
  }
  prefixes.push_back(whole);
  size_t missing = prefixes.size();  // the first component that does not exist
  for (size_t i = 0; i < prefixes.size(); ++i) {
    struct stat lst {};
    if (::lstat(prefixes[i].c_str(), &lst) != 0) {
      if (errno == ENOENT) {
        missing = i;
        break;
      }
      fail_output(purpose, whole, prefixes[i], std::string("cannot be examined: ") + std::strerror(errno));
    }
    const std::string why = why_not_a_directory(prefixes[i], lst);
    if (!why.empty()) fail_output(purpose, whole, prefixes[i], why);
  }
  for (size_t i = missing; i < prefixes.size(); ++i) {
    if (::mkdir(prefixes[i].c_str(), 0755) == 0) continue;
    const int err = errno;
    struct stat lst {};
    if (err == EEXIST && ::lstat(prefixes[i].c_str(), &lst) == 0) {  // made meanwhile by another writer
      const std::string why = why_not_a_directory(prefixes[i], lst);
      if (why.empty()) continue;
      fail_output(purpose, whole, prefixes[i], why);
    }
    // Refused: the directory it goes into is at fault.
    const std::string parent = i > 0 ? prefixes[i - 1] : dirname(prefixes[i]);
    if (err == EACCES || err == EPERM || err == EROFS) fail_output(purpose, whole, parent, why_refused(err));
    fail_output(purpose, whole, prefixes[i], std::string("cannot be created: ") + std::strerror(err));
  }
  if (!writable(whole, /*directory=*/true)) fail_output(purpose, whole, whole, why_refused(errno));
}

void ensure_writable_file(const std::string& path, std::string_view purpose) {
  PAX_CHECK(!path.empty(), purpose, ": the output file must not be an empty path");
  ensure_writable_directory(dirname(path), purpose);
  struct stat lst {};
  if (::lstat(path.c_str(), &lst) != 0) {
    if (errno == ENOENT) return;  // created by the writer
    fail_output(purpose, path, path, std::string("cannot be examined: ") + std::strerror(errno));
  }
  struct stat st = lst;
  if (S_ISLNK(lst.st_mode)) {
    const std::string why = why_unfollowable(path, &st);
    if (!why.empty()) fail_output(purpose, path, path, why);
    if (!S_ISREG(st.st_mode))
      fail_output(purpose, path, path,
                  "is a symlink to '" + link_target(path) + "', which is " + kind_of(st.st_mode) + ", not a file");
  } else if (!S_ISREG(st.st_mode)) {
    fail_output(purpose, path, path, "is " + kind_of(st.st_mode) + ", not a regular file");
  }
  if (!writable(path, /*directory=*/false)) fail_output(purpose, path, path, why_refused(errno));
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
