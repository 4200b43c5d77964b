// pax::nn — activation functions, softmax family and one_hot, as in jax.nn.
#pragma once

#include <optional>

#include "pax/ops/numpy.h"

namespace pax::nn {

Array relu(const Array& x);
Array relu6(const Array& x);
Array leaky_relu(const Array& x, double negative_slope = 0.01);
Array elu(const Array& x, double alpha = 1.0);
// approximate=true: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (jax.nn.gelu's default);
// approximate=false: 0.5 x (1 + erf(x / sqrt(2))). bf16 / f16 inputs are computed
// in f32 and rounded once. Its gradient is written by hand (a custom_vjp that
// keeps one array: the derivative for f32 / f64, computed by the forward's
// loop, so that the backward is one product; x for 16-bit floats).
Array gelu(const Array& x, bool approximate = true);
Array sigmoid(const Array& x);
Array silu(const Array& x);  // x * sigmoid(x), a.k.a. swish
Array swish(const Array& x);
Array softplus(const Array& x);  // log(1 + exp(x)), stable for large |x|
Array log_sigmoid(const Array& x);
// Numerically stable: the maximum along the axes is subtracted first.
Array softmax(const Array& x, const Axes& axes = -1);
Array log_softmax(const Array& x, const Axes& axes = -1);
// The shift the softmax family subtracts: max(x) over axes (keepdims), 0
// where that maximum is not finite, cut from differentiation.
Array stable_shift(const Array& x, const Ints& axes);
// log(sum(exp(x))) over axes; -inf everywhere gives -inf.
Array logsumexp(const Array& x, const Axes& axes = {}, bool keepdims = false);
// One-hot encoding along a new last axis; out-of-range indices give all zeros.
Array one_hot(const Array& indices, int64_t num_classes, DType dtype = DType::f32);
// (x - mean) / sqrt(var + epsilon) over axes.
Array standardize(const Array& x, const Axes& axes = -1, double epsilon = 1e-5);

// jax.nn.dot_product_attention: softmax(scale q k^T + bias, masked) v for
// query [B, T, N, H] and key / value [B, S, K, H] (N a multiple of K), or
// the same without the batch axis ([T, N, H], [S, K, H]). One primitive
// (lax::dot_product_attention): the kernels keep no [T, S] matrix, and the
// gradient recomputes the probabilities from the row log-sum-exp. The
// options are lax::AttentionOptions's (bias, mask, is_causal, scale,
// query_seq_lengths, key_value_seq_lengths).
Array dot_product_attention(const Array& query, const Array& key, const Array& value,
                            const lax::AttentionOptions& options = {});

}  // namespace pax::nn
