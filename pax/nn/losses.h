// Losses whose derivative is written by hand because the automatic one would
// cost extra passes over large arrays.
#pragma once

#include "pax/core/array.h"

namespace pax::nn {

// optax.softmax_cross_entropy_with_integer_labels: -log_softmax(logits)[label]
// over the last axis. logits (..., C) of a floating dtype, labels (...) of an
// integer dtype in [0, C); the result (...) is f32 (f64 for f64 logits),
// computed as logsumexp(logits) - logits[label] in that dtype.
//
// Its gradient is (softmax(logits) - one_hot(labels)) * g, formed in one
// elementwise pass and returned in the logits' dtype: autodiff of the same
// formula would write an f32 copy of the logits and scatter into a zero
// array as large as the logits. No gradient flows to the labels.
Array softmax_cross_entropy_with_integer_labels(const Array& logits, const Array& labels);

}  // namespace pax::nn
