// Trace files (trace_file.h) and the PAX_TRACE_DIR session, which starts
// recording when the library loads and writes the trace at exit.
#include "pax/train/trace_file.h"

#include <unistd.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "pax/core/error.h"
#include "pax/core/trace.h"

namespace pax::trace {

void write_gzipped(const std::string& path, const std::string& json) {
  namespace fs = std::filesystem;
  const fs::path target(path);
  std::error_code ec;
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  PAX_CHECK(!ec, "trace: cannot create the directory of ", path, ": ", ec.message());
  const std::string partial = path + ".partial";
  gzFile f = gzopen(partial.c_str(), "wb");
  PAX_CHECK(f != nullptr, "trace: cannot write ", partial);
  const bool written = gzwrite(f, json.data(), unsigned(json.size())) == int(json.size());
  const bool closed = gzclose(f) == Z_OK;
  PAX_CHECK(written && closed, "trace: writing ", partial, " failed (disk full?)");
  fs::rename(partial, target, ec);
  PAX_CHECK(!ec, "trace: cannot move ", partial, " to ", path, ": ", ec.message());
}

std::string read_gzipped(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  PAX_CHECK(f != nullptr, "trace: cannot read ", path);
  std::string text;
  char buf[1 << 16];
  int n = 0;
  while ((n = gzread(f, buf, sizeof(buf))) > 0) text.append(buf, size_t(n));
  const bool ok = n == 0;
  gzclose(f);
  PAX_CHECK(ok, "trace: ", path, " is not a whole gzip file");
  return text;
}

std::string host_name() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || !host[0]) return "host";
  return host;
}

namespace {

// PAX_TRACE_DIR: the process is traced from the library's load to its exit.
struct EnvSession {
  EnvSession() {
    const char* dir = std::getenv("PAX_TRACE_DIR");
    if (!dir || !*dir) return;
    start();
    std::atexit([] {
      const std::string d = std::getenv("PAX_TRACE_DIR");
      const std::string name = host_name() + "." + std::to_string(getpid());
      const std::string json = stop("paxcc " + name);
      if (json.empty()) return;
      const std::string path = d + "/" + name + ".trace.json.gz";
      try {
        write_gzipped(path, json);
        std::fprintf(stderr, "PAX_TRACE_DIR: trace written to %s\n", path.c_str());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "PAX_TRACE_DIR: %s\n", e.what());
      }
    });
  }
};
const EnvSession env_session;

}  // namespace

}  // namespace pax::trace
