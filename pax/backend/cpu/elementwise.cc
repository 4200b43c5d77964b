// Multi-threaded wrappers around the contiguous elementwise kernels.
#include "pax/backend/cpu/elementwise.h"
#include "pax/core/parallel.h"

namespace pax::cpu {

void convert_parallel(DType from, const void* x, DType to, void* y, int64_t n) {
  const int64_t wi = int64_t(itemsize(from)), wo = int64_t(itemsize(to));
  parallel_for(n, grain_for(wi + wo), [&](int64_t b, int64_t e) {
    convert(from, static_cast<const char*>(x) + b * wi, to, static_cast<char*>(y) + b * wo, size_t(e - b));
  });
}

}  // namespace pax::cpu
