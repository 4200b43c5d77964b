// MemAvailable, cgroup memory limits, RLIMIT_AS and the out-of-memory error
// (see host_memory.h).
#include "pax/backend/cpu/host_memory.h"

#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <sstream>
#include <vector>

#include "pax/core/buffer.h"

namespace pax::cpu {
namespace {

// The first line of a file, or "" where it cannot be read.
std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::optional<double> number_in(const std::string& path) {
  const std::string text = first_line(path);
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  try {
    return std::stod(text);
  } catch (...) {
    return std::nullopt;
  }
}

// The value of `key` in a "key value" file (memory.stat).
double stat_value(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string k;
  double v = 0;
  while (in >> k >> v)
    if (k == key) return v;
  return 0;
}

// /a/b/c -> {/a/b/c, /a/b, /a, ""} (the last is the mount's root).
std::vector<std::string> path_and_ancestors(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  if (path == "/") path.clear();
  std::vector<std::string> out{path};
  while (!path.empty()) {
    path.erase(path.rfind('/'));
    out.push_back(path);
  }
  return out;
}

struct Layout {
  std::string mount, limit_file, usage_file, inactive_key;
  double unlimited_from;  // v1 reports "no limit" as a huge page-rounded number
};

void lower_to(std::optional<AvailableMemory>& best, const std::string& cgroup, const std::string& limit_name,
              double limit, double used) {
  const double headroom = std::max(0.0, limit - used);
  if (best && best->bytes <= headroom) return;
  best = AvailableMemory{headroom,
                         "the memory limit of cgroup " + (cgroup.empty() ? std::string("/") : cgroup) + " (" +
                             limit_name + " " + format_bytes(limit) + ", " + format_bytes(used) + " in use)",
                         limit};
}

// The value of `key` (e.g. "MemTotal:") in a "key value kB" file, in bytes.
std::optional<double> kib_value(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string k;
    double kib = 0;
    if (fields >> k >> kib && k == key) return kib * 1024;
  }
  return std::nullopt;
}

std::string own_cgroups() {
  std::ifstream in("/proc/self/cgroup");
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// pax::describe_memory_limit() is this backend's from the library's load on.
[[maybe_unused]] const bool g_describer_installed = [] {
  set_memory_limit_describer([] { return memory_limit_description(); });
  return true;
}();

}  // namespace

std::optional<AvailableMemory> cgroup_memory_headroom(const std::string& proc_self_cgroup,
                                                      const std::string& cgroup_root) {
  std::optional<AvailableMemory> best;
  std::istringstream lines(proc_self_cgroup);
  for (std::string line; std::getline(lines, line);) {
    // hierarchy-id:controllers:path; v2's line is "0::path".
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    std::vector<Layout> layouts;
    if (controllers.empty()) {
      for (const char* mount : {"", "/unified"})
        layouts.push_back({cgroup_root + mount, "memory.max", "memory.current", "inactive_file", 1e30});
    } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      layouts.push_back(
          {cgroup_root + "/memory", "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file", 1e18});
    }
    for (const Layout& l : layouts) {
      for (const std::string& cgroup : path_and_ancestors(path)) {
        const std::string dir = l.mount + cgroup;
        const std::optional<double> limit = number_in(dir + "/" + l.limit_file);  // "max": no limit
        if (!limit || *limit >= l.unlimited_from) continue;
        const double usage = number_in(dir + "/" + l.usage_file).value_or(0);
        const double used = std::max(0.0, usage - stat_value(dir + "/memory.stat", l.inactive_key));
        lower_to(best, cgroup, l.limit_file, *limit, used);
      }
    }
  }
  return best;
}

std::optional<AvailableMemory> available_memory() {
  std::optional<AvailableMemory> best;
  {
    std::ifstream in("/proc/meminfo");
    std::string key, unit;
    double kib = 0;
    while (in >> key >> kib >> unit) {
      if (key == "MemAvailable:") {
        best = AvailableMemory{kib * 1024, "MemAvailable of /proc/meminfo"};
        break;
      }
    }
  }
  if (!best) return std::nullopt;
  if (std::optional<AvailableMemory> limited = cgroup_memory_headroom(own_cgroups(), "/sys/fs/cgroup");
      limited && limited->bytes < best->bytes)
    best = limited;
  return best;
}

MemoryLimits memory_limits() {
  MemoryLimits m;
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY) m.address_space_limit = double(as.rlim_cur);
  m.address_space_used = kib_value("/proc/self/status", "VmSize:");
  m.cgroup = cgroup_memory_headroom(own_cgroups(), "/sys/fs/cgroup");
  m.physical = kib_value("/proc/meminfo", "MemTotal:");
  m.available = kib_value("/proc/meminfo", "MemAvailable:");
  return m;
}

std::string memory_limit_description(const MemoryLimits& m) {
  // The memory that pages can come from: a cgroup's limit where it is below
  // the machine's. RLIMIT_AS bounds address space, not pages, but an
  // allocation beyond it fails all the same.
  const bool cgroup_applies = m.cgroup && m.cgroup->limit > 0 && (!m.physical || m.cgroup->limit < *m.physical);
  const std::optional<double> memory = cgroup_applies ? std::optional<double>(m.cgroup->limit) : m.physical;
  if (m.address_space_limit && (!memory || *m.address_space_limit < *memory)) {
    return "the address-space limit (ulimit -v / RLIMIT_AS) of " + format_bytes(*m.address_space_limit) +
           (m.address_space_used ? " (" + format_bytes(*m.address_space_used) + " mapped)" : "");
  }
  if (cgroup_applies) return m.cgroup->source;
  if (m.physical) {
    return "the machine's " + format_bytes(*m.physical) + " of physical memory" +
           (m.available ? " (" + format_bytes(*m.available) + " available)" : "");
  }
  return "";
}

std::string memory_limit_description() { return memory_limit_description(memory_limits()); }

std::string out_of_memory_message() {
  const size_t bytes = failed_allocation_bytes();
  const std::string purpose = failed_allocation_purpose(), limit = memory_limit_description();
  return "out of memory: " + (bytes == 0 ? std::string("an allocation") : "allocating " + format_bytes(double(bytes))) +
         (purpose.empty() ? "" : " for " + purpose) + " failed" + (limit.empty() ? "" : " under " + limit);
}

}  // namespace pax::cpu
