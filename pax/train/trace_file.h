// Trace files: a recording of pax/core/trace.h written gzipped (the form
// TensorBoard's profile plugin reads; Perfetto opens it too), and
// PAX_TRACE_DIR, which records a whole process into
// <dir>/<host>.<pid>.trace.json.gz at its exit.
#pragma once

#include <string>

namespace pax::trace {

// Writes `json` gzipped to `path` (its directory created), replacing any file
// there only once the new one is complete. pax::Error naming the path on failure.
void write_gzipped(const std::string& path, const std::string& json);

// The text of a gzipped file (a trace); pax::Error naming the path when it
// cannot be read whole.
std::string read_gzipped(const std::string& path);

// This machine's host name ("host" when it cannot be read).
std::string host_name();

}  // namespace pax::trace
