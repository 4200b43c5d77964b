// optax's regression losses: squared_error and l2_loss, elementwise (reduce
// them with mean or sum). The classification loss optax.softmax_cross_entropy_
// with_integer_labels is pax::nn's (pax/nn/losses.h), where its gradient is
// written by hand.
//
//   Array loss = mean(optim::l2_loss(predictions, targets));  // the seed's TrainState example
#pragma once

#include "pax/core/array.h"

namespace pax::optim {

// optax.squared_error: (predictions - targets)^2, or predictions^2 without
// targets. predictions of a floating dtype; targets of the same shape (no
// broadcasting, as optax checks); the result has their promoted dtype.
Array squared_error(const Array& predictions);
Array squared_error(const Array& predictions, const Array& targets);

// optax.l2_loss: 0.5 * squared_error, whose derivative is predictions - targets.
Array l2_loss(const Array& predictions);
Array l2_loss(const Array& predictions, const Array& targets);

}  // namespace pax::optim
