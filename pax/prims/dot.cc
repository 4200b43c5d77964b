// dot_general: the shape/dtype rule (jax.lax's: contracting and batch
// dimensions, preferred_element_type). The CPU kernel is the backend's
// (kernels_dot.cc).
#include <algorithm>
#include <string>
#include <vector>

#include "pax/core/error.h"
#include "pax/prims/dot_params.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

std::string operands_str(const AVal& lhs, const AVal& rhs) { return lhs.str() + " and " + rhs.str(); }

void check_axes(const Ints& axes, const char* name, const AVal& operand, const char* which, const AVal& lhs,
                const AVal& rhs) {
  for (size_t i = 0; i < axes.size(); ++i) {
    PAX_CHECK(axes[i] >= 0 && axes[i] < operand.shape.rank(), "dot_general: ", name, " ", ints_str(axes),
              " out of range for ", which, " ", operand.str(), " (valid axes are 0..", operand.shape.rank() - 1,
              "); operands ", operands_str(lhs, rhs));
    for (size_t j = 0; j < i; ++j) {
      PAX_CHECK(axes[i] != axes[j], "dot_general: ", name, " ", ints_str(axes), " repeats axis ", axes[i],
                "; operands ", operands_str(lhs, rhs));
    }
  }
}

void check_pairs(const Ints& l, const Ints& r, const char* what, const AVal& lhs, const AVal& rhs) {
  PAX_CHECK(l.size() == r.size(), "dot_general: lhs_", what, "_dims ", ints_str(l), " and rhs_", what, "_dims ",
            ints_str(r), " must have the same length; operands ", operands_str(lhs, rhs));
  for (size_t i = 0; i < l.size(); ++i) {
    PAX_CHECK(lhs.shape[l[i]] == rhs.shape[r[i]], "dot_general: ", what, " dimension sizes differ: lhs axis ", l[i],
              " has size ", lhs.shape[l[i]], " but rhs axis ", r[i], " has size ", rhs.shape[r[i]], "; operands ",
              operands_str(lhs, rhs));
  }
}

void check_disjoint(const Ints& contracting, const Ints& batch, const char* which, const AVal& lhs, const AVal& rhs) {
  for (int64_t a : contracting) {
    PAX_CHECK(std::find(batch.begin(), batch.end(), a) == batch.end(), "dot_general: ", which, " axis ", a,
              " is both a contracting and a batch dimension; operands ", operands_str(lhs, rhs));
  }
}

// jax.lax's rule: integer inputs may ask for any float or a wider integer of
// the same signedness; float inputs for a float at least as wide.
void check_preferred(DType in, DType preferred, const AVal& lhs, const AVal& rhs) {
  bool ok;
  if (preferred == DType::bool_) {
    ok = false;
  } else if (is_floating(in)) {
    ok = is_floating(preferred) && itemsize(preferred) >= itemsize(in);
  } else {
    ok = is_floating(preferred) || (is_unsigned(preferred) == is_unsigned(in) && itemsize(preferred) >= itemsize(in));
  }
  PAX_CHECK(ok, "dot_general: preferred_element_type ", dtype_name(preferred), " is not valid for operands ",
            operands_str(lhs, rhs),
            "; it must be a float type at least as wide as the inputs"
            ", or for integer inputs any float type or an integer type of the same signedness at least as wide");
}

std::vector<AVal> dot_general_rule(std::span<const AVal> in, const Params& p) {
  const bool with_bias = dot_has_bias(p), with_multiplier = dot_has_multiplier(p);
  PAX_CHECK(in.size() == dot_num_operands(p), "dot_general: takes ", dot_num_operands(p), " operands (lhs, rhs",
            with_bias ? ", bias" : "", with_multiplier ? ", multiplier" : "", "), got ", in.size());
  const AVal& lhs = in[0];
  const AVal& rhs = in[1];
  const DotDims d = dot_dims(p);
  PAX_CHECK(lhs.dtype == rhs.dtype, "dot_general: operands ", operands_str(lhs, rhs),
            " must have the same dtype (convert one of them first)");
  PAX_CHECK(lhs.dtype != DType::bool_, "dot_general: operands ", operands_str(lhs, rhs),
            " are bool; a numeric dtype (u8, u32, i32, i64, bf16, f16, f32, f64) is required");
  check_axes(d.lhs_contracting, "lhs_contracting_dims", lhs, "lhs", lhs, rhs);
  check_axes(d.rhs_contracting, "rhs_contracting_dims", rhs, "rhs", lhs, rhs);
  check_axes(d.lhs_batch, "lhs_batch_dims", lhs, "lhs", lhs, rhs);
  check_axes(d.rhs_batch, "rhs_batch_dims", rhs, "rhs", lhs, rhs);
  check_disjoint(d.lhs_contracting, d.lhs_batch, "lhs", lhs, rhs);
  check_disjoint(d.rhs_contracting, d.rhs_batch, "rhs", lhs, rhs);
  check_pairs(d.lhs_contracting, d.rhs_contracting, "contracting", lhs, rhs);
  check_pairs(d.lhs_batch, d.rhs_batch, "batch", lhs, rhs);
  DType out_dtype = lhs.dtype;
  if (p.has("preferred_element_type")) {
    out_dtype = p.dtype("preferred_element_type");
    check_preferred(lhs.dtype, out_dtype, lhs, rhs);
  }
  std::vector<int64_t> out;
  for (int64_t a : d.lhs_batch) out.push_back(lhs.shape[a]);
  for (int64_t a : free_axes(lhs.shape.rank(), d.lhs_contracting, d.lhs_batch)) out.push_back(lhs.shape[a]);
  const std::vector<int64_t> rhs_free = free_axes(rhs.shape.rank(), d.rhs_contracting, d.rhs_batch);
  for (int64_t a : rhs_free) out.push_back(rhs.shape[a]);
  if (with_bias) {
    const AVal& bias = in[2];
    const int64_t r = bias.shape.rank();
    bool trailing = bias.dtype == out_dtype && r <= int64_t(rhs_free.size());
    for (int64_t i = 0; trailing && i < r; ++i) trailing = bias.shape[i] == out[out.size() - size_t(r - i)];
    PAX_CHECK(trailing, "dot_general: bias ", bias.str(), " must have the result's dtype ", dtype_name(out_dtype),
              " and its trailing dims among the rhs free dims of ", Shape(out));
  }
  if (with_multiplier) {
    const AVal& m = in.back();
    PAX_CHECK(m.dtype == out_dtype && m.shape == Shape(out), "dot_general: multiplier ", m.str(),
              " must have the result's dtype and shape, ", AVal{Shape(out), out_dtype, false}.str());
  }
  PAX_CHECK(!dot_has_relu(p) || is_floating(out_dtype), "dot_general: a ReLU of ", dtype_name(out_dtype),
            " products is not computed (float results only)");
  return {AVal{Shape(out), out_dtype, false}};
}

}  // namespace

void register_dot_prims(PrimTable& t) { t[size_t(Prim::dot_general)] = PrimDef{dot_general_rule}; }

}  // namespace pax
