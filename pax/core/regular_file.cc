// open_regular_file (see regular_file.h).
#include "pax/core/regular_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "pax/core/error.h"

namespace pax {
namespace {

const char* type_name(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

int open_regular_file(const std::string& path, const char* what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    PAX_CHECK(err != ENOENT, "no such file: '", path, "' (the ", what, ")");
    PAX_FAIL("cannot open the ", what, " '", path, "': ", std::strerror(err));
  }
  PAX_CHECK(S_ISREG(st.st_mode), "the ", what, " '", path, "' is ", type_name(st.st_mode), ", not a regular file");
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) PAX_FAIL("cannot open the ", what, " '", path, "': ", std::strerror(errno));
  const int rc = ::fstat(fd, &st);
  const int err = errno;
  if (rc != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    if (rc != 0) PAX_FAIL("cannot inspect the ", what, " '", path, "': ", std::strerror(err));
    PAX_FAIL("the ", what, " '", path, "' is ", type_name(st.st_mode), ", not a regular file");
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    const int err = errno;
    ::close(fd);
    PAX_FAIL("cannot open the ", what, " '", path, "': ", std::strerror(err));
  }
  return fd;
}

}  // namespace pax
