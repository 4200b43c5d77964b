// CPU kernels of the index-driven primitives: XLA gather and scatter-add, with
// the index vector on the last axis of `indices`. The dimension numbers are
// validated by the shape rules (pax/prims/indexing.cc) before these run.
#pragma once

#include <cstdint>
#include <vector>

#include "pax/backend/kernel.h"

namespace pax::cpu {

struct GatherSpec {
  std::vector<int64_t> offset_dims;           // output axes holding the slice axes
  std::vector<int64_t> collapsed_slice_dims;  // operand axes (slice size 1) left out of the output
  std::vector<int64_t> start_index_map;       // operand axis of each index-vector component
  std::vector<int64_t> slice_sizes;           // one per operand axis
  bool fill = false;                          // out-of-range slices become fill_value (else clamp)
  double fill_value = 0.0;
};

// out = gather(operand, indices); `out` is preallocated with the output shape.
// Parallel over the output; each output element is written once.
void gather(const GatherSpec& spec, const TensorView& operand, const TensorView& indices, const TensorView& out);

struct ScatterSpec {
  std::vector<int64_t> update_window_dims;            // updates axes holding the window
  std::vector<int64_t> inserted_window_dims;          // operand axes (window size 1) absent from updates
  std::vector<int64_t> scatter_dims_to_operand_dims;  // operand axis of each index-vector component
};

// out = operand with every in-bounds update window added at its start index;
// windows that would leave the operand are dropped. Each output element
// receives its contributions in update order whatever the thread count, so
// the result is bit-identical for any number of threads.
void scatter_add(const ScatterSpec& spec, const TensorView& operand, const TensorView& indices,
                 const TensorView& updates, const TensorView& out);

}  // namespace pax::cpu
