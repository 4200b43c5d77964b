// The system compiler and its cache: a source is compiled once and loaded
// from the cache after; a cached library that is not this build (truncated,
// or beside another source) is rebuilt; a source that does not compile gives
// nullptr, a notice and a kept log; PAX_COMPILE is checked. A damaged entry
// (truncated, garbage of the right size, without its checksum record, a FIFO,
// a directory or a dangling link in place of the library, a FIFO in place of
// its source) is named in one notice, never opened, removed and rebuilt, and
// a jitted function still gives the right values; an unwritable cache is
// named in one notice and builds go elsewhere, logs included.
#include "pax/backend/cpu/native_compiler.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "pax/api/transforms.h"
#include "pax/backend/cpu/kernel_cache_file.h"
#include "pax/core/error.h"
#include "pax/ops/numpy.h"
#include "pax/testing/scoped_env.h"
#include "pax/testing/testing.h"

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

int count_of(const std::string& text, const std::string& part) {
  int n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// Replaces `path` with `bytes` through a rename, as another writer would:
// a library still mapped by this process keeps its own (old) file.
void replace_file(const fs::path& path, const std::string& bytes) {
  const fs::path tmp = path.string() + ".replacing";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << bytes;
  }
  fs::rename(tmp, path);
}

// A FIFO in place of `path`. The test holds it open for reading and writing
// with a few bytes in it, so that code that wrongly opens it gets them at
// once instead of blocking; bait_unread() then tells. Should that code block
// on it anyway (reading past the bait, or opening it after the end of this
// test's descriptor), a watchdog ends the wait after a while by closing the
// descriptor and opening the FIFO for writing, so that the test fails
// instead of hanging.
class FifoTrap {
 public:
  static constexpr char kBait[] = "not a library, never to be read";

  explicit FifoTrap(const fs::path& path) : path_(path) {
    fs::remove(path);
    EXPECT_EQ(::mkfifo(path.c_str(), 0644), 0) << path;
    fd_ = ::open(path.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
    EXPECT_GE(fd_, 0) << path;
    EXPECT_EQ(::write(fd_, kBait, sizeof(kBait)), ssize_t(sizeof(kBait)));
    watchdog_ = std::thread([this] {
      std::unique_lock<std::mutex> lock(mutex_);
      if (cv_.wait_for(lock, std::chrono::seconds(20), [this] { return done_; })) return;
      ::close(fd_);
      fd_ = -1;
      while (!cv_.wait_for(lock, std::chrono::milliseconds(100), [this] { return done_; })) {
        const int w = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
        if (w >= 0) ::close(w);
      }
    });
  }
  ~FifoTrap() {
    stop();
    if (fd_ >= 0) ::close(fd_);
  }
  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    if (watchdog_.joinable()) watchdog_.join();
  }
  // Whether the bait is still in the FIFO, whole (call after stop()).
  bool bait_unread() {
    if (fd_ < 0) return false;
    char buf[sizeof(kBait) + 16];
    return ::read(fd_, buf, sizeof(buf)) == ssize_t(sizeof(kBait));
  }

 private:
  fs::path path_;
  int fd_ = -1;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread watchdog_;
};

enum class Damage { truncated, garbage, no_record, fifo, directory, dangling_link, fifo_source };

struct DamageCase {
  const char* name;
  Damage damage;
  const char* named;  // a part of the notice that says what is wrong
};

void PrintTo(const DamageCase& c, std::ostream* os) { *os << c.name; }

// Damages the cache entry whose library is `so` (beside it its source and its
// record); `trap` receives the FIFO of the FIFO cases.
void damage_entry(const fs::path& so, Damage damage, std::optional<FifoTrap>& trap) {
  const fs::path cc = fs::path(so).replace_extension(".cc"), record = fs::path(so).replace_extension(".sum");
  EXPECT_TRUE(fs::is_regular_file(record)) << "no checksum record beside " << so;
  const std::string bytes = slurp(so);
  switch (damage) {
    case Damage::truncated: replace_file(so, bytes.substr(0, bytes.size() / 2)); break;
    case Damage::garbage: {
      std::string junk(bytes.size(), '\0');
      for (size_t i = 0; i < junk.size(); ++i) junk[i] = char((i * 2654435761u) >> 13);
      replace_file(so, junk);
      break;
    }
    case Damage::no_record: fs::remove(record); break;
    case Damage::fifo: trap.emplace(so); break;
    case Damage::directory:
      fs::remove(so);
      fs::create_directory(so);
      break;
    case Damage::dangling_link:
      fs::remove(so);
      fs::create_symlink(so.parent_path() / "nowhere.so", so);
      break;
    case Damage::fifo_source: trap.emplace(cc); break;
  }
}

const DamageCase kDamageCases[] = {
    {"Truncated", Damage::truncated, "bytes where its record says"},
    {"GarbageOfTheRightSize", Damage::garbage, "does not match the checksum of its record"},
    {"NoChecksumRecord", Damage::no_record, "has no checksum record"},
    {"Fifo", Damage::fifo, "is a FIFO"},
    {"Directory", Damage::directory, "is a directory"},
    {"DanglingSymlink", Damage::dangling_link, "is a symbolic link"},
    {"FifoInPlaceOfTheSource", Damage::fifo_source, "is a FIFO"},
};

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

class NativeCompilerDamage : public ::testing::TestWithParam<DamageCase> {};

TEST_P(NativeCompilerDamage, IsNamedOnceRemovedAndRebuilt) {
  SKIP_WITHOUT_COMPILER();
  TempCacheDir cache;
  const int value = 100 + int(GetParam().damage);  // an entry of its own per case
  const std::string source = "extern \"C\" int pax_answer() { return " + std::to_string(value) + "; }\n";
  ASSERT_TRUE(build_native(source, {}));  // and unloaded: nothing maps the file when it is damaged
  const fs::path so = only_file_with(cache.path(), ".so");
  // In place, as `truncate -s` does (the library is not loaded now).
  if (GetParam().damage == Damage::truncated) fs::resize_file(so, fs::file_size(so) / 2);
  std::optional<FifoTrap> trap;
  if (GetParam().damage != Damage::truncated) damage_entry(so, GetParam().damage, trap);
  const NativeBuildStats before = native_build_stats();
  ::testing::internal::CaptureStderr();
  auto lib = build_native(source, {});
  const std::string err = ::testing::internal::GetCapturedStderr();
  if (trap) {
    trap->stop();
    EXPECT_TRUE(trap->bait_unread()) << "the FIFO was opened and read";
  }
  ASSERT_TRUE(lib) << err;
  EXPECT_EQ(call_answer(*lib), value);
  EXPECT_EQ(native_build_stats().damaged, before.damaged + 1);
  EXPECT_EQ(native_build_stats().compiled, before.compiled + 1);
  EXPECT_EQ(count_of(err, "paxcc: "), 1) << err;
  EXPECT_NE(err.find("kernel cache entry " + so.string()), std::string::npos) << err;
  EXPECT_NE(err.find(GetParam().named), std::string::npos) << err;
  EXPECT_NE(err.find("removed, and rebuilt"), std::string::npos) << err;
  // Rebuilt in place: the next build loads it, quietly.
  lib.reset();
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(so))) << so;
  EXPECT_EQ(check_kernel_library(so.string(), fs::path(so).replace_extension(".sum").string(), so.stem().string()), "");
  ::testing::internal::CaptureStderr();
  lib = build_native(source, {});
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  ASSERT_TRUE(lib);
  EXPECT_EQ(call_answer(*lib), value);
  EXPECT_EQ(native_build_stats().compiled, before.compiled + 1);
  EXPECT_EQ(native_build_stats().cache_hits, before.cache_hits + 1);
}

INSTANTIATE_TEST_SUITE_P(Entries, NativeCompilerDamage, ::testing::ValuesIn(kDamageCases),
                         [](const auto& info) { return std::string(info.param.name); });

// The same through jit: a fused loop's library is damaged between two
// programs that share it; the second names the entry, rebuilds it and gives
// the values of eager execution.
class KernelCacheDamage : public ::testing::TestWithParam<DamageCase> {};

TEST_P(KernelCacheDamage, AJittedFunctionStillGivesTheRightValues) {
  SKIP_WITHOUT_COMPILER();
  testing::ScopedEnv mode("PAX_COMPILE", "sync");
  TempCacheDir cache;
  // A program of its own per case (an entry of its own: notices are once
  // per entry and process).
  const int rounds = 1 + int(GetParam().damage);
  auto f = [rounds](const Array& x) {
    Array y = tanh(x * x) - x * 0.5;
    for (int i = 0; i < rounds; ++i) y = exp(y * 0.25) - y;
    return y;
  };
  const Array x = testing::random_array({1000}, DType::f32, 3);
  const Array want = f(x);
  const NativeBuildStats start = native_build_stats();
  EXPECT_TRUE(testing::all_close(jit(f)(x), want, 1e-5, 1e-6));
  ASSERT_GT(native_build_stats().compiled, start.compiled) << "no fused loop was compiled";
  fs::path so;
  for (const auto& e : fs::directory_iterator(cache.path())) {
    if (e.path().extension() == ".so" && (so.empty() || fs::file_size(e.path()) > fs::file_size(so))) so = e.path();
  }
  ASSERT_FALSE(so.empty());
  std::optional<FifoTrap> trap;
  damage_entry(so, GetParam().damage, trap);
  const NativeBuildStats before = native_build_stats();
  ::testing::internal::CaptureStderr();
  const Array got = jit(f)(x);
  const std::string err = ::testing::internal::GetCapturedStderr();
  if (trap) {
    trap->stop();
    EXPECT_TRUE(trap->bait_unread()) << "the FIFO was opened and read";
  }
  EXPECT_TRUE(testing::all_close(got, want, 1e-5, 1e-6));
  EXPECT_EQ(native_build_stats().damaged, before.damaged + 1);
  EXPECT_EQ(native_build_stats().compiled, before.compiled + 1);
  EXPECT_EQ(count_of(err, "paxcc: "), 1) << err;
  EXPECT_NE(err.find("kernel cache entry " + so.string()), std::string::npos) << err;
  EXPECT_NE(err.find(GetParam().named), std::string::npos) << err;
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(so))) << so;
}

const DamageCase kJitDamageCases[] = {kDamageCases[0], kDamageCases[1], kDamageCases[2], kDamageCases[3]};

INSTANTIATE_TEST_SUITE_P(Entries, KernelCacheDamage, ::testing::ValuesIn(kJitDamageCases),
                         [](const auto& info) { return std::string(info.param.name); });

// A cache that cannot be written (here: below a regular file) is named in one
// notice with the directory that builds go to instead; a failed build's log
// is there, not in the cache.
TEST(NativeCompiler, AnUnwritableCacheIsNamedOnceAndBuildsGoElsewhere) {
  SKIP_WITHOUT_COMPILER();
  TempCacheDir cache;
  fs::create_directories(cache.path());
  std::ofstream(cache.path() / "a-file") << "not a directory\n";
  const fs::path dir = cache.path() / "a-file" / "kernels";
  testing::ScopedEnv env("PAX_CACHE_DIR", dir.c_str());
  const NativeBuildStats before = native_build_stats();
  ::testing::internal::CaptureStderr();
  auto lib = build_native("extern \"C\" int pax_answer() { return 11; }\n", {});
  auto again = build_native("extern \"C\" int pax_answer() { return 12; }\n", {});
  auto broken = build_native("this is not C++ either\n", {});
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(lib) << err;
  ASSERT_TRUE(again) << err;
  EXPECT_EQ(call_answer(*lib), 11);
  EXPECT_EQ(call_answer(*again), 12);
  EXPECT_FALSE(broken);
  EXPECT_EQ(native_build_stats().compiled, before.compiled + 2);
  EXPECT_EQ(native_build_stats().failed, before.failed + 1);
  EXPECT_EQ(count_of(err, "is not writable"), 1) << err;
  EXPECT_NE(err.find("the kernel cache " + dir.string() + " is not writable"), std::string::npos) << err;
  // The build log named is outside the cache, and there.
  const size_t at = err.find("; log ");
  ASSERT_NE(at, std::string::npos) << err;
  const std::string log = err.substr(at + 6, err.find(')', at) - at - 6);
  EXPECT_EQ(log.rfind(dir.string(), 0), std::string::npos) << log;
  EXPECT_TRUE(fs::is_regular_file(log)) << log;
  EXPECT_NE(slurp(log).find("error"), std::string::npos) << log;
  EXPECT_NE(err.find("generated code is built in " + fs::path(log).parent_path().string()), std::string::npos) << err;
  fs::remove(log);  // so that the process's exit removes that directory
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
