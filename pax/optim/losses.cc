// optax's squared_error and l2_loss, with optax's checks on their inputs.
#include "pax/optim/losses.h"

#include "pax/core/error.h"
#include "pax/ops/numpy.h"

namespace pax::optim {
namespace {

const Array& checked_predictions(const Array& predictions, const char* op) {
  PAX_CHECK(is_floating(predictions.dtype()), op, ": predictions must have a floating dtype, got ",
            predictions.aval().str());
  return predictions;
}

}  // namespace

Array squared_error(const Array& predictions) { return square(checked_predictions(predictions, "squared_error")); }

Array squared_error(const Array& predictions, const Array& targets) {
  checked_predictions(predictions, "squared_error");
  PAX_CHECK(predictions.shape() == targets.shape(), "squared_error: predictions ", predictions.aval().str(),
            " and targets ", targets.aval().str(), " must have the same shape (optax does not broadcast them)");
  return square(predictions - targets);
}

Array l2_loss(const Array& predictions) { return squared_error(predictions) * 0.5; }

Array l2_loss(const Array& predictions, const Array& targets) { return squared_error(predictions, targets) * 0.5; }

}  // namespace pax::optim
