// Tensor parallelism over a mesh axis (Pax's "mdl"), Megatron's split of the
// attention heads and of the feed-forward's hidden width. A variable that a
// layer declares with WeightHParams::mdl_dim is held as one block along that
// dimension per process of the axis; Layer::theta returns that block, and the
// layer computes its part (its heads, its columns of the hidden layer).
// A split block starts with enter_split and ends with leave_split:
//
//   y = leave_split(relu(enter_split(x, "mdl") @ w1_part) @ w2_part, "mdl")
//
// computes the whole MLP on every process when w1 is split by columns and
// w2 by rows. enter_split is the identity, and its derivative sums the
// cotangent over the axis (each process's part of the block contributes to
// x's gradient); leave_split sums the processes' partial outputs, and its
// derivative passes the cotangent through (every process holds the whole
// output's cotangent already). Everything outside split blocks (norms,
// embeddings, biases after leave_split) is computed alike on every process
// of the axis, which therefore reads the same batch.
#pragma once

#include <cstdint>
#include <string>

#include "pax/core/array.h"
#include "pax/nn/fsdp.h"
#include "pax/nn/weight_init.h"

namespace pax::nn {

struct TensorParallelOptions {
  std::string axis;   // the named axis the split variables are split over ("" : off)
  int64_t size = 1;   // processes on that axis
  int64_t index = 0;  // this process's position on it (the block it holds)
  bool enabled() const { return !axis.empty() && size > 1; }
};

// Whether `tp` splits a variable declared as `spec` (its mdl_dim set, tp on).
bool mdl_split(const WeightHParams& spec, const TensorParallelOptions& tp);
// The shape this process holds of a variable declared as `spec`: spec.shape
// with mdl_dim divided by the axis size. Throws naming `what`, the dimension
// and the axis when the size does not divide it.
Shape mdl_local_shape(const WeightHParams& spec, const TensorParallelOptions& tp, const std::string& what);
// Block tp.index of `full` (of spec.shape) along spec.mdl_dim; `full` itself
// when the variable is not split. Throws when tp.size does not divide it.
Array mdl_block(const Array& full, const WeightHParams& spec, const TensorParallelOptions& tp);
// The declaration of what this process holds under tp: `spec` with the
// local shape and, for a split variable of at least fsdp.min_elements
// elements, its fsdp split: along the same dimension where fsdp's axis size
// divides the block (the two splits nest), else, with `second_dimension`,
// along the largest other dimension it divides (a two-dimensional split,
// Praxis's [data, mdl] mesh_split), else none (whole over fsdp's axis).
// spec.fsdp_dim, when set, names the dimension (-1: none; another than
// mdl_dim needs `second_dimension`).
WeightHParams held_spec(const WeightHParams& spec, const TensorParallelOptions& tp, const FsdpOptions& fsdp,
                        const std::string& what, bool second_dimension = true);

// This process's part of `whole` along `dim` (tp.size equal parts), picked
// by its position on tp.axis (lax::axis_index, so that a vmap axis standing
// in for the processes picks per member); `whole` when tp is off.
Array part_of(const Array& whole, int64_t dim, const TensorParallelOptions& tp);

// The key of this process's part of a value split over tp.axis (dropout on
// split activations, noise on split weights): one of tp.size keys split from
// `key`, picked by the process's position on the axis (lax::axis_index, so
// a vmap axis standing in for the processes picks per member); `key` itself
// when tp is off.
Array key_of_this_part(const Array& key, const TensorParallelOptions& tp);

// The whole of a value split over tp.axis along `dim` on every process: an
// all_gather forward; backward, this process's part of the cotangent (every
// process holds the whole cotangent already, as for leave_split). `part`
// itself when tp is off.
Array gather_parts(const Array& part, int64_t dim, const TensorParallelOptions& tp);

// Megatron's f: the identity forward, a psum over `axis` backward.
Array enter_split(const Array& x, const std::string& axis);
// Megatron's g: a psum over `axis` forward, the identity backward.
Array leave_split(const Array& partial, const std::string& axis);
// The same, as the identity when tp is off.
Array enter_split(const Array& x, const TensorParallelOptions& tp);
Array leave_split(const Array& partial, const TensorParallelOptions& tp);

}  // namespace pax::nn
