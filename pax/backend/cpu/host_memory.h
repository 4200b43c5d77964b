// The memory this process can still use: the machine's MemAvailable, lowered
// by the memory limit of the process's cgroup (v2 memory.max or v1
// memory.limit_in_bytes, at every level up to the hierarchy's root), as a
// container or a batch scheduler sets it.
#pragma once

#include <optional>
#include <string>

namespace pax::cpu {

struct AvailableMemory {
  double bytes = 0;
  // Where the figure comes from: "MemAvailable of /proc/meminfo" or
  // "the memory limit of cgroup /a/b (memory.max 8.0 GB, 1.2 GB in use)".
  std::string source;
};

// nullopt where /proc/meminfo cannot be read.
std::optional<AvailableMemory> available_memory();
inline std::optional<double> available_memory_bytes() {
  const std::optional<AvailableMemory> m = available_memory();
  return m ? std::optional<double>(m->bytes) : std::nullopt;
}

// What a cgroup limit leaves: for the process whose /proc/self/cgroup reads
// `proc_self_cgroup`, with the cgroup file systems mounted under
// `cgroup_root` (v2 at cgroup_root itself or cgroup_root/unified, v1 at
// cgroup_root/memory), the least of limit - (usage - inactive file pages)
// over the process's cgroup and its ancestors; nullopt where none has a limit.
std::optional<AvailableMemory> cgroup_memory_headroom(const std::string& proc_self_cgroup,
                                                      const std::string& cgroup_root);

}  // namespace pax::cpu
