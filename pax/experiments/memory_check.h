// The memory check before a run allocates anything large: the parts a run
// needs (train state, input batches, a compiled step's intermediates), summed
// and compared with what the process can still use (MemAvailable, lowered by
// a cgroup limit), and refused with every figure and the fields to change.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "pax/backend/cpu/host_memory.h"
#include "pax/core/tree.h"

namespace pax::experiments {

struct MemoryNeeds {
  std::vector<std::pair<std::string, double>> parts;  // what, bytes
  std::string advice;                                 // "reduce train_input.batch_size (N) or ..."
  void add(std::string what, double bytes) { parts.emplace_back(std::move(what), bytes); }
  double total() const;
};

// Throws pax::Error when `needs` exceeds `available` (cpu::available_memory()):
// "the run needs at least 66.3 GB (train state 50.5 MB, ...) and 20.1 GB is
// available (the memory limit of cgroup /job (...)); reduce ...".
void refuse_if_short(const MemoryNeeds& needs, const cpu::AvailableMemory& available);

// Bytes of a tree's leaves (abstract ones included).
double tree_bytes(const Tree& tree);

// Abstract arrays shaped like `one_example`'s leaves (a batch of one) with
// their leading axis set to batch_size: the full batch, nothing allocated.
Tree abstract_batch(const Tree& one_example, int64_t batch_size);

}  // namespace pax::experiments
