// JobDirectoryLock and make_job_directory (see job_lock.h).
#include "pax/experiments/job_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "pax/core/error.h"

namespace pax::experiments {

namespace fs = std::filesystem;

void make_job_directory(const std::string& job_dir, const std::string& what) {
  PAX_CHECK(!job_dir.empty(), "a directory is needed (", what, ")");
  // The first component that exists but is not a directory is the culprit
  // ("File exists" from mkdir would name neither it nor the problem).
  fs::path walked;
  for (const fs::path& part : fs::path(job_dir)) {
    walked /= part;
    std::error_code ec;
    const fs::file_status st = fs::status(walked, ec);
    if (ec || !fs::exists(st)) break;
    PAX_CHECK(fs::is_directory(st), what, " ", job_dir, ": ", walked.string(),
              walked == fs::path(job_dir) ? " exists and is not a directory" : " is not a directory", "; pick another ",
              what);
  }
  std::error_code ec;
  fs::create_directories(job_dir, ec);
  PAX_CHECK(!ec, "cannot create ", job_dir, " (", what, "): ", ec.message());
}

namespace {

// "host h, PID 123, started 2026-11-28 10:00:00 UTC, lm.KjvTransformer", from the lock file's record.
std::string describe_holder(int fd) {
  char buf[4096];
  const ssize_t n = ::pread(fd, buf, sizeof(buf) - 1, 0);
  if (n <= 0) return "its details are not written yet";
  const nlohmann::json j = nlohmann::json::parse(std::string(buf, size_t(n)), nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return "its record in the lock file is unreadable";
  auto field = [&](const char* key) {
    if (!j.contains(key)) return std::string("?");
    return j[key].is_string() ? j[key].get<std::string>() : j[key].dump();
  };
  return "host " + field("host") + ", PID " + field("pid") + ", started " + field("started") +
         (j.contains("experiment") ? ", " + field("experiment") : std::string());
}

std::string utc_now() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&now, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

}  // namespace

JobDirectoryLock::JobDirectoryLock(const std::string& job_dir, const std::string& experiment)
    : path_((fs::path(job_dir) / "job.lock").string()) {
  make_job_directory(job_dir);
  // O_NOFOLLOW and the regular-file check: a FIFO or link in its place must
  // not block or redirect the write of the record.
  fd_ = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  PAX_CHECK(
      fd_ >= 0, "cannot open the job directory's lock ", path_, ": ", std::strerror(errno),
      errno == EROFS || errno == EACCES ? " (training writes the job directory; eval and decode need no lock)" : "");
  struct stat st {};
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    PAX_FAIL("the job directory's lock ", path_, " is not a regular file; remove it");
  }
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == ENOSYS || err == EOPNOTSUPP || err == ENOLCK) {
      // Some shared file systems (Lustre without -o flock, some FUSE and NFS
      // setups) have no locks: training goes on, unguarded, with one notice.
      std::fprintf(stderr,
                   "paxcc: notice: %s cannot be locked on this file system (%s): nothing stops a second "
                   "trainer on this job directory\n",
                   path_.c_str(), std::strerror(err));
      ::close(fd_);
      fd_ = -1;
      return;
    }
    const std::string holder = err == EWOULDBLOCK ? describe_holder(fd_) : std::string();
    ::close(fd_);
    fd_ = -1;
    PAX_CHECK(err != EWOULDBLOCK, job_dir, " is in use by another trainer (", holder,
              "); wait for it to finish, stop it (SIGTERM saves a checkpoint), or pick another --job_log_dir");
    PAX_FAIL("cannot lock ", path_, ": ", std::strerror(err));
  }
  char host[256] = "?";
  ::gethostname(host, sizeof(host) - 1);
  const std::string record =
      nlohmann::json{
          {"host", std::string(host)}, {"pid", int64_t(::getpid())}, {"started", utc_now()}, {"experiment", experiment}}
          .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
      "\n";
  // The record is informative: a failure to write it leaves the lock held.
  if (::ftruncate(fd_, 0) == 0) {
    const ssize_t ignored = ::pwrite(fd_, record.data(), record.size(), 0);
    (void)ignored;
  }
}

JobDirectoryLock::~JobDirectoryLock() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace pax::experiments
