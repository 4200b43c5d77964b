// The memory this process can still use: the machine's MemAvailable, lowered
// by the memory limit of the process's cgroup (v2 memory.max or v1
// memory.limit_in_bytes, at every level up to the hierarchy's root), as a
// container or a batch scheduler sets it; the limit that applies to this
// process (RLIMIT_AS, a cgroup's, or the machine's memory); and the error for
// an allocation that failed.
#pragma once

#include <optional>
#include <string>

namespace pax::cpu {

struct AvailableMemory {
  double bytes = 0;
  // Where the figure comes from: "MemAvailable of /proc/meminfo" or
  // "the memory limit of cgroup /a/b (memory.max 8.0 GB, 1.2 GB in use)".
  std::string source;
  // The limit the figure is under (a cgroup's memory.max); 0 for MemAvailable.
  double limit = 0;
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

// What memory_limit_description() weighs; nullopt where not known or unset.
struct MemoryLimits {
  std::optional<double> address_space_limit;  // RLIMIT_AS (soft), bytes
  std::optional<double> address_space_used;   // VmSize of /proc/self/status
  std::optional<AvailableMemory> cgroup;      // cgroup_memory_headroom()
  std::optional<double> physical;             // MemTotal of /proc/meminfo
  std::optional<double> available;            // MemAvailable of /proc/meminfo
};
MemoryLimits memory_limits();

// The limit under which this process's allocations fail first, as a phrase:
// "the address-space limit (ulimit -v / RLIMIT_AS) of 150.0 MB (141.2 MB
// mapped)" where RLIMIT_AS is below both of the others, else "the memory
// limit of cgroup /a (memory.max 8.0 GB, 7.9 GB in use)" where a cgroup's
// is below the machine's memory, else "the machine's 64.0 GB of physical
// memory (1.2 GB available)"; "" where nothing is known. Installed at load
// as pax::describe_memory_limit() (core/buffer.h), which a failed Buffer uses.
std::string memory_limit_description();
std::string memory_limit_description(const MemoryLimits& limits);

// The error for a std::bad_alloc caught where it ends a program: the size
// and purpose of the failed operator new (pax::failed_allocation_bytes,
// failed_allocation_purpose) and the limit that applied, e.g. "out of memory:
// allocating 120.0 MB for training step 3 failed under the address-space
// limit (ulimit -v / RLIMIT_AS) of 150.0 MB (141.2 MB mapped)".
std::string out_of_memory_message();

}  // namespace pax::cpu
