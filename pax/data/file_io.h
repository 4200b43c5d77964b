// Whole-file reading and atomic writing for the input pipeline: gzip files
// are decompressed transparently (text corpora and IDX files may be either),
// and every write goes through a temporary file renamed into place, so a
// reader (or a second process preparing the same data) never sees half a file.
#pragma once

#include <string>
#include <string_view>

namespace pax::data {

// The contents of `path`, gunzipped when it is gzip-compressed (whatever its
// name). Throws pax::Error naming the file when it is missing or unreadable.
std::string read_file(const std::string& path);

// Throws pax::Error when `path` is a URL (gs://bucket/..., s3://...): paxcc
// reads and writes local paths, and such a name would otherwise become a
// local directory called "gs:". `what` names the setting ("--job_log_dir").
void check_local_path(const std::string& path, const std::string& what);

// Creates directory `dir` and its parents; an error names the part of the
// path that is in the way (a file, a dangling symlink) or the reason, and
// `purpose` ("data directory").
void make_directories(const std::string& dir, const std::string& purpose);

// Writes `bytes` to `path` (gzip-compressed when `gzip`), creating missing
// parent directories: a temporary file beside it is written, flushed and
// renamed over `path`.
void write_file_atomic(const std::string& path, std::string_view bytes, bool gzip = false);

}  // namespace pax::data
