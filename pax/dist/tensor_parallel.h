// Megatron's two operators for tensor parallelism over a mesh axis (Pax's
// "mdl"), the building blocks of the design in README ("Training across
// processes"): a block whose weights are split over the axis starts with
// enter_split and ends with leave_split.
//
//   y = leave_split(relu(enter_split(x, "mdl") @ w1_part) @ w2_part, "mdl")
//
// computes the whole MLP on every process when w1 is split by columns and
// w2 by rows. enter_split is the identity, and its derivative sums the
// cotangent over the axis (each process's part of the block contributes to
// x's gradient); leave_split sums the processes' partial outputs, and its
// derivative passes the cotangent through (every process holds the whole
// output's cotangent already). No layer uses them yet: the layers that
// would (attention heads, the feed-forward's hidden width) are not split.
#pragma once

#include <string>

#include "pax/core/array.h"

namespace pax::dist {

// Megatron's f: the identity forward, a psum over `axis` backward.
Array enter_split(const Array& x, const std::string& axis);
// Megatron's g: a psum over `axis` forward, the identity backward.
Array leave_split(const Array& partial, const std::string& axis);

}  // namespace pax::dist
