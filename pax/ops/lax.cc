// pax::lax: each function binds one primitive with its Params.
#include "pax/ops/lax.h"

#include <cctype>
#include <cmath>

#include "pax/core/error.h"
#include "pax/interp/interpreter.h"

namespace pax {

// Array's member conversion is lax.convert_element_type.
Array Array::astype(DType dtype) const { return lax::convert_element_type(*this, dtype); }

}  // namespace pax

namespace pax::lax {

// The functions that bind a primitive to its operands alone: prims.def's
// lax1 / lax2 lines.
#define PAX_LAX_none(id)
#define PAX_LAX_lax1(id) \
  Array id(const Array& x) { return bind1(Prim::id, {x}); }
#define PAX_LAX_lax2(id) \
  Array id(const Array& a, const Array& b) { return bind1(Prim::id, {a, b}); }
#define PAX_PRIM(id, name, arity, family, accepts, cost, kernel, recompute, wrapper) PAX_LAX_##wrapper(id)
#include "pax/ir/prims.def"
#undef PAX_PRIM
#undef PAX_LAX_none
#undef PAX_LAX_lax1
#undef PAX_LAX_lax2

Array round(const Array& x, RoundingMethod method) {
  return bind1(Prim::round, {x}, Params{{"rounding_method", int64_t(method)}});
}
Array integer_pow(const Array& x, int64_t y) { return bind1(Prim::integer_pow, {x}, Params{{"y", y}}); }
Array convert_element_type(const Array& x, DType dtype, bool weak_type) {
  if (x.dtype() == dtype && x.weak_type() == weak_type) return x;
  return bind1(Prim::convert_element_type, {x}, Params{{"new_dtype", dtype}, {"weak_type", weak_type}});
}
Array bitcast_convert_type(const Array& x, DType dtype) {
  return bind1(Prim::bitcast_convert_type, {x}, Params{{"new_dtype", dtype}});
}

Array select_n(const Array& which, const std::vector<Array>& cases) {
  std::vector<Array> operands{which};
  operands.insert(operands.end(), cases.begin(), cases.end());
  return bind1(Prim::select_n, operands);
}

#define PAX_REDUCE_FN(fn) \
  Array fn(const Array& x, const Ints& axes) { return bind1(Prim::fn, {x}, Params{{"axes", axes}}); }
PAX_REDUCE_FN(reduce_sum)
PAX_REDUCE_FN(reduce_max)
PAX_REDUCE_FN(reduce_min)
PAX_REDUCE_FN(reduce_prod)
PAX_REDUCE_FN(reduce_and)
PAX_REDUCE_FN(reduce_or)
#undef PAX_REDUCE_FN

Array argmax(const Array& x, int64_t axis, DType index_dtype) {
  return bind1(Prim::argmax, {x}, Params{{"axis", axis}, {"index_dtype", index_dtype}});
}
Array argmin(const Array& x, int64_t axis, DType index_dtype) {
  return bind1(Prim::argmin, {x}, Params{{"axis", axis}, {"index_dtype", index_dtype}});
}
Array cumsum(const Array& x, int64_t axis, bool reverse) {
  return bind1(Prim::cumsum, {x}, Params{{"axis", axis}, {"reverse", reverse}});
}

namespace {
Params window_params(const Window& w) {
  return Params{{"window_dimensions", w.dimensions}, {"window_strides", w.strides}, {"padding", w.padding}};
}
}  // namespace

Array reduce_window_max(const Array& x, const Window& window) {
  return bind1(Prim::reduce_window_max, {x}, window_params(window));
}
Array select_and_scatter_add(const Array& source, const Array& operand, const Window& window) {
  return bind1(Prim::select_and_scatter_add, {source, operand}, window_params(window));
}
Array select_and_gather_add(const Array& tangent, const Array& operand, const Window& window) {
  return bind1(Prim::select_and_gather_add, {tangent, operand}, window_params(window));
}

Array reshape(const Array& x, const Ints& new_sizes) {
  if (x.shape().dims() == new_sizes) return x;
  return bind1(Prim::reshape, {x}, Params{{"new_sizes", new_sizes}});
}
Array transpose(const Array& x, const Ints& permutation) {
  return bind1(Prim::transpose, {x}, Params{{"permutation", permutation}});
}
Array broadcast_in_dim(const Array& x, const Ints& shape, const Ints& broadcast_dimensions) {
  return bind1(Prim::broadcast_in_dim, {x}, Params{{"shape", shape}, {"broadcast_dimensions", broadcast_dimensions}});
}
Array squeeze(const Array& x, const Ints& dimensions) {
  return bind1(Prim::squeeze, {x}, Params{{"dimensions", dimensions}});
}
Array expand_dims(const Array& x, const Ints& dimensions) {
  return bind1(Prim::expand_dims, {x}, Params{{"dimensions", dimensions}});
}
Array rev(const Array& x, const Ints& dimensions) { return bind1(Prim::rev, {x}, Params{{"dimensions", dimensions}}); }
Array slice(const Array& x, const Ints& start_indices, const Ints& limit_indices, const Ints& strides) {
  return bind1(Prim::slice, {x},
               Params{{"start_indices", start_indices}, {"limit_indices", limit_indices}, {"strides", strides}});
}
Array dynamic_slice(const Array& x, const std::vector<Array>& start_indices, const Ints& slice_sizes) {
  std::vector<Array> operands{x};
  operands.insert(operands.end(), start_indices.begin(), start_indices.end());
  return bind1(Prim::dynamic_slice, operands, Params{{"slice_sizes", slice_sizes}});
}
Array dynamic_update_slice(const Array& x, const Array& update, const std::vector<Array>& start_indices) {
  std::vector<Array> operands{x, update};
  operands.insert(operands.end(), start_indices.begin(), start_indices.end());
  return bind1(Prim::dynamic_update_slice, operands);
}
Array concatenate(const std::vector<Array>& operands, int64_t dimension) {
  PAX_CHECK(!operands.empty(), "concatenate: needs at least one array");
  if (operands.size() == 1) return operands[0];
  return bind1(Prim::concatenate, operands, Params{{"dimension", dimension}});
}
Array pad(const Array& x, const Array& padding_value, const std::vector<PadConfig>& config) {
  Ints flat;
  for (const PadConfig& c : config) {
    flat.push_back(c.lo);
    flat.push_back(c.hi);
    flat.push_back(c.interior);
  }
  return bind1(Prim::pad, {x, padding_value}, Params{{"padding_config", flat}});
}
Array iota(DType dtype, const Ints& shape, int64_t dimension) {
  return bind1(Prim::iota, {}, Params{{"dtype", dtype}, {"shape", shape}, {"dimension", dimension}});
}

Array gather(const Array& operand, const Array& indices, const GatherDimensionNumbers& dims, const Ints& slice_sizes,
             GatherMode mode, double fill_value) {
  return bind1(Prim::gather, {operand, indices},
               Params{{"offset_dims", dims.offset_dims},
                      {"collapsed_slice_dims", dims.collapsed_slice_dims},
                      {"start_index_map", dims.start_index_map},
                      {"slice_sizes", slice_sizes},
                      {"mode", std::string(mode == GatherMode::clip ? "clip" : "fill")},
                      {"fill_value", fill_value}});
}
Array scatter_add(const Array& operand, const Array& indices, const Array& updates,
                  const ScatterDimensionNumbers& dims) {
  return bind1(Prim::scatter_add, {operand, indices, updates},
               Params{{"update_window_dims", dims.update_window_dims},
                      {"inserted_window_dims", dims.inserted_window_dims},
                      {"scatter_dims_to_operand_dims", dims.scatter_dims_to_operand_dims}});
}

Array dot_general(const Array& lhs, const Array& rhs, const DotDimensionNumbers& dims,
                  std::optional<DType> preferred_element_type) {
  Params p{{"lhs_contracting_dims", dims.lhs_contracting},
           {"rhs_contracting_dims", dims.rhs_contracting},
           {"lhs_batch_dims", dims.lhs_batch},
           {"rhs_batch_dims", dims.rhs_batch}};
  if (preferred_element_type) p.set("preferred_element_type", *preferred_element_type);
  return bind1(Prim::dot_general, {lhs, rhs}, p);
}

std::pair<Array, Array> dot_product_attention(const Array& query, const Array& key, const Array& value,
                                              const AttentionOptions& o) {
  PAX_CHECK(query.defined() && query.ndim() == 4,
            "dot_product_attention: query must be [batch, length, heads, "
            "head_dim], got ",
            query.defined() ? query.aval().str() : "undefined");
  const double scale = o.scale ? *o.scale : 1.0 / std::sqrt(double(query.shape()[3]));
  Params p{{"scale", scale},
           {"is_causal", o.is_causal},
           {"has_bias", o.bias.defined()},
           {"has_mask", o.mask.defined()},
           {"has_q_lengths", o.query_seq_lengths.defined()},
           {"has_kv_lengths", o.key_value_seq_lengths.defined()}};
  if (o.logit_cap != 0.0) p.set("logit_cap", o.logit_cap);
  std::vector<Array> operands{query, key, value};
  for (const Array* extra : {&o.bias, &o.mask, &o.query_seq_lengths, &o.key_value_seq_lengths})
    if (extra->defined()) operands.push_back(*extra);
  std::vector<Array> out = bind(Prim::dot_product_attention, operands, p);
  return {out[0], out[1]};
}

ConvDimensionNumbers conv_dimension_numbers(const std::string& lhs, const std::string& rhs, const std::string& out) {
  // Spatial axes are matched by letter in the order they appear in the kernel spec.
  auto spec = [](const std::string& s, char first, char second, const std::string& spatial_order, const char* which) {
    PAX_CHECK(s.size() >= 3, "conv_dimension_numbers: ", which, " spec '", s, "' is too short");
    Ints out;
    auto pos = [&](char c) {
      size_t p = s.find(c);
      PAX_CHECK(p != std::string::npos && s.find(c, p + 1) == std::string::npos, "conv_dimension_numbers: ", which,
                " spec '", s, "' must contain '", c, "' exactly once");
      return int64_t(p);
    };
    out.push_back(pos(first));
    out.push_back(pos(second));
    for (char c : spatial_order) out.push_back(pos(c));
    PAX_CHECK(out.size() == s.size(), "conv_dimension_numbers: ", which, " spec '", s,
              "' has letters that are not in the kernel spec's spatial axes");
    return out;
  };
  std::string spatial;
  for (char c : rhs) {
    if (c != 'O' && c != 'I') spatial += c;
  }
  return ConvDimensionNumbers{spec(lhs, 'N', 'C', spatial, "lhs"), spec(rhs, 'O', 'I', spatial, "rhs"),
                              spec(out, 'N', 'C', spatial, "out")};
}

Array conv_general_dilated(const Array& lhs, const Array& rhs, const Ints& window_strides,
                           const std::vector<std::pair<int64_t, int64_t>>& padding, const Ints& lhs_dilation,
                           const Ints& rhs_dilation, const ConvDimensionNumbers& dims, int64_t feature_group_count,
                           int64_t batch_group_count, std::optional<DType> preferred_element_type) {
  Ints flat_padding;
  for (auto [lo, hi] : padding) {
    flat_padding.push_back(lo);
    flat_padding.push_back(hi);
  }
  Params p{{"window_strides", window_strides},
           {"padding", flat_padding},
           {"lhs_dilation", lhs_dilation},
           {"rhs_dilation", rhs_dilation},
           {"lhs_spec", dims.lhs_spec},
           {"rhs_spec", dims.rhs_spec},
           {"out_spec", dims.out_spec},
           {"feature_group_count", feature_group_count},
           {"batch_group_count", batch_group_count}};
  if (preferred_element_type) p.set("preferred_element_type", *preferred_element_type);
  return bind1(Prim::conv_general_dilated, {lhs, rhs}, p);
}

std::vector<Array> sort(const std::vector<Array>& operands, int64_t dimension, bool is_stable, int64_t num_keys) {
  PAX_CHECK(!operands.empty(), "sort: needs at least one operand");
  int64_t dim = dimension < 0 ? dimension + operands[0].ndim() : dimension;
  return bind(Prim::sort, operands, Params{{"dimension", dim}, {"is_stable", is_stable}, {"num_keys", num_keys}});
}

std::pair<Array, Array> top_k(const Array& x, int64_t k) {
  std::vector<Array> out = bind(Prim::top_k, {x}, Params{{"k", k}});
  return {out[0], out[1]};
}

std::pair<Array, Array> threefry2x32(const Array& k0, const Array& k1, const Array& x0, const Array& x1) {
  std::vector<Array> out = bind(Prim::threefry2x32, {k0, k1, x0, x1});
  return {out[0], out[1]};
}

Array random_bits(const Array& key, const Ints& shape, int64_t bit_width) {
  return bind1(Prim::random_bits, {key}, Params{{"shape", shape}, {"bit_width", bit_width}});
}

Array psum(const Array& x, const std::string& axis_name) {
  return bind1(Prim::psum, {x}, Params{{"axis_name", axis_name}});
}
Array pmean(const Array& x, const std::string& axis_name) {
  Array s = psum(x, axis_name);
  return div(s, broadcast_in_dim(scalar(double(axis_size(axis_name)), s.dtype()), s.shape().dims(), {}));
}
Array pmax(const Array& x, const std::string& axis_name) {
  return bind1(Prim::pmax, {x}, Params{{"axis_name", axis_name}});
}
Array pmin(const Array& x, const std::string& axis_name) {
  return bind1(Prim::pmin, {x}, Params{{"axis_name", axis_name}});
}
Array all_gather(const Array& x, const std::string& axis_name, int64_t axis, bool tiled) {
  return bind1(Prim::all_gather, {x},
               Params{{"axis_name", axis_name}, {"axis", axis}, {"tiled", tiled}, {"axis_size", axis_size(axis_name)}});
}
Array psum_scatter(const Array& x, const std::string& axis_name, int64_t scatter_dimension, bool tiled) {
  return bind1(Prim::psum_scatter, {x},
               Params{{"axis_name", axis_name},
                      {"scatter_dimension", scatter_dimension},
                      {"tiled", tiled},
                      {"axis_size", axis_size(axis_name)}});
}
Array ppermute(const Array& x, const std::string& axis_name, const std::vector<std::pair<int64_t, int64_t>>& perm) {
  Ints sources, destinations;
  for (const auto& [source, destination] : perm) sources.push_back(source), destinations.push_back(destination);
  return bind1(Prim::ppermute, {x},
               Params{{"axis_name", axis_name},
                      {"sources", sources},
                      {"destinations", destinations},
                      {"axis_size", axis_size(axis_name)}});
}
Array axis_index(const std::string& axis_name) { return bind1(Prim::axis_index, {}, Params{{"axis_name", axis_name}}); }

}  // namespace pax::lax
