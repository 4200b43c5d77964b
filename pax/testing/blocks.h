// Blocks of split arrays, for the tests of fully sharded data, tensor and
// pipeline parallelism (pax/nn/*_test.cc): the block a process holds,
// found from its shape.
#pragma once

#include <cstdint>

#include "pax/core/array.h"
#include "pax/ops/numpy.h"

namespace pax::testing {

// Block `index` of `full` along the one dimension where `block`'s shape
// differs from it (blocks of equal size); `full` itself where none does.
inline Array block_of(const Array& full, const Array& block, int64_t index) {
  for (int64_t d = 0; d < full.ndim(); ++d)
    if (full.dim(d) != block.dim(d)) return slice_along(full, d, index * block.dim(d), (index + 1) * block.dim(d));
  return full;
}

}  // namespace pax::testing
