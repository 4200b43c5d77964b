// Elementwise primitives: unary math, binary arithmetic / logic / comparison,
// integer_pow, convert_element_type, bitcast_convert_type and select_n.
// Operands of binary primitives must have equal shapes and dtypes (jax.lax
// semantics); numpy broadcasting and type promotion happen in pax/ops.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "pax/backend/cpu/elementwise.h"
#include "pax/core/parallel.h"
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
  PAX_CHECK(a.shape == b.shape, prim_name(P), ": operand shapes must be equal, got ", a.str(), " and ",
            b.str(), " (use pax::", prim_name(P), " from pax/ops for numpy broadcasting)");
  PAX_CHECK(a.dtype == b.dtype, prim_name(P), ": operand dtypes must be equal, got ", a.str(), " and ",
            b.str(), " (pax/ops promotes dtypes; lax-level primitives do not)");
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
  PAX_CHECK(itemsize(to) == itemsize(in[0].dtype), "bitcast_convert_type: ", in[0].str(), " to ",
            dtype_name(to), " changes the element width (", itemsize(in[0].dtype), " vs ", itemsize(to),
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
    PAX_CHECK(in[i].shape == first.shape && in[i].dtype == first.dtype, "select_n: case ", i - 1, " is ",
              in[i].str(), " but case 0 is ", first.str(), "; all cases must have the same shape and dtype");
    weak = weak && in[i].weak_type;
  }
  return {AVal{first.shape, first.dtype, weak}};
}

// ---------------------------------------------------------------------------
// kernels: split into chunks of ~256 KiB and run the contiguous kernels.

int64_t grain(DType d) { return grain_for(int64_t(itemsize(d))); }

template <cpu::UnaryOp Op>
void unary_kernel(const Params&, std::span<const TensorView> in, std::span<const TensorView> out) {
  const TensorView& x = in[0];
  const size_t w = itemsize(x.dtype);
  parallel_for(x.numel(), grain(x.dtype), [&](int64_t b, int64_t e) {
    cpu::unary(Op, x.dtype, x.as<char>() + b * w, out[0].as<char>() + b * w, size_t(e - b));
  });
}

void round_kernel(const Params& p, std::span<const TensorView> in, std::span<const TensorView> out) {
  if (rounds_half_to_even(p)) unary_kernel<cpu::UnaryOp::round_even>(p, in, out);
  else unary_kernel<cpu::UnaryOp::round_away>(p, in, out);
}

template <cpu::BinaryOp Op>
void binary_kernel(const Params&, std::span<const TensorView> in, std::span<const TensorView> out) {
  const TensorView& a = in[0];
  const size_t w = itemsize(a.dtype);
  parallel_for(a.numel(), grain(a.dtype), [&](int64_t b, int64_t e) {
    cpu::binary(Op, a.dtype, a.as<char>() + b * w, in[1].as<char>() + b * w, out[0].as<char>() + b * w,
                size_t(e - b));
  });
}

template <cpu::CompareOp Op>
void compare_kernel(const Params&, std::span<const TensorView> in, std::span<const TensorView> out) {
  const TensorView& a = in[0];
  const size_t w = itemsize(a.dtype);
  parallel_for(a.numel(), grain(a.dtype), [&](int64_t b, int64_t e) {
    cpu::compare(Op, a.dtype, a.as<char>() + b * w, in[1].as<char>() + b * w, out[0].as<bool>() + b,
                 size_t(e - b));
  });
}

void is_finite_kernel(const Params&, std::span<const TensorView> in, std::span<const TensorView> out) {
  const TensorView& x = in[0];
  const size_t w = itemsize(x.dtype);
  parallel_for(x.numel(), grain(x.dtype), [&](int64_t b, int64_t e) {
    cpu::is_finite(x.dtype, x.as<char>() + b * w, out[0].as<bool>() + b, size_t(e - b));
  });
}

void integer_pow_kernel(const Params& p, std::span<const TensorView> in, std::span<const TensorView> out) {
  const TensorView& x = in[0];
  const size_t w = itemsize(x.dtype);
  const int64_t y = p.i("y");
  parallel_for(x.numel(), grain(x.dtype), [&](int64_t b, int64_t e) {
    cpu::integer_pow(x.dtype, y, x.as<char>() + b * w, out[0].as<char>() + b * w, size_t(e - b));
  });
}

void convert_kernel(const Params&, std::span<const TensorView> in, std::span<const TensorView> out) {
  cpu::convert_parallel(in[0].dtype, in[0].data, out[0].dtype, out[0].data, in[0].numel());
}

void select_n_kernel(const Params&, std::span<const TensorView> in, std::span<const TensorView> out) {
  const TensorView& which = in[0];
  const TensorView& y = out[0];
  const size_t w = itemsize(y.dtype);
  const size_t num_cases = in.size() - 1;
  if (which.rank() == 0 && y.numel() != 1) {
    int64_t k = which.dtype == DType::bool_ ? int64_t(*which.as<bool>()) : int64_t(*which.as<int32_t>());
    k = std::clamp<int64_t>(k, 0, int64_t(num_cases) - 1);
    std::memcpy(y.data, in[size_t(k) + 1].data, y.nbytes());
    return;
  }
  const size_t ww = itemsize(which.dtype);
  parallel_for(y.numel(), grain(y.dtype), [&](int64_t b, int64_t e) {
    const void* cases[16];
    std::vector<const void*> many;
    const void** ptrs = cases;
    if (num_cases > 16) {
      many.resize(num_cases);
      ptrs = many.data();
    }
    for (size_t c = 0; c < num_cases; ++c) ptrs[c] = in[c + 1].as<char>() + b * w;
    cpu::select_n(which.dtype, which.as<char>() + b * ww, ptrs, num_cases, w, y.as<char>() + b * w,
                  size_t(e - b));
  });
}

template <Prim P>
void set_kernel(PrimTable& t) {
  constexpr ElementwiseKernel k = kPrimKernels[size_t(P)];
  if constexpr (k.kind == ElementwiseKernel::Kind::unary) {
    t[size_t(P)] = PrimDef{unary_rule<P>, unary_kernel<UnaryOp(k.op)>};
  } else if constexpr (k.kind == ElementwiseKernel::Kind::binary) {
    t[size_t(P)] = PrimDef{binary_rule<P>, binary_kernel<BinaryOp(k.op)>};
  } else if constexpr (k.kind == ElementwiseKernel::Kind::compare) {
    t[size_t(P)] = PrimDef{binary_rule<P>, compare_kernel<CompareOp(k.op)>};
  }
}

}  // namespace

void register_elementwise_prims(PrimTable& t) {
  // Primitives computed by one elementwise operation: prims.def's kernel
  // column; the special ones (kernels with parameters) follow by hand.
#define PAX_PRIM(id, name, arity, family, accepts, cost, kernel, recompute) set_kernel<Prim::id>(t);
#include "pax/ir/prims.def"
#undef PAX_PRIM
  t[size_t(Prim::round)] = PrimDef{unary_rule<Prim::round>, round_kernel};
  t[size_t(Prim::is_finite)] = PrimDef{unary_rule<Prim::is_finite>, is_finite_kernel};
  t[size_t(Prim::integer_pow)] = PrimDef{integer_pow_rule, integer_pow_kernel};
  t[size_t(Prim::convert_element_type)] = PrimDef{convert_rule, convert_kernel};
  t[size_t(Prim::bitcast_convert_type)] = PrimDef{bitcast_rule, nullptr, 0};

  t[size_t(Prim::select_n)] = PrimDef{select_n_rule, select_n_kernel};
}

}  // namespace pax
