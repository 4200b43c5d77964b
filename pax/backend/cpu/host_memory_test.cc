// cgroup memory limits from fake cgroup trees (v2, v1, nested limits, no
// limit), the machine's own figure, and byte formatting.
#include "pax/backend/cpu/host_memory.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

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

}  // namespace
}  // namespace pax::cpu
