// Flax's msgpack serialization (flax.serialization.msgpack_serialize /
// msgpack_restore) of a tree of arrays: nested maps with sorted string keys,
// each array a msgpack extension of type 1 whose payload is the msgpack
// array [shape, dtype name, raw little-endian bytes] (type 3, a NumPy scalar,
// is read as a 0-d array). A tree paxcc writes is, byte for byte, what Flax
// writes for the same dict of NumPy arrays, and what Flax writes reads back.
//
//   write_flax_msgpack("params.msgpack", state.to_tree()["params"]);
//   Tree params = read_flax_msgpack("params.msgpack");
//
// An array of more than 2^30 bytes (flax.serialization.MAX_CHUNK_SIZE) is
// written as Flax writes it, a dict {"__msgpack_chunked_array__": true,
// "shape": {"0": d0, ..}, "chunks": {"0": flat piece, ..}} (one msgpack value
// holds under 2 GiB), and such dicts are read back as the array.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "pax/core/tree.h"

namespace pax::train {

// Flax's MAX_CHUNK_SIZE: arrays above it are written in chunks of it.
inline constexpr size_t kFlaxMaxChunkBytes = size_t(1) << 30;

// The bytes of `tree` (dicts and lists of arrays, None as nil; dict keys
// sorted). max_chunk_bytes is Flax's MAX_CHUNK_SIZE (tests set it small).
std::string to_flax_msgpack(const Tree& tree, size_t max_chunk_bytes = kFlaxMaxChunkBytes);

// The tree of `bytes`: maps become dicts, msgpack arrays lists, arrays
// Arrays on the host, nil None, plain numbers and bools 0-d arrays (i64,
// f64, bool).
// pax::Error naming `what` when the bytes are not such a serialization.
Tree from_flax_msgpack(std::string_view bytes, const std::string& what = "msgpack bytes");

// to_flax_msgpack into a file, written atomically; from_flax_msgpack of one.
void write_flax_msgpack(const std::string& path, const Tree& tree);
Tree read_flax_msgpack(const std::string& path);

// The latest committed checkpoint under `checkpoint_dir` (a job's
// checkpoints/) as Flax msgpack at `out`: its train state's params, or the
// whole state (step, params, opt_state) with `with_opt_state`. Returns the
// step exported. pax::Error when there is no checkpoint.
int64_t export_flax_checkpoint(const std::string& checkpoint_dir, const std::string& out, bool with_opt_state);

}  // namespace pax::train
