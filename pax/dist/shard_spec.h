// How one array of a sharded train state is split over processes (fully
// sharded data parallelism, tensor parallelism): along one dimension into
// `count` equal blocks, of which this process holds block `index`; or
// replicated (every process holds the whole array). A pipeline stage's
// layers add an outer split along another dimension (the stack's repeat
// axis), each of whose blocks is split as above. The checkpoint records the global shape and the
// split, so that a restore with another process count or mesh can read just
// the block it needs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "pax/core/error.h"
#include "pax/core/shape.h"

namespace pax::dist {

struct ShardSpec {
  Shape global;       // the whole array's shape
  int64_t dim = -1;   // the split dimension; -1: replicated
  int64_t count = 1;  // blocks along dim (divides global[dim])
  int64_t index = 0;  // this process's block, 0..count-1
  // The mesh axes the blocks are split over, outer first: block index is
  // row-major over them ({"mdl", "data"}: mdl's blocks, each split over
  // data). For gathering the whole array; a checkpoint does not record it.
  std::vector<std::string> axes = {};
  // The outer split (-1: none; only beside a split along `dim`):
  // outer_count blocks along outer_dim over the mesh axis outer_axis, this
  // process's outer_index. Blocks are numbered outer first: block() =
  // outer_index * count + index, of blocks() = outer_count * count.
  int64_t outer_dim = -1;
  int64_t outer_count = 1;
  int64_t outer_index = 0;
  std::string outer_axis = {};

  bool replicated() const { return dim < 0 || count == 1; }
  int64_t blocks() const { return replicated() ? 1 : outer_count * count; }
  int64_t block() const { return replicated() ? 0 : outer_index * count + index; }
  // The shape of this process's block.
  Shape local() const {
    if (replicated()) return global;
    Shape s = global;
    s[dim] /= count;
    if (outer_dim >= 0) s[outer_dim] /= outer_count;
    return s;
  }
  // [begin, end) of this process's block along dim (split arrays only).
  int64_t begin() const { return index * (global[dim] / count); }
  int64_t end() const { return (index + 1) * (global[dim] / count); }
  // Throws pax::Error naming `what` when the split does not fit the shape.
  void check(const std::string& what) const {
    if (replicated()) return;
    PAX_CHECK(dim < global.rank() && count > 0 && index >= 0 && index < count && global[dim] % count == 0, what,
              ": cannot split ", global, " along dimension ", dim, " into ", count, " blocks (block ", index, ")");
    if (outer_dim < 0) return;
    PAX_CHECK(outer_dim < global.rank() && outer_dim != dim && outer_count > 0 && outer_index >= 0 &&
                  outer_index < outer_count && global[outer_dim] % outer_count == 0,
              what, ": cannot split ", global, " along dimension ", outer_dim, " into ", outer_count,
              " outer blocks (block ", outer_index, ") beside ", count, " along dimension ", dim);
  }
};

// Specs by tree path ("params/ff/w", "opt_state/..."); a path not listed is replicated.
using ShardSpecs = std::map<std::string, ShardSpec>;

}  // namespace pax::dist
