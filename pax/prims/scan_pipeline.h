// A scan whose body gathers or reduces over the processes, run so that its
// collectives overlap the loop's other iterations (a Repeat of fully
// sharded layers: each layer gathers its weights, and its backward pass
// reduce-scatters their gradients).
//
// The body (after the compiler's passes) is split in three programs:
//   fetch   (consts, x_t) -> gathered_t: the all_gathers that read no carry,
//           with the casts and reshapes that prepare their operands;
//   main    (consts, carry, x_t, gathered_t) -> (carry', ys_t, pre_t): the rest;
//   finish  (pre_t) -> the ys outputs that end in reductions (psum_scatter,
//           psum, pmax, pmin, and casts or reshapes after them).
// Iteration t + 1's fetch runs on the communication thread
// (interp/collective_thread.h) while iteration t's main computes, and
// iteration t's finish runs there while iteration t + 1 computes: a layer's
// weights arrive while the previous layer computes, and its gradients are
// reduced while the next one's backward pass runs. At most two iterations'
// gathered weights are alive at once. Every process splits the same body the
// same way and starts the same collectives in the same order.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "pax/core/array.h"
#include "pax/ir/executable.h"

namespace pax::cf {

struct ScanPipeline {
  std::shared_ptr<Executable> fetch;  // nullptr: nothing to fetch ahead
  std::shared_ptr<Executable> main;
  std::shared_ptr<Executable> finish;  // nullptr: nothing to finish behind
  // Per ys output of the body: its position among main's outputs after the
  // carries, or -1 - k for finish's output k.
  std::vector<int64_t> ys_from;
  size_t main_ys = 0;  // ys outputs main returns (then finish's operands)
};

// The split of `body` (whose inputs are num_consts constants, num_carry
// carries, then the xs rows), cached while the body exists; nullptr when no
// collective of the body can move out of its iteration. Deterministic.
std::shared_ptr<const ScanPipeline> scan_pipeline(const std::shared_ptr<const Program>& body, int64_t num_consts,
                                                  int64_t num_carry);

// Runs the scan as described above. Operands [consts, init, xs]; returns
// [carry, ys] (and the stacked carries that entered each iteration when
// `save_carries`), as scan's impl does.
std::vector<Array> run_scan_pipeline(const ScanPipeline& pipeline, std::span<const Array> consts,
                                     std::span<const Array> init, std::span<const Array> xs, int64_t length,
                                     bool reverse, bool save_carries);

}  // namespace pax::cf
