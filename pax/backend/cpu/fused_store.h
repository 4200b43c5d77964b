// Non-temporal stores for the results of large fused loops: written once per
// block and not read again soon, they go to memory without first reading the
// destination lines into the cache (which would add a third of the traffic).
#pragma once

#include <cstddef>

namespace pax::cpu {

// Copies `bytes` from src to dst (64-byte aligned), bypassing the cache.
void stream_copy(void* dst, const void* src, size_t bytes);
// Orders the streamed stores of this thread before later stores and reads.
void stream_fence();

}  // namespace pax::cpu
