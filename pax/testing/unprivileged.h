// Tests of read-only paths under root: root ignores permissions, so for the
// life of an Unprivileged this thread's file-system ids are nobody's, which
// also drops the capabilities that override permissions (this thread only;
// back on destruction). ok() is false when the switch failed.
#pragma once

#include <sys/fsuid.h>
#include <unistd.h>

namespace pax::testing {

class Unprivileged {
 public:
  Unprivileged() {
    if (::geteuid() != 0) return;
    ::setfsgid(65534);
    ::setfsuid(65534);
    switched_ = true;
    ok_ = ::setfsuid(uid_t(-1)) == 65534;
  }
  ~Unprivileged() {
    if (!switched_) return;
    ::setfsuid(0);
    ::setfsgid(0);
  }
  Unprivileged(const Unprivileged&) = delete;
  Unprivileged& operator=(const Unprivileged&) = delete;
  bool ok() const { return ok_; }

 private:
  bool switched_ = false;
  bool ok_ = true;
};

}  // namespace pax::testing
