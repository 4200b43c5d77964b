// The order of a schedule's collectives: each starts as early as its
// operands allow, so that the steps up to its first reader compute while its
// data moves (interp/collective_thread.h runs it on the communication
// thread).
//
// Reductions (psum, pmax, pmin, psum_scatter) and the one-pass steps that
// only prepare their operands (fused elementwise loops, reshapes,
// concatenation of a bucket, casts, sums) move up to just after the step that completes their
// operands: a gradient's reduction starts as soon as the backward pass has
// produced it, and the rest of the backward pass overlaps it. An all_gather
// (a sharded weight fetched for use) moves up by one use at most: it starts
// just before the first step that reads the previous all_gather's result,
// so a layer's weights arrive while the previous layer computes and no more
// than two gathered weights are alive at once on its account. Every other
// step keeps its order; all processes compute the same order, so they start
// their collectives in the same sequence.
#pragma once

#include "pax/compile/fusion.h"
#include "pax/ir/jaxpr.h"

namespace pax {

// Reorders `schedule`'s steps as above (before row sweeps are found). Does
// nothing when PAX_OVERLAP_COLLECTIVES=0 or the program has no collective.
void start_collectives_early(const Jaxpr& jaxpr, StepSchedule& schedule);

}  // namespace pax
