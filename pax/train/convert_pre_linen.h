// flax.training.checkpoints.convert_pre_linen: renames the submodules of a
// checkpoint tree saved with pre-Linen naming, where submodules were numbered
// in one sequence whatever their class ({'Conv_0', 'Dense_1'}), to Linen's,
// which numbers each class on its own ({'Conv_0', 'Dense_0'}).
//
//   Tree params = convert_pre_linen(restore_checkpoint(path, Tree())["params"]);
#pragma once

#include "pax/core/tree.h"

namespace pax::train {

// At every dict level, the keys are taken in flax's natural order
// (natural_sort: "Dense_2" before "Dense_10") and each key "<module>_<digits>"
// becomes "<module>_<n>", n counting the keys of that <module> at this level
// from 0; other keys are kept. The result's keys are in that order, and every
// value is converted the same way. Leaves, lists and None are returned as they
// are. A tree already in Linen naming comes back unchanged, so any loaded
// checkpoint can go through it. Collections (batch_stats) follow the same
// naming and convert the same way once nested like params.
Tree convert_pre_linen(const Tree& params);

}  // namespace pax::train
