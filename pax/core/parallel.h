// parallel_for over OpenMP threads (the runtime oneDNN uses too, so the two
// never oversubscribe). Chunk boundaries depend only on the problem size and
// the grain, never on the thread count, so per-chunk partial results (e.g.
// reduction partial sums) are bit-identical whatever the number of threads.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace pax {

// Calls f(begin, end) for consecutive chunks of [0, n) of `grain` items each
// (the last may be shorter), in parallel when there is more than one chunk.
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t chunks = (n + grain - 1) / grain;
  if (chunks == 1 || omp_in_parallel() || omp_get_max_threads() == 1) {
    for (int64_t c = 0; c < chunks; ++c) f(c * grain, std::min(n, (c + 1) * grain));
    return;
  }
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < chunks; ++c) f(c * grain, std::min(n, (c + 1) * grain));
}

// a / b rounded up, for a >= 0 and b > 0: the number of chunks of b that cover a.
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Grain (in elements) that gives about `bytes_per_chunk` of memory traffic.
inline int64_t grain_for(int64_t bytes_per_element, int64_t bytes_per_chunk = 256 << 10) {
  return std::max<int64_t>(1, bytes_per_chunk / std::max<int64_t>(1, bytes_per_element));
}

}  // namespace pax
