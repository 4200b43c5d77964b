// The sim backend: a second platform for tests, on every machine. Its memory
// is host memory that host code may not touch (sim_memory.h), its work runs
// on a stream thread of its own (sim_stream.h), and its kernels, fused loops
// and executables are the CPU's, run there. A missing copy or
// synchronisation in code above the backends is then a crash or a race in
// CI, as it would be on a GPU; PAX_PLATFORMS=sim runs the suites on it.
#pragma once

#include <cstdint>

#include "pax/backend/backend.h"

namespace pax::sim {

// The sim table (see Backend).
const Backend& sim_backend();

// How many times host threads have waited for the sim stream (host reads,
// synchronize): a loop whose predicate the device reads waits once.
uint64_t host_synchronizations();

}  // namespace pax::sim
