// Row sweeps (fusion.h, RowSweep): finds the runs of fused loops over the
// same rows that may run one tile of rows at a time, such as a softmax's
// max, exp-and-sum and division loops, or its backward's two loops.
#pragma once

#include "pax/compile/lowering_target.h"
#include "pax/compile/fusion.h"
#include "pax/ir/jaxpr.h"

namespace pax {

// Records the row sweeps of `schedule` in schedule.sweeps. A sweep starts at
// a loop that ends in a reduction of whole rows (that `target` can reduce a
// tile at a time: LoweringTarget::row_reduction_in_sweep), and takes the following
// loops over the same rows (rows x row_len elements, or one element per row)
// and reshapes as long as every value they read from an earlier loop of the
// sweep is read for the same row only. A loop the backend cannot cut into
// tiles (LoweringTarget::tileable_loop) ends a sweep. A sweep has two loops or
// more; stores that a later loop of the sweep reads are marked to stay in
// the cache (FusedStore::keep_in_cache).
void find_row_sweeps(const Jaxpr& jaxpr, StepSchedule& schedule, const LoweringTarget& target);

// Whether a loop view (dims / strides over rows x row_len elements) reads
// element i of the loop at element i / row_len of its input.
bool is_row_broadcast(const std::vector<int64_t>& dims, const std::vector<int64_t>& strides, int64_t rows,
                      int64_t row_len);

}  // namespace pax
