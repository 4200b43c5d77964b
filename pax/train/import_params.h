// A model's params from a checkpoint another framework wrote (train.init_from):
// a Flax msgpack file (flax.serialization, paxcc export's), an Orbax PyTree
// checkpoint (OCDBT or zarr directories) or an older Pax checkpoint's
// per-array zarr directories (pax/train/orbax_checkpoint.h).
//
// Names. paxcc's layers carry Praxis's names (lm/transformer/x_layers_0/
// self_attention/combined_qkv/w), so a Praxis or Flax model's params map one
// to one once the state around them is taken off:
//
//   the checkpoint's tree                              params taken from
//   {mdl_vars: {params: P, ...}, opt_states, step}     P   (Pax's TrainState)
//   {params: P, opt_state, step} / {params: P}         P   (Flax's TrainState and
//                                                           variables; paxcc export)
//   P (anything else)                                  P
//
// and a leaf path joins keys with '/' (Pax's older directory names join them
// with '.': mdl_vars.params.lm.softmax.w is mdl_vars/params/lm/softmax/w).
#pragma once

#include <map>
#include <string>

#include "pax/core/tree.h"

namespace pax::train {

// The params subtree of `tree` by the table above.
Tree params_subtree(const Tree& tree);

// The params in `path` in the structure of `like` (a model's params): every
// leaf of `like` by its path, converted to its dtype. pax::Error listing the
// paths of `like` the checkpoint lacks, the checkpoint's paths `like` has
// not, and the shapes that differ. `whole_shapes` gives, by path, the whole
// shape of a leaf of which `like` holds a block (a sharded model): such a
// leaf comes back whole.
Tree params_from_checkpoint(const std::string& path, const Tree& like,
                            const std::map<std::string, Shape>& whole_shapes = {});

}  // namespace pax::train
