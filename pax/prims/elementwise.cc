// Elementwise primitives: unary math, binary arithmetic / logic / comparison,
// integer_pow, convert_element_type, bitcast_convert_type and select_n.
// Operands of binary primitives must have equal shapes and dtypes (jax.lax
// semantics); numpy broadcasting and type promotion happen in pax/ops.
// Shape/dtype rules only; the CPU kernels are the backend's
// (kernels_elementwise.cc).
#include <string>
#include <vector>

#include "pax/core/error.h"
#include "pax/prims/dtype_rules.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

// ---------------------------------------------------------------------------
// dtype classes and checks

// prims.def's accepts column.
Accepts accepts_of(Prim p) {
  const std::optional<Accepts> a = prim_accepts(p);
  PAX_CHECK(a, prim_name(p), ": prims.def names no dtype class for an elementwise shape rule");
  return *a;
}

bool is_comparison(Prim p) { return prim_kernel(p).kind == ElementwiseKernel::Kind::compare; }

// ---------------------------------------------------------------------------
// shape rules

template <Prim P>
std::vector<AVal> unary_rule(std::span<const AVal> in, const Params&) {
  check_accepts(P, accepts_of(P), in[0]);
  AVal out = in[0];
  if constexpr (P == Prim::is_finite) {
    out.dtype = DType::bool_;
    out.weak_type = false;
  }
  return {out};
}

template <Prim P>
std::vector<AVal> binary_rule(std::span<const AVal> in, const Params&) {
  const AVal& a = in[0];
  const AVal& b = in[1];
  PAX_CHECK(a.shape == b.shape, prim_name(P), ": operand shapes must be equal, got ", a.str(), " and ", b.str(),
            " (use pax::", prim_name(P), " from pax/ops for numpy broadcasting)");
  PAX_CHECK(a.dtype == b.dtype, prim_name(P), ": operand dtypes must be equal, got ", a.str(), " and ", b.str(),
            " (pax/ops promotes dtypes; lax-level primitives do not)");
  check_accepts(P, accepts_of(P), a);
  AVal out{a.shape, a.dtype, a.weak_type && b.weak_type};
  if (is_comparison(P)) {
    out.dtype = DType::bool_;
    out.weak_type = false;
  }
  return {out};
}

std::vector<AVal> integer_pow_rule(std::span<const AVal> in, const Params& p) {
  check_accepts(Prim::integer_pow, accepts_of(Prim::integer_pow), in[0]);
  p.i("y");
  return {in[0]};
}

std::vector<AVal> convert_rule(std::span<const AVal> in, const Params& p) {
  AVal out = in[0];
  out.dtype = p.dtype("new_dtype");
  out.weak_type = p.has("weak_type") && p.b("weak_type");
  return {out};
}

std::vector<AVal> bitcast_rule(std::span<const AVal> in, const Params& p) {
  DType to = p.dtype("new_dtype");
  PAX_CHECK(itemsize(to) == itemsize(in[0].dtype), "bitcast_convert_type: ", in[0].str(), " to ", dtype_name(to),
            " changes the element width (", itemsize(in[0].dtype), " vs ", itemsize(to),
            " bytes); only same-width bitcasts are supported");
  return {AVal{in[0].shape, to, false}};
}

std::vector<AVal> select_n_rule(std::span<const AVal> in, const Params&) {
  PAX_CHECK(in.size() >= 2, "select_n: needs a selector and at least one case, got ", in.size(), " operands");
  const AVal& which = in[0];
  const AVal& first = in[1];
  PAX_CHECK(which.dtype == DType::bool_ || which.dtype == DType::i32, "select_n: selector ", which.str(),
            " must be bool or int32");
  PAX_CHECK(which.dtype != DType::bool_ || in.size() == 3, "select_n: a bool selector needs exactly 2 cases, got ",
            in.size() - 1);
  PAX_CHECK(which.shape.rank() == 0 || which.shape == first.shape, "select_n: selector shape ", which.str(),
            " must be scalar or equal to the case shape ", first.str());
  bool weak = true;
  for (size_t i = 1; i < in.size(); ++i) {
    PAX_CHECK(in[i].shape == first.shape && in[i].dtype == first.dtype, "select_n: case ", i - 1, " is ", in[i].str(),
              " but case 0 is ", first.str(), "; all cases must have the same shape and dtype");
    weak = weak && in[i].weak_type;
  }
  return {AVal{first.shape, first.dtype, weak}};
}

template <Prim P>
void set_rule(PrimTable& t) {
  constexpr ElementwiseKernel k = kPrimKernels[size_t(P)];
  if constexpr (k.kind == ElementwiseKernel::Kind::unary) {
    t[size_t(P)] = PrimDef{unary_rule<P>};
  } else if constexpr (k.kind == ElementwiseKernel::Kind::binary || k.kind == ElementwiseKernel::Kind::compare) {
    t[size_t(P)] = PrimDef{binary_rule<P>};
  }
}

}  // namespace

void register_elementwise_prims(PrimTable& t) {
  // Primitives computed by one elementwise operation (prims.def's kernel
  // column) share the unary and binary rules; the special ones (kernels with
  // parameters) follow by hand.
#define PAX_PRIM(id, name, arity, family, accepts, cost, kernel, recompute, wrapper) set_rule<Prim::id>(t);
#include "pax/ir/prims.def"
#undef PAX_PRIM
  t[size_t(Prim::round)] = PrimDef{unary_rule<Prim::round>};
  t[size_t(Prim::is_finite)] = PrimDef{unary_rule<Prim::is_finite>};
  t[size_t(Prim::integer_pow)] = PrimDef{integer_pow_rule};
  t[size_t(Prim::convert_element_type)] = PrimDef{convert_rule};
  t[size_t(Prim::bitcast_convert_type)] = PrimDef{.shape_rule = bitcast_rule, .output_aliases_input = 0};

  t[size_t(Prim::select_n)] = PrimDef{select_n_rule};
}

}  // namespace pax
