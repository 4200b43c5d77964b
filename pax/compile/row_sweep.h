// Row sweeps (fusion.h, RowSweep): finds the runs of fused loops over the
// same rows that may run one tile of rows at a time, such as a softmax's
// max, exp-and-sum and division loops, or its backward's two loops.
#pragma once

#include "pax/compile/fusion.h"
#include "pax/ir/jaxpr.h"

namespace pax {

// Records the row sweeps of `schedule` in schedule.sweeps. A sweep starts at
// a loop that ends in a reduction of whole rows (of at most
// cpu::kReduceRowBlock elements, accumulated in the value's own dtype), and
// takes the following loops over the same rows (rows x row_len elements, or
// one element per row) and reshapes as long as every value they read from
// an earlier loop of the sweep is read for the same row only. Loops of sin /
// cos (whose kernels look at windows of 512 elements) end a sweep. A sweep
// has two loops or more; stores that a later loop of the sweep reads are no
// longer streamed past the cache.
void find_row_sweeps(const Jaxpr& jaxpr, Schedule& schedule);

// Whether a loop view (dims / strides over rows x row_len elements) reads
// element i of the loop at element i / row_len of its input.
bool is_row_broadcast(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, int64_t rows,
                      int64_t row_len);

}  // namespace pax
