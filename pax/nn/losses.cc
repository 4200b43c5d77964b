// The cross entropy with integer labels and its one-pass gradient (custom_vjp).
#include "pax/nn/losses.h"

#include <utility>
#include <vector>

#include "pax/api/transforms.h"
#include "pax/core/error.h"
#include "pax/ops/nn.h"
#include "pax/ops/numpy.h"

namespace pax::nn {
namespace {

DType loss_dtype(const Array& logits) { return logits.dtype() == DType::f64 ? DType::f64 : DType::f32; }

// The softmax's shift and normaliser, each (..., 1) in the loss dtype: the
// finite maximum m of the logits and s = sum(exp(logits - m)).
struct Normaliser {
  Array max, sum;
};

Array widened(const Array& logits) { return logits.astype(loss_dtype(logits)); }

// exp(logits - m): the forward's sum and the backward's probabilities
// compute it from the same values, so that the compiler computes it once
// (the two become one equation) and keeps it in cache between the loss and
// its gradient (a row sweep, compile/row_sweep.h).
Array shifted_exp(const Array& logits, const Array& max) { return exp(widened(logits) - max); }

// (normaliser, cross entropy (...)) in the loss dtype.
std::pair<Normaliser, Array> forward(const Array& logits, const Array& labels) {
  const Array shift = stable_shift(widened(logits), {-1});
  const Array s = sum(shifted_exp(logits, shift), {-1}, true);
  const Array lse = log(s) + shift;  // (..., 1)
  // Gathered before the widening, so that no wide copy of the logits is kept.
  const Array label_logit = take_along_axis(logits, expand_dims(labels, {-1}), -1).astype(lse.dtype());  // (..., 1)
  return {Normaliser{shift, s}, squeeze(lse - label_logit, {-1})};
}

Array backward(const std::vector<Array>& residuals, const Array& g) {
  const Array& logits = residuals[0];                                                    // (..., C)
  const Array& labels = residuals[1];                                                    // (...)
  const Array p = shifted_exp(logits, residuals[2]) / residuals[3];                      // (..., C)
  const Array classes = arange(int64_t(0), logits.dim(-1), int64_t(1), labels.dtype());  // (C,)
  const Array hit = equal(classes, expand_dims(labels, {-1}));
  return (where(hit, p - 1.0, p) * expand_dims(g, {-1})).astype(logits.dtype());
}

}  // namespace

Array softmax_cross_entropy_with_integer_labels(const Array& logits, const Array& labels) {
  PAX_CHECK(is_floating(logits.dtype()) && logits.ndim() >= 1, "softmax_cross_entropy_with_integer_labels: logits ",
            "must be floating with a class axis, got ", logits.aval().str());
  Ints want = logits.shape().dims();
  want.pop_back();
  PAX_CHECK(is_integer(labels.dtype()) && labels.shape().dims() == want,
            "softmax_cross_entropy_with_integer_labels: labels must be integers of shape ", Shape(want).str(),
            " (the logits ", logits.aval().str(), " without their class axis), got ", labels.aval().str());
  static const auto xent = custom_vjp([](const Array& x, const Array& y) { return forward(x, y).second; },
                                      [](const Array& x, const Array& y) {
                                        auto [norm, loss] = forward(x, y);
                                        return std::make_pair(loss, std::vector<Array>{x, y, norm.max, norm.sum});
                                      },
                                      [](const std::vector<Array>& residuals, const Array& g) {
                                        return std::make_pair(backward(residuals, g), zeros_like(residuals[1]));
                                      },
                                      "softmax_cross_entropy_with_integer_labels");
  return xent(logits, labels);
}

}  // namespace pax::nn
