// The system compiler and its cache: a source is compiled once and loaded
// from the cache after; a cached library that is not this build (truncated,
// or beside another source) is rebuilt; a source that does not compile gives
// nullptr, a notice and a kept log; PAX_COMPILE is checked.
#include "pax/backend/cpu/native_compiler.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "pax/core/error.h"
#include "pax/testing/scoped_env.h"

namespace pax::cpu {
namespace {

namespace fs = std::filesystem;

// PAX_CACHE_DIR set to a fresh directory for the scope.
class TempCacheDir {
 public:
  TempCacheDir()
      : dir_(fs::temp_directory_path() / ("paxcc-native-test-" + std::to_string(::getpid()))),
        env_("PAX_CACHE_DIR", dir_.c_str()) {
    fs::remove_all(dir_);
  }
  ~TempCacheDir() { fs::remove_all(dir_); }
  const fs::path& path() const { return dir_; }

 private:
  fs::path dir_;
  testing::ScopedEnv env_;
};

int call_answer(const NativeLibrary& lib) {
  auto fn = reinterpret_cast<int (*)()>(lib.symbol("pax_answer"));
  return fn ? fn() : -1;
}

fs::path only_file_with(const fs::path& dir, const std::string& ext) {
  fs::path found;
  int count = 0;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.path().extension() == ext) {
      found = e.path();
      ++count;
    }
  }
  EXPECT_EQ(count, 1) << ext;
  return found;
}

#define SKIP_WITHOUT_COMPILER() \
  if (!native_compiler_available()) GTEST_SKIP() << "no C++ compiler (or PAX_COMPILE=off)"

TEST(NativeCompiler, BuildsOnceThenLoadsFromTheCache) {
  SKIP_WITHOUT_COMPILER();
  TempCacheDir cache;
  const std::string source = "extern \"C\" int pax_answer() { return 42; }\n";
  const NativeBuildStats before = native_build_stats();
  auto first = build_native(source, {});
  ASSERT_TRUE(first);
  EXPECT_EQ(call_answer(*first), 42);
  EXPECT_EQ(native_build_stats().compiled, before.compiled + 1);
  auto second = build_native(source, {});
  ASSERT_TRUE(second);
  EXPECT_EQ(call_answer(*second), 42);
  EXPECT_EQ(native_build_stats().compiled, before.compiled + 1);
  EXPECT_EQ(native_build_stats().cache_hits, before.cache_hits + 1);
  // Other flags are another entry.
  auto third = build_native(source, {"-DPAX_OTHER=1"});
  ASSERT_TRUE(third);
  EXPECT_EQ(native_build_stats().compiled, before.compiled + 2);
  EXPECT_NE(native_build_summary().find("loaded from the cache"), std::string::npos);
}

TEST(NativeCompiler, RebuildsCacheEntriesThatAreNotThisBuild) {
  SKIP_WITHOUT_COMPILER();
  TempCacheDir cache;
  const std::string source = "extern \"C\" int pax_answer() { return 7; }\n";
  ASSERT_TRUE(build_native(source, {}));
  const fs::path so = only_file_with(cache.path(), ".so"), cc = only_file_with(cache.path(), ".cc");
  const int compiled = native_build_stats().compiled;
  fs::resize_file(so, 100);  // a torn file
  auto lib = build_native(source, {});
  ASSERT_TRUE(lib);
  EXPECT_EQ(call_answer(*lib), 7);
  EXPECT_EQ(native_build_stats().compiled, compiled + 1);
  {
    std::ofstream out(cc, std::ios::app);
    out << "// another source under the same name\n";
  }
  lib = build_native(source, {});
  ASSERT_TRUE(lib);
  EXPECT_EQ(call_answer(*lib), 7);
  EXPECT_EQ(native_build_stats().compiled, compiled + 2);
}

TEST(NativeCompiler, ASourceThatDoesNotCompileFailsAndKeepsItsLog) {
  SKIP_WITHOUT_COMPILER();
  TempCacheDir cache;
  const int failed = native_build_stats().failed;
  ::testing::internal::CaptureStderr();
  EXPECT_FALSE(build_native("this is not C++\n", {}));
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(native_build_stats().failed, failed + 1);
  EXPECT_NE(err.find("building generated code failed"), std::string::npos) << err;
  const fs::path log = only_file_with(cache.path(), ".log");
  std::ifstream in(log);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(text.find("error"), std::string::npos) << text;
  for (const auto& e : fs::directory_iterator(cache.path())) {
    EXPECT_NE(e.path().filename().string().rfind("tmp-", 0), 0u) << "left behind: " << e.path();
  }
}

TEST(NativeCompiler, CompileModeIsChecked) {
  {
    testing::ScopedEnv mode("PAX_COMPILE", "sometimes");
    try {
      (void)compile_mode();
      ADD_FAILURE() << "no error for PAX_COMPILE=sometimes";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("async (the default), sync, off"), std::string::npos) << e.what();
    }
  }
  testing::ScopedEnv mode("PAX_COMPILE", "sync");
  EXPECT_EQ(compile_mode(), CompileMode::sync);
}

}  // namespace
}  // namespace pax::cpu
