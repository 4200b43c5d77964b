// The dimension numbers of gather and scatter_add (XLA's, without batching
// dims; the index vector is the last axis of `indices`) read from their
// Params: the shape rules (indexing.cc) validate them, the backends' kernels
// follow them.
#pragma once

#include <cstdint>
#include <vector>

#include "pax/ir/params.h"

namespace pax {

struct GatherSpec {
  std::vector<int64_t> offset_dims;           // output axes holding the slice axes
  std::vector<int64_t> collapsed_slice_dims;  // operand axes (slice size 1) left out of the output
  std::vector<int64_t> start_index_map;       // operand axis of each index-vector component
  std::vector<int64_t> slice_sizes;           // one per operand axis
  bool fill = false;                          // out-of-range slices become fill_value (else clamp)
  double fill_value = 0.0;
};

struct ScatterSpec {
  std::vector<int64_t> update_window_dims;            // updates axes holding the window
  std::vector<int64_t> inserted_window_dims;          // operand axes (window size 1) absent from updates
  std::vector<int64_t> scatter_dims_to_operand_dims;  // operand axis of each index-vector component
};

// Throws pax::Error for a `mode` other than "clip" (the default) or "fill".
GatherSpec gather_spec(const Params& p);
ScatterSpec scatter_spec(const Params& p);

}  // namespace pax
