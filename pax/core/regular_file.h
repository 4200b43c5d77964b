// Opening a file for reading only when it is a regular file. A FIFO, a
// character device or a socket in place of a checkpoint or data file would
// otherwise block open() or read() forever (a FIFO waits for a writer), where
// nothing but SIGKILL ends the wait.
#pragma once

#include <string>

namespace pax {

// A read-only descriptor of `path` (O_CLOEXEC), which the caller closes.
// Throws pax::Error naming the path, `what` it is for ("checkpoint", "data
// file", ...) and what it found instead ("no such file", "is a FIFO", "is a directory").
// The type is checked before opening and again on the opened descriptor,
// which is opened non-blocking (so that a FIFO swapped in between cannot block
// the open) and then switched to blocking reads.
int open_regular_file(const std::string& path, const char* what);

}  // namespace pax
