// Trace files: gzipped whole or not at all, read back; a path that cannot
// be written is an error naming it.
#include "pax/train/trace_file.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "pax/testing/testing.h"

namespace pax::trace {
namespace {

TEST(TraceFile, WritesGzippedFilesWhole) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("pax_trace_file_test_" + std::to_string(::getpid()));
  const std::string path = (dir / "a" / "b.trace.json.gz").string();
  const std::string text = "{\"traceEvents\": []}";
  write_gzipped(path, text);
  EXPECT_EQ(read_gzipped(path), text);
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
  std::filesystem::remove_all(dir);
  EXPECT_PAX_ERROR(write_gzipped("/proc/no/such/dir/x.gz", text), "/proc/no/such/dir");
  EXPECT_PAX_ERROR(read_gzipped((dir / "missing.gz").string()), "cannot read");
  EXPECT_FALSE(host_name().empty());
}

}  // namespace
}  // namespace pax::trace
