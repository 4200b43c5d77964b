// cgroup memory limits from fake cgroup trees (v2, v1, nested limits, no
// limit), the machine's own figure, the limit an out-of-memory error names
// (RLIMIT_AS, a cgroup's, the machine's memory), and that error for an
// operator new failing on a parallel_for worker under a lowered RLIMIT_AS.
#include "pax/backend/cpu/host_memory.h"

#include <gtest/gtest.h>
#include <omp.h>
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "pax/core/buffer.h"
#include "pax/core/parallel.h"
#include "pax/testing/checkpoint_testing.h"

namespace pax::cpu {
namespace {

namespace stdfs = std::filesystem;

void write(const stdfs::path& path, const std::string& text) {
  stdfs::create_directories(path.parent_path());
  std::ofstream(path) << text;
}

// A cgroup v2 directory: memory.max ("max" or bytes) and memory.current.
void write_v2(const stdfs::path& dir, const std::string& max, const std::string& current) {
  write(dir / "memory.max", max + "\n");
  write(dir / "memory.current", current + "\n");
}

TEST(HostMemory, CgroupV2LimitMinusWorkingSet) {
  testing::TempDir root;
  const stdfs::path job = stdfs::path(root.path()) / "slurm/job_7";
  write_v2(job, "8000000000", "3000000000");
  write(job / "memory.stat", "anon 2000000000\nfile 1000000000\ninactive_file 1000000000\n");
  write(stdfs::path(root.path()) / "slurm/memory.max", "max\n");
  const auto m = cgroup_memory_headroom("0::/slurm/job_7\n", root.path());
  ASSERT_TRUE(m.has_value());
  // 8 GB - (3 GB - 1 GB of reclaimable page cache).
  EXPECT_DOUBLE_EQ(m->bytes, 6e9);
  EXPECT_NE(m->source.find("cgroup /slurm/job_7 (memory.max 8.0 GB, 2.0 GB in use)"), std::string::npos) << m->source;
}

TEST(HostMemory, TheTightestAncestorWins) {
  testing::TempDir root;
  const stdfs::path parent = stdfs::path(root.path()) / "a", child = parent / "b";
  write_v2(child, "max", "100");
  write_v2(parent, "1000000", "400000");
  const auto m = cgroup_memory_headroom("0::/a/b\n", root.path());
  ASSERT_TRUE(m.has_value());
  EXPECT_DOUBLE_EQ(m->bytes, 600000);
  EXPECT_NE(m->source.find("cgroup /a "), std::string::npos) << m->source;
}

TEST(HostMemory, CgroupV1MemoryController) {
  testing::TempDir root;
  const stdfs::path dir = stdfs::path(root.path()) / "memory/docker/abc";
  write(dir / "memory.limit_in_bytes", "2147483648\n");
  write(dir / "memory.usage_in_bytes", "1073741824\n");
  write(dir / "memory.stat", "cache 0\ntotal_inactive_file 536870912\n");
  // v1's "no limit" at the root: a huge page-rounded number.
  write(stdfs::path(root.path()) / "memory/memory.limit_in_bytes", "9223372036854771712\n");
  const auto m = cgroup_memory_headroom("12:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/\n", root.path());
  ASSERT_TRUE(m.has_value());
  EXPECT_DOUBLE_EQ(m->bytes, 2147483648.0 - (1073741824.0 - 536870912.0));
}

TEST(HostMemory, NoLimitAnywhere) {
  testing::TempDir root;
  write(stdfs::path(root.path()) / "user/memory.max", "max\n");
  write(stdfs::path(root.path()) / "memory/memory.limit_in_bytes", "9223372036854771712\n");
  EXPECT_FALSE(cgroup_memory_headroom("0::/user\n", root.path()).has_value());
  EXPECT_FALSE(cgroup_memory_headroom("4:memory:/\n", root.path()).has_value());
  EXPECT_FALSE(cgroup_memory_headroom("", root.path()).has_value());
  EXPECT_FALSE(cgroup_memory_headroom("garbage\n0::/missing\n", root.path()).has_value());
}

TEST(HostMemory, OverTheLimitLeavesNothing) {
  testing::TempDir root;
  write_v2(root.path(), "1000", "5000");
  const auto m = cgroup_memory_headroom("0::/\n", root.path());
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(m->bytes, 0);
}

TEST(HostMemory, ThisMachine) {
  const auto m = available_memory();
  ASSERT_TRUE(m.has_value());  // Linux has /proc/meminfo
  EXPECT_GT(m->bytes, 0);
  EXPECT_FALSE(m->source.empty());
  EXPECT_EQ(available_memory_bytes(), m->bytes);
}

TEST(HostMemory, CgroupHeadroomKeepsItsLimit) {
  testing::TempDir root;
  write_v2(root.path(), "1000000", "400000");
  const auto m = cgroup_memory_headroom("0::/\n", root.path());
  ASSERT_TRUE(m.has_value());
  EXPECT_DOUBLE_EQ(m->limit, 1e6);
}

TEST(MemoryLimit, AnAddressSpaceLimitBelowTheMemoryIsTheOneNamed) {
  MemoryLimits m;
  m.address_space_limit = 150e6;
  m.address_space_used = 141.2e6;
  m.physical = 64e9;
  m.available = 1.2e9;
  m.cgroup = AvailableMemory{2e9, "the memory limit of cgroup /a (memory.max 8.0 GB, 6.0 GB in use)", 8e9};
  EXPECT_EQ(memory_limit_description(m),
            "the address-space limit (ulimit -v / RLIMIT_AS) of 150.0 MB (141.2 MB mapped)");
  m.address_space_used.reset();
  EXPECT_EQ(memory_limit_description(m), "the address-space limit (ulimit -v / RLIMIT_AS) of 150.0 MB");
  // Above the cgroup's limit, the cgroup's applies first.
  m.address_space_limit = 10e9;
  EXPECT_EQ(memory_limit_description(m), "the memory limit of cgroup /a (memory.max 8.0 GB, 6.0 GB in use)");
}

TEST(MemoryLimit, ACgroupLimitBelowTheMachinesMemory) {
  MemoryLimits m;
  m.physical = 64e9;
  m.cgroup = AvailableMemory{2e9, "the memory limit of cgroup /a (memory.max 8.0 GB, 6.0 GB in use)", 8e9};
  EXPECT_EQ(memory_limit_description(m), "the memory limit of cgroup /a (memory.max 8.0 GB, 6.0 GB in use)");
  // A cgroup limit above the machine's memory limits nothing.
  m.cgroup->limit = 128e9;
  m.available = 1.2e9;
  EXPECT_EQ(memory_limit_description(m), "the machine's 64.0 GB of physical memory (1.2 GB available)");
}

TEST(MemoryLimit, TheMachinesMemoryOrNothing) {
  MemoryLimits m;
  EXPECT_EQ(memory_limit_description(m), "");
  m.address_space_limit = 150e6;
  EXPECT_EQ(memory_limit_description(m), "the address-space limit (ulimit -v / RLIMIT_AS) of 150.0 MB");
  m.address_space_limit = 128e9;
  m.physical = 64e9;
  EXPECT_EQ(memory_limit_description(m), "the machine's 64.0 GB of physical memory");
}

TEST(MemoryLimit, ThisProcessIsInstalledForFailedBuffers) {
  EXPECT_NE(memory_limit_description(), "");  // Linux has /proc/meminfo
  EXPECT_EQ(describe_memory_limit().substr(0, 4), "the ");
}

// In a child process (re-executed, so OpenMP starts afresh): RLIMIT_AS is
// lowered to 256 MB above what is mapped, a chunk on a worker thread asks for
// 1 GB, and the error names that size, the caller's purpose and the limit.
// Exits 0 when it does; prints the message either way.
void fail_on_a_worker_under_an_address_space_limit() {
  omp_set_num_threads(2);
  parallel_for(2, 1, [](int64_t, int64_t) {});  // the worker and its stack exist before the limit
  const std::optional<double> mapped = memory_limits().address_space_used;
  if (!mapped) std::exit(3);
  const rlimit limit{rlim_t(*mapped + 256e6), rlim_t(*mapped + 256e6)};
  if (setrlimit(RLIMIT_AS, &limit) != 0) std::exit(4);
  std::string message;
  try {
    const AllocationPurpose purpose("tokenizing the documents");
    parallel_for(2, 1, [](int64_t, int64_t) {
      if (omp_get_thread_num() != 1) return;
      std::vector<char> big(size_t(1) << 30);
      std::printf("%d\n", int(big[12345]));  // not optimised away
    });
    std::exit(5);
  } catch (const std::bad_alloc&) {
    message = out_of_memory_message();
  }
  std::fprintf(stderr, "%s\n", message.c_str());
  const bool named = message.find("allocating 1.1 GB for tokenizing the documents failed") != std::string::npos &&
                     message.find("under the address-space limit (ulimit -v / RLIMIT_AS) of " +
                                  format_bytes(double(limit.rlim_cur))) != std::string::npos;
  std::exit(named ? 0 : 6);
}

TEST(MemoryLimit, ABadAllocOnAWorkerUnderRlimitAsNamesSizePurposeAndLimit) {
  const std::string style = GTEST_FLAG_GET(death_test_style);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(fail_on_a_worker_under_an_address_space_limit(), ::testing::ExitedWithCode(0),
              "out of memory: allocating 1.1 GB for tokenizing the documents failed under the address-space limit");
  GTEST_FLAG_SET(death_test_style, style);
}

}  // namespace
}  // namespace pax::cpu
