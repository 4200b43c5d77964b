// File-system helpers: durable whole-file writes that are fsynced before
// they return, positional reads, directory fsync, listing, atomic exchange of
// two directories and removal (for checkpoints), and the checks that an output
// path (summaries, reports, decode samples) can be written. Every failure
// throws pax::Error naming the path and the system error.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace pax::train::fs {

// A run of bytes to write.
struct ConstBuffer {
  const void* data = nullptr;
  size_t size = 0;
};

// An open file descriptor, closed on destruction.
class File {
 public:
  // Creates (or truncates) `path` for writing.
  static File create(const std::string& path);
  static File open_read(const std::string& path);
  File() = default;
  File(File&& other) noexcept;
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  // Writes every byte of every buffer (large writev calls, retried on short writes).
  void write_all(std::span<const ConstBuffer> buffers);
  void write_all(const void* data, size_t n);
  // Reads exactly `n` bytes at `offset`; a short file is an error.
  void pread_exact(void* dst, size_t n, uint64_t offset) const;
  uint64_t size() const;
  void sync();
  // Closes and reports a close error (a plain destructor would swallow it).
  void close();
  const std::string& path() const { return path_; }

 private:
  File(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

// Writes `bytes` to `path` (replacing it) and fsyncs the file.
void write_file_synced(const std::string& path, std::string_view bytes);
// The whole file; throws when it is larger than `max_bytes`.
std::string read_file(const std::string& path, uint64_t max_bytes);
// fsync of a directory, so that entries created or renamed in it are durable.
void sync_dir(const std::string& path);
// Creates `path` and missing parents, syncing each parent that got a new entry.
void make_dirs(const std::string& path);

// Makes `path` (and its missing parents) a directory that this process can
// create files in, or throws one pax::Error that names `purpose` ("summaries",
// "decode samples", ...), `path`, the component at fault and why: "is a
// dangling symlink to 'X'", "is a regular file, not a directory", "is
// read-only", "is on a read-only file system". Checked before a writer starts,
// so that an unusable output is one clear error rather than a failed open.
void ensure_writable_directory(const std::string& path, std::string_view purpose);
// For a file that is about to be created, appended to or replaced: its
// directory as ensure_writable_directory says, and `path` itself, when it
// exists, a writable regular file (or a symlink to one); a directory, a
// dangling symlink, a FIFO or a read-only file in its place is an error
// naming it.
void ensure_writable_file(const std::string& path, std::string_view purpose);

bool exists(const std::string& path);
bool is_dir(const std::string& path);
// Entry names of a directory ("." and ".." left out); empty when it does not exist.
std::vector<std::string> list_dir(const std::string& path);
// rename(2).
void rename(const std::string& from, const std::string& to);
// Atomically swaps two existing paths (renameat2 RENAME_EXCHANGE); false when
// the file system does not support it, in which case nothing changed.
bool exchange(const std::string& a, const std::string& b);
// Removes a file or a directory tree; a missing path is not an error.
void remove_all(const std::string& path);

std::string join(const std::string& dir, const std::string& name);
std::string basename(const std::string& path);
std::string dirname(const std::string& path);

}  // namespace pax::train::fs
