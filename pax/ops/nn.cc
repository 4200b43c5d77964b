// Activation functions and the softmax family, composed from numpy-level ops.
#include "pax/ops/nn.h"

#include <cmath>
#include <limits>

#include "pax/api/transforms.h"
#include "pax/core/error.h"

namespace pax::nn {

namespace {
void check_float(const Array& x, const char* op) {
  PAX_CHECK(is_floating(x.dtype()), op, ": needs a floating input, got ", x.aval().str());
}
}  // namespace

// The piecewise activations select on the input, as jax.nn's custom
// derivatives do, instead of taking maximum / minimum, whose derivative
// splits a tie: relu'(0) = relu6'(0) = relu6'(6) = 0 (a dead unit or a zero
// pad gets no gradient), elu'(0) = alpha. The selects test `x <= bound`, so
// that a NaN, for which every comparison is false, passes through as
// maximum would pass it.
Array relu(const Array& x) { return where(x <= 0, zeros_like(x), x); }
Array relu6(const Array& x) { return where(x <= 0, zeros_like(x), where(x >= 6, full_like(x, 6), x)); }
Array leaky_relu(const Array& x, double negative_slope) { return where(x >= 0, x, x * negative_slope); }
Array elu(const Array& x, double alpha) {
  check_float(x, "elu");
  const Array positive = x > 0;
  return where(positive, x, expm1(where(positive, zeros_like(x), x)) * alpha);
}

namespace {

// GELU and its derivative in the computation dtype: f32 for 16-bit floats (as
// PyTorch's kernels and XLA's fused loops compute them), the input's otherwise.
DType gelu_compute_dtype(DType d) { return itemsize(d) < 4 ? DType::f32 : d; }

constexpr double kGeluCubic = 0.044715;

// sqrt(2/pi) (x + 0.044715 x^3), the argument of the tanh form's tanh.
Array gelu_tanh_argument(const Array& x) { return (x + x * x * x * kGeluCubic) * std::sqrt(2.0 / M_PI); }

// gelu(x) and d gelu / dx, sharing one tanh (or erf):
//   tanh form: 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 0.044715 x^2), t = tanh(inner);
//   erf form:  0.5 (1 + erf(x / sqrt 2)) + x exp(-x^2 / 2) / sqrt(2 pi).
std::pair<Array, Array> gelu_value_and_derivative(const Array& x, bool approximate) {
  const Array x2 = x * x;
  if (approximate) {
    const Array t = tanh(gelu_tanh_argument(x));
    return {x * 0.5 * (t + 1.0),
            (t + 1.0) * 0.5 + x * 0.5 * (1.0 - t * t) * (x2 * (3.0 * kGeluCubic) + 1.0) * std::sqrt(2.0 / M_PI)};
  }
  const Array e = erf(x * M_SQRT1_2);
  return {x * 0.5 * (e + 1.0), (e + 1.0) * 0.5 + x * exp(x2 * -0.5) * (1.0 / std::sqrt(2.0 * M_PI))};
}

Array gelu_value(const Array& x, bool approximate) {
  if (approximate) return x * 0.5 * (tanh(gelu_tanh_argument(x)) + 1.0);
  return x * 0.5 * (erf(x * M_SQRT1_2) + 1.0);
}

Array gelu_forward(const Array& x, bool approximate) {
  return gelu_value(x.astype(gelu_compute_dtype(x.dtype())), approximate).astype(x.dtype());
}

// What the backward keeps. For f32 and f64 inputs: the derivative, computed
// by the forward's loop while it has x in registers, so that the backward is
// one product (g * derivative, which a product's epilogue can take) and x need
// not be kept. For 16-bit inputs: x itself (the f32 derivative would be twice
// its bytes), the backward recomputing the derivative.
bool gelu_keeps_derivative(DType d) { return gelu_compute_dtype(d) == d; }

std::pair<Array, std::vector<Array>> gelu_forward_with_residual(const Array& x, bool approximate) {
  if (!gelu_keeps_derivative(x.dtype())) return {gelu_forward(x, approximate), {x}};
  auto [value, derivative] = gelu_value_and_derivative(x, approximate);
  return {value, {derivative}};
}

Array gelu_backward(const Array& residual, const Array& g, bool approximate) {
  if (gelu_keeps_derivative(residual.dtype())) return g * residual;
  const DType cd = gelu_compute_dtype(residual.dtype());
  return (g.astype(cd) * gelu_value_and_derivative(residual.astype(cd), approximate).second).astype(residual.dtype());
}

template <bool kApproximate>
Array gelu_with_vjp(const Array& x) {
  static const auto f = custom_vjp(
      [](const Array& v) { return gelu_forward(v, kApproximate); },
      [](const Array& v) { return gelu_forward_with_residual(v, kApproximate); },
      [](const std::vector<Array>& residuals, const Array& g) { return gelu_backward(residuals[0], g, kApproximate); },
      "gelu");
  return f(x);
}

}  // namespace

Array gelu(const Array& x, bool approximate) {
  check_float(x, "gelu");
  return approximate ? gelu_with_vjp<true>(x) : gelu_with_vjp<false>(x);
}

Array sigmoid(const Array& x) { return lax::logistic(is_floating(x.dtype()) ? x : x.astype(DType::f32)); }
Array silu(const Array& x) { return x * sigmoid(x); }
Array swish(const Array& x) { return silu(x); }

Array softplus(const Array& x) {
  check_float(x, "softplus");
  return log1p(exp(-abs(x))) + maximum(x, 0);
}
Array log_sigmoid(const Array& x) { return -softplus(-x); }

// max over axes (keepdims), with non-finite maxima replaced by 0 so that
// rows of -inf do not turn into NaN. The shift cancels out of the result, so
// its gradient is zero: it is cut from differentiation (as jax.nn does), which
// spares the backward pass the max's tie-breaking one-hot.
Array stable_shift(const Array& x, const Ints& axes) {
  Array m = max(x, axes, true);
  return stop_gradient(where(isfinite(m), m, zeros_like(m)));
}

Array softmax(const Array& x, const Axes& axes) {
  check_float(x, "softmax");
  Ints ax = axes.resolve(x.ndim(), "softmax");
  Array e = exp(x - stable_shift(x, ax));
  return e / sum(e, ax, true);
}

Array log_softmax(const Array& x, const Axes& axes) {
  check_float(x, "log_softmax");
  Ints ax = axes.resolve(x.ndim(), "log_softmax");
  Array shifted = x - stable_shift(x, ax);
  return shifted - log(sum(exp(shifted), ax, true));
}

Array logsumexp(const Array& x, const Axes& axes, bool keepdims) {
  check_float(x, "logsumexp");
  Ints ax = axes.resolve(x.ndim(), "logsumexp");
  Array m = stable_shift(x, ax);
  Array out = log(sum(exp(x - m), ax, true)) + m;
  return keepdims ? out : squeeze(out, Ints(ax));
}

Array one_hot(const Array& indices, int64_t num_classes, DType dtype) {
  PAX_CHECK(is_integer(indices.dtype()), "one_hot: indices must have an integer dtype, got ", indices.aval().str());
  PAX_CHECK(num_classes >= 0, "one_hot: num_classes must be >= 0, got ", num_classes);
  Ints shape = indices.shape().dims();
  shape.push_back(num_classes);
  Array classes = lax::iota(indices.dtype(), shape, int64_t(shape.size()) - 1);
  Array idx = broadcast_to(lax::expand_dims(indices, {indices.ndim()}), Shape(shape));
  return lax::eq(idx, classes).astype(dtype);
}

Array standardize(const Array& x, const Axes& axes, double epsilon) {
  check_float(x, "standardize");
  Ints ax = axes.resolve(x.ndim(), "standardize");
  Array m = mean(x, ax, true);
  Array v = var(x, ax, true);
  return (x - m) * rsqrt(v + epsilon);
}

Array dot_product_attention(const Array& query, const Array& key, const Array& value,
                            const lax::AttentionOptions& options) {
  PAX_CHECK(query.ndim() == key.ndim() && key.ndim() == value.ndim() && (query.ndim() == 3 || query.ndim() == 4),
            "dot_product_attention: query ", query.aval().str(), ", key ", key.aval().str(), " and value ",
            value.aval().str(), " must all be [batch, length, heads, head_dim] or all [length, heads, head_dim]");
  if (query.ndim() == 4) return lax::dot_product_attention(query, key, value, options).first;
  // Without a batch axis: a batch of one (a bias or mask of rank 3 gains it too).
  auto batched = [](const Array& x) { return x.defined() && x.ndim() == 3 ? lax::expand_dims(x, {0}) : x; };
  lax::AttentionOptions o = options;
  o.bias = batched(o.bias);
  o.mask = batched(o.mask);
  const Array out = lax::dot_product_attention(batched(query), batched(key), batched(value), o).first;
  return lax::squeeze(out, {0});
}

}  // namespace pax::nn
