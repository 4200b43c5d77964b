// Scratch paths for tests: one directory per test program and process (test
// programs run concurrently), a fresh path inside it per case.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <string>

namespace pax::testing {

// <tmp>/pax_<program>_<pid>/<name>, removed if it is there, its parent made.
inline std::string fresh_test_path(const std::string& program, const std::string& name) {
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("pax_" + program + "_" + std::to_string(::getpid())) / name;
  std::filesystem::remove_all(path);
  std::filesystem::create_directories(path.parent_path());
  return path.string();
}

}  // namespace pax::testing
