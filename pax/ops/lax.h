// pax::lax — one typed function per primitive, as in jax.lax. Operands must
// already agree in shape and dtype where the primitive requires it; pax/ops/
// numpy.h adds broadcasting and type promotion on top. Every function binds
// its primitive, so it works eagerly and under every transform.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pax/core/array.h"
#include "pax/ir/params.h"

namespace pax::lax {

// ---- elementwise: one function per line of pax/ir/prims.def whose wrapper
// is lax1 (neg, abs, sign, exp, expm1, log, log1p, sqrt, rsqrt, tanh,
// logistic, erf, erf_inv, sin, cos, floor, ceil, is_finite, bitwise_not:
// logical not for bool) or lax2 (add, sub, mul, div: integers round toward
// zero, rem: the sign of the dividend as C's fmod, pow, max: NaN-propagating,
// min, bitwise_and / or / xor, eq, ne, lt, le, gt, ge, shift_left,
// shift_right_logical, shift_right_arithmetic), named as the primitive.
// Binary operands have equal shapes and dtypes.
#define PAX_LAX_none(id)
#define PAX_LAX_lax1(id) Array id(const Array& x);
#define PAX_LAX_lax2(id) Array id(const Array& a, const Array& b);
#define PAX_PRIM(id, name, arity, family, accepts, cost, kernel, recompute, wrapper) PAX_LAX_##wrapper(id)
#include "pax/ir/prims.def"
#undef PAX_PRIM
#undef PAX_LAX_none
#undef PAX_LAX_lax1
#undef PAX_LAX_lax2

// ---- elementwise with parameters
enum class RoundingMethod : int64_t { away_from_zero = 0, to_nearest_even = 1 };
Array round(const Array& x, RoundingMethod method = RoundingMethod::away_from_zero);
Array integer_pow(const Array& x, int64_t y);
Array convert_element_type(const Array& x, DType dtype, bool weak_type = false);
Array bitcast_convert_type(const Array& x, DType dtype);

// cases[which]; `which` is bool (two cases) or int32, scalar or of the case shape.
Array select_n(const Array& which, const std::vector<Array>& cases);

// ---- reductions (axes must be valid and distinct; the reduced axes are removed)
Array reduce_sum(const Array& x, const Ints& axes);
Array reduce_max(const Array& x, const Ints& axes);
Array reduce_min(const Array& x, const Ints& axes);
Array reduce_prod(const Array& x, const Ints& axes);
Array reduce_and(const Array& x, const Ints& axes);
Array reduce_or(const Array& x, const Ints& axes);
// Index of the first maximum (NaN counts as the maximum) along `axis`.
Array argmax(const Array& x, int64_t axis, DType index_dtype = DType::i32);
Array argmin(const Array& x, int64_t axis, DType index_dtype = DType::i32);
Array cumsum(const Array& x, int64_t axis, bool reverse = false);

// Windows sliding over every axis of an array (max pooling): sizes and
// strides per axis, and the padding as (lo, hi) per axis, flattened.
struct Window {
  Ints dimensions, strides, padding;
};
// The maximum of each window (jax.lax.reduce_window with max): padding takes
// no part, NaN propagates. x floating.
Array reduce_window_max(const Array& x, const Window& window);
// zeros like `operand` with source[o] added at the maximum of window o (the
// first NaN, else the first largest element): reduce_window_max's VJP.
Array select_and_scatter_add(const Array& source, const Array& operand, const Window& window);
// tangent (shaped like operand) read at each window's maximum: reduce_window_max's JVP.
Array select_and_gather_add(const Array& tangent, const Array& operand, const Window& window);

// ---- shape
Array reshape(const Array& x, const Ints& new_sizes);
Array transpose(const Array& x, const Ints& permutation);
Array broadcast_in_dim(const Array& x, const Ints& shape, const Ints& broadcast_dimensions);
Array squeeze(const Array& x, const Ints& dimensions);
Array expand_dims(const Array& x, const Ints& dimensions);
Array rev(const Array& x, const Ints& dimensions);
Array slice(const Array& x, const Ints& start_indices, const Ints& limit_indices, const Ints& strides = {});
// Start indices are integer scalars; they are clamped so the slice fits.
Array dynamic_slice(const Array& x, const std::vector<Array>& start_indices, const Ints& slice_sizes);
Array dynamic_update_slice(const Array& x, const Array& update, const std::vector<Array>& start_indices);
Array concatenate(const std::vector<Array>& operands, int64_t dimension);
// (lo, hi, interior) per dimension; lo / hi may be negative.
struct PadConfig {
  int64_t lo = 0, hi = 0, interior = 0;
};
Array pad(const Array& x, const Array& padding_value, const std::vector<PadConfig>& config);
Array iota(DType dtype, const Ints& shape, int64_t dimension = 0);

// ---- indexing (XLA gather / scatter; the index vector is the last axis of `indices`)
struct GatherDimensionNumbers {
  Ints offset_dims;           // output axes that hold the (non-collapsed) slice axes
  Ints collapsed_slice_dims;  // operand axes of slice size 1 that are dropped
  Ints start_index_map;       // operand axis addressed by each index-vector component
};
// clip: start indices are clamped so the slice fits (the default, as XLA).
// fill: slices that would leave the operand yield `fill_value` instead.
enum class GatherMode { clip, fill };
Array gather(const Array& operand, const Array& indices, const GatherDimensionNumbers& dims, const Ints& slice_sizes,
             GatherMode mode = GatherMode::clip, double fill_value = 0.0);
struct ScatterDimensionNumbers {
  Ints update_window_dims;            // update axes that hold the window
  Ints inserted_window_dims;          // operand axes of window size 1 absent from updates
  Ints scatter_dims_to_operand_dims;  // operand axis addressed by each index-vector component
};
// operand + updates scattered at indices; windows that would leave the operand are dropped.
Array scatter_add(const Array& operand, const Array& indices, const Array& updates,
                  const ScatterDimensionNumbers& dims);

// ---- linear algebra
struct DotDimensionNumbers {
  Ints lhs_contracting, rhs_contracting;
  Ints lhs_batch, rhs_batch;
};
// Output axes: batch, lhs free, rhs free. bf16 inputs accumulate in f32.
Array dot_general(const Array& lhs, const Array& rhs, const DotDimensionNumbers& dims,
                  std::optional<DType> preferred_element_type = std::nullopt);
struct ConvDimensionNumbers {
  Ints lhs_spec;  // (batch, feature, spatial...) axes of the input
  Ints rhs_spec;  // (out feature, in feature, spatial...) axes of the kernel
  Ints out_spec;  // (batch, feature, spatial...) axes of the output
};
// From layout strings such as ("NCHW", "OIHW", "NCHW") or ("NHWC", "HWIO", "NHWC").
ConvDimensionNumbers conv_dimension_numbers(const std::string& lhs, const std::string& rhs, const std::string& out);
Array conv_general_dilated(const Array& lhs, const Array& rhs, const Ints& window_strides,
                           const std::vector<std::pair<int64_t, int64_t>>& padding, const Ints& lhs_dilation,
                           const Ints& rhs_dilation, const ConvDimensionNumbers& dims, int64_t feature_group_count = 1,
                           int64_t batch_group_count = 1, std::optional<DType> preferred_element_type = std::nullopt);

// ---- attention
// jax.nn.dot_product_attention's computation as one primitive. query
// [B, T, N, H], key and value [B, S, K, H] (N a multiple of K: grouped-query
// heads); optional bias (added to the logits) and mask (bool, true attends),
// each broadcastable to [B, N, T, S]; is_causal masks keys after the query;
// per-example lengths mask padding keys and zero padding queries' outputs.
// Returns the output [B, T, N, H] (query's dtype) and each query row's
// log-sum-exp of its logits [B, N, T] (f32), computed without the [T, S]
// matrix by the backends' kernels.
struct AttentionOptions {
  Array bias, mask;                                // undefined: none
  Array query_seq_lengths, key_value_seq_lengths;  // int32 [B]; undefined: none
  bool is_causal = false;
  std::optional<double> scale;  // default 1 / sqrt(H)
  // > 0: the logits scale * q.k become logit_cap * tanh(scale * q.k /
  // logit_cap) before the bias (praxis's atten_logit_cap); 0: none.
  double logit_cap = 0.0;
};
std::pair<Array, Array> dot_product_attention(const Array& query, const Array& key, const Array& value,
                                              const AttentionOptions& options = {});

// ---- sorting
// Sorts all operands along `dimension` by the first `num_keys` operands
// (lexicographically). Floats use a total order: -0.0 == 0.0, NaN last.
std::vector<Array> sort(const std::vector<Array>& operands, int64_t dimension = -1, bool is_stable = true,
                        int64_t num_keys = 1);
// Largest k along the last axis, descending; ties keep the lower index first.
// Returns (values, int32 indices).
std::pair<Array, Array> top_k(const Array& x, int64_t k);

// ---- random bits
// Threefry-2x32 (20 rounds) of the counters (x0, x1) under key (k0, k1); all u32.
std::pair<Array, Array> threefry2x32(const Array& k0, const Array& k1, const Array& x0, const Array& x1);
// u32 bits for a raw key u32[2], identical to jax.random's (non-partitionable)
// threefry random_bits: threefry2x32(key, iota(n)) split in halves.
Array random_bits(const Array& key, const Ints& shape, int64_t bit_width = 32);

// ---- collectives over a named axis (a vmap axis_name, or the process axis)
Array psum(const Array& x, const std::string& axis_name);
Array pmean(const Array& x, const std::string& axis_name);
Array pmax(const Array& x, const std::string& axis_name);
Array pmin(const Array& x, const std::string& axis_name);
// Stacks every member's x along a new `axis` (tiled: concatenates along it).
Array all_gather(const Array& x, const std::string& axis_name, int64_t axis = 0, bool tiled = false);
// jax.lax.psum_scatter: the sum over the members, of which member i keeps
// block i of dimension scatter_dimension (tiled: that dimension divided by
// the axis size; untiled: the dimension must have the axis size and is
// removed). The transpose of a tiled all_gather.
Array psum_scatter(const Array& x, const std::string& axis_name, int64_t scatter_dimension = 0, bool tiled = false);
// JAX's ppermute: for each (source, destination) pair of member indices of
// the named axis, the destination member gets the source's x (point to
// point); a member no pair sends to gets zeros. Each index appears at most
// once among the sources and once among the destinations; its derivative is
// the inverse permutation.
Array ppermute(const Array& x, const std::string& axis_name, const std::vector<std::pair<int64_t, int64_t>>& perm);
// This member's index along the named axis (int32 scalar).
Array axis_index(const std::string& axis_name);

}  // namespace pax::lax
