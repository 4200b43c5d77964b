// parallel_for over OpenMP threads (the runtime oneDNN uses too, so the two
// never oversubscribe). Chunk boundaries depend only on the problem size and
// the grain, never on the thread count, so per-chunk partial results (e.g.
// reduction partial sums) are bit-identical whatever the number of threads.
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <exception>
#include <utility>

namespace pax {

class AllocationPurpose;

namespace detail {
// The AllocationPurpose open on this thread (pax/core/buffer.h). parallel_for
// opens its caller's on the workers too, so that an allocation failing there
// names what the caller was doing.
const AllocationPurpose*& thread_allocation_purpose();
}  // namespace detail

namespace detail {

// The chunks of [0, n) over the OpenMP threads, statically (contiguous
// ranges of chunks per thread) or dynamically (each thread takes the next
// chunk when it is done with its last). See parallel_for.
template <bool kDynamic, class F>
void run_chunks(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t chunks = (n + grain - 1) / grain;
  if (chunks == 1 || omp_in_parallel() || omp_get_max_threads() == 1) {
    for (int64_t c = 0; c < chunks; ++c) f(c * grain, std::min(n, (c + 1) * grain));
    return;
  }
  const AllocationPurpose* const purpose = detail::thread_allocation_purpose();
  std::exception_ptr error;
  std::atomic<bool> failed{false};
  auto run = [&](int64_t c) {
    if (failed.load(std::memory_order_relaxed)) return;
    try {
      f(c * grain, std::min(n, (c + 1) * grain));
    } catch (...) {
#pragma omp critical(pax_parallel_for_error)
      {
        if (!error) error = std::current_exception();
      }
      failed.store(true, std::memory_order_relaxed);
    }
  };
#pragma omp parallel
  {
    const AllocationPurpose*& thread_purpose = detail::thread_allocation_purpose();
    const AllocationPurpose* const own_purpose = thread_purpose;
    thread_purpose = purpose;
    if constexpr (kDynamic) {
#pragma omp for schedule(dynamic, 1) nowait
      for (int64_t c = 0; c < chunks; ++c) run(c);
    } else {
#pragma omp for schedule(static) nowait
      for (int64_t c = 0; c < chunks; ++c) run(c);
    }
    thread_purpose = own_purpose;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace detail

// Calls f(begin, end) for consecutive chunks of [0, n) of `grain` items each
// (the last may be shorter), in parallel when there is more than one chunk,
// each thread taking a contiguous range of chunks.
// An exception thrown by any chunk on any thread reaches the caller: an
// exception may not leave an OpenMP region (it would end the process), so the
// first one is kept, the chunks already running finish, those not yet started
// are skipped, and it is rethrown here once every thread is done.
template <class F>
void parallel_for(int64_t n, int64_t grain, F&& f) {
  detail::run_chunks<false>(n, grain, std::forward<F>(f));
}

// As parallel_for, but each thread takes the next chunk when it is done with
// its last: for chunks of uneven or unpredictable cost (a thread slowed by
// another process on its core no longer holds the others back). Chunks are
// handed out in the order of their index, so costly ones put early leave
// the cheap ones to even out the end. Which thread runs a chunk varies from
// call to call, so f's results may depend only on the chunk.
template <class F>
void parallel_for_dynamic(int64_t n, int64_t grain, F&& f) {
  detail::run_chunks<true>(n, grain, std::forward<F>(f));
}

// a / b rounded up, for a >= 0 and b > 0: the number of chunks of b that cover a.
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Grain (in elements) that gives about `bytes_per_chunk` of memory traffic.
inline int64_t grain_for(int64_t bytes_per_element, int64_t bytes_per_chunk = 256 << 10) {
  return std::max<int64_t>(1, bytes_per_chunk / std::max<int64_t>(1, bytes_per_element));
}

}  // namespace pax
