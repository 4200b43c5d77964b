// Memory planning for a schedule: where every materialised value lives.
//
// Values that share bytes (reshape, squeeze, expand_dims, bitcast results)
// share one storage. A storage is an argument, a constant, a slice of one
// arena (intermediates), or a buffer of its own: program outputs (which
// escape the call) and values that impl rules receive or return as Arrays.
//
// The arena is planned statically from liveness over the schedule: each
// intermediate occupies [its step, its last reader's step], and storages
// whose lifetimes do not overlap share addresses (greedy by size, then
// lowest fitting offset). A fused loop's output may take over the arena slice
// of a same-sized input that dies at that loop and is read contiguously (in
// place). Donated arguments: an output of the same shape and dtype, written
// once the argument has no other reader (or in place by a fused loop), may
// be written into the argument's buffer when the caller held the only handle.
// Row sweeps (fusion.h): every value a sweep touches lives through the whole
// sweep, and the values of whole rows only its steps read are sweep-local.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "pax/ir/executable.h"
#include "pax/compile/fusion.h"
#include "pax/ir/jaxpr.h"

namespace pax {

struct Storage {
  // sweep_local: a value of whole rows that a row sweep writes and only its
  // own steps read; it lives in the sweep's per-thread tile buffer
  // (cpu::run_row_sweep) and takes no bytes here.
  enum class Kind : uint8_t { argument, constant, arena, buffer, output, sweep_local };
  Kind kind = Kind::arena;
  Var var = -1;       // the value that defines it
  int index = -1;     // argument / constant index
  size_t offset = 0;  // arena offset
  size_t nbytes = 0;
  int def_step = -1;   // step that writes it (-1: before the first)
  int last_step = -1;  // last step that reads it (number of steps: read by the caller)
  int donor = -1;      // output: the donated argument whose buffer it may take
};

struct MemoryPlan {
  std::vector<int> storage_of;  // per variable (-1: never materialised)
  std::vector<Storage> storages;
  std::vector<std::vector<int>> release_after;  // per step: argument / buffer storages read for the last time
  MemoryStats stats;

  std::string str() const;  // one line of figures
};

// `donate[i]`: argument i may be overwritten (CompileOptions::donate).
MemoryPlan plan_memory(const Jaxpr& jaxpr, const StepSchedule& schedule, const std::vector<bool>& donate);

}  // namespace pax
