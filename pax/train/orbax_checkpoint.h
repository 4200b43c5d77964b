// Reading checkpoints that Orbax and Pax wrote: a PyTree of arrays as
// orbax-checkpoint saves it (its _METADATA tree, each array a zarr v2 array
// in an OCDBT database, Orbax's default, or in a directory of its own), and
// the per-array zarr directories of older Pax checkpoints (one directory per
// leaf, named by its path joined with '.': mdl_vars.params.lm.softmax.w).
//
//   Tree state = train::read_orbax_checkpoint("ckpt/checkpoint_00001000");
//
// zarr v2 arrays: little-endian numbers and bfloat16 in C order, chunks
// compressed with zstd, gzip or zlib or not at all; a missing chunk is the
// fill value. What is read is refused by name where it is anything else
// (big-endian, Fortran order, blosc, zarr v3, strings).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pax/core/tree.h"

namespace pax::train {

// Key-value access to a checkpoint's storage: the files under a directory
// ("a.b/.zarray" is the file a.b/.zarray), or an OCDBT database
// (pax/train/ocdbt.h).
// The largest file of a checkpoint that is read whole (a manifest, a zarr
// chunk, .zarray).
inline constexpr uint64_t kMaxCheckpointFileBytes = uint64_t(1) << 36;

class KeyValueReader {
 public:
  virtual ~KeyValueReader() = default;
  // The value of `key`; nullopt when there is none.
  virtual std::optional<std::string> read(const std::string& key) const = 0;
  // Every key, sorted.
  virtual std::vector<std::string> keys() const = 0;
  // What the store is, for messages ("OCDBT database 'ckpt/'").
  virtual std::string description() const = 0;
};

std::unique_ptr<KeyValueReader> open_directory_store(const std::string& dir);

// The zarr v2 array `name` of `store` (name/.zarray and its chunks), on the
// host. pax::Error naming the array and the store for anything unreadable.
Array read_zarr_array(const KeyValueReader& store, const std::string& name);

// Whether `dir` holds a checkpoint read_orbax_checkpoint reads (an Orbax
// PyTree directory, or per-array zarr directories).
bool is_orbax_checkpoint(const std::string& dir);

// The tree `dir` holds: nested dicts (lists where Orbax's metadata says
// sequence) of host arrays. `dir` may also be an Orbax CheckpointManager's
// directory (its highest numbered step is read) or a step directory with
// one item (e.g. default/ or state/). Leaves that are not arrays (strings,
// None) are left out.
Tree read_orbax_checkpoint(const std::string& dir);

}  // namespace pax::train
