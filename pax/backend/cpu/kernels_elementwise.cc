// CPU kernels of the elementwise primitives: unary math, binary arithmetic /
// logic / comparison, integer_pow, convert_element_type and select_n. Each
// splits its operands into chunks of ~256 KiB and runs the contiguous kernels
// of elementwise.h on them in parallel. The primitives computed by one
// operation get their kernel from prims.def's kernel column; the ones whose
// kernel takes parameters are registered by hand.
#include <algorithm>
#include <cstring>
#include <vector>

#include "pax/backend/cpu/elementwise.h"
#include "pax/backend/cpu/kernels.h"
#include "pax/core/parallel.h"
#include "pax/prims/registry.h"

namespace pax::cpu {
namespace {

int64_t grain(DType d) { return grain_for(int64_t(itemsize(d))); }

template <cpu::UnaryOp Op>
void unary_kernel(const KernelContext& ctx, const Params&, std::span<const TensorView> in,
                  std::span<const TensorView> out) {
  const TensorView& x = in[0];
  const size_t w = itemsize(x.dtype);
  parallel_for(x.numel(), grain(x.dtype), [&](int64_t b, int64_t e) {
    cpu::unary(Op, x.dtype, x.as<char>() + b * w, out[0].as<char>() + b * w, size_t(e - b));
  });
}

void round_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                  std::span<const TensorView> out) {
  if (rounds_half_to_even(p)) unary_kernel<cpu::UnaryOp::round_even>(ctx, p, in, out);
  else unary_kernel<cpu::UnaryOp::round_away>(ctx, p, in, out);
}

template <cpu::BinaryOp Op>
void binary_kernel(const KernelContext& ctx, const Params&, std::span<const TensorView> in,
                   std::span<const TensorView> out) {
  const TensorView& a = in[0];
  const size_t w = itemsize(a.dtype);
  parallel_for(a.numel(), grain(a.dtype), [&](int64_t b, int64_t e) {
    cpu::binary(Op, a.dtype, a.as<char>() + b * w, in[1].as<char>() + b * w, out[0].as<char>() + b * w, size_t(e - b));
  });
}

template <cpu::CompareOp Op>
void compare_kernel(const KernelContext& ctx, const Params&, std::span<const TensorView> in,
                    std::span<const TensorView> out) {
  const TensorView& a = in[0];
  const size_t w = itemsize(a.dtype);
  parallel_for(a.numel(), grain(a.dtype), [&](int64_t b, int64_t e) {
    cpu::compare(Op, a.dtype, a.as<char>() + b * w, in[1].as<char>() + b * w, out[0].as<bool>() + b, size_t(e - b));
  });
}

void is_finite_kernel(const KernelContext& ctx, const Params&, std::span<const TensorView> in,
                      std::span<const TensorView> out) {
  const TensorView& x = in[0];
  const size_t w = itemsize(x.dtype);
  parallel_for(x.numel(), grain(x.dtype), [&](int64_t b, int64_t e) {
    cpu::is_finite(x.dtype, x.as<char>() + b * w, out[0].as<bool>() + b, size_t(e - b));
  });
}

void integer_pow_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                        std::span<const TensorView> out) {
  const TensorView& x = in[0];
  const size_t w = itemsize(x.dtype);
  const int64_t y = p.i("y");
  parallel_for(x.numel(), grain(x.dtype), [&](int64_t b, int64_t e) {
    cpu::integer_pow(x.dtype, y, x.as<char>() + b * w, out[0].as<char>() + b * w, size_t(e - b));
  });
}

void convert_kernel(const KernelContext& ctx, const Params&, std::span<const TensorView> in,
                    std::span<const TensorView> out) {
  cpu::convert_parallel(in[0].dtype, in[0].data, out[0].dtype, out[0].data, in[0].numel());
}

void select_n_kernel(const KernelContext& ctx, const Params&, std::span<const TensorView> in,
                     std::span<const TensorView> out) {
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
    cpu::select_n(which.dtype, which.as<char>() + b * ww, ptrs, num_cases, w, y.as<char>() + b * w, size_t(e - b));
  });
}

template <Prim P>
void set_kernel(CpuKernelTable& t) {
  constexpr ElementwiseKernel k = kPrimKernels[size_t(P)];
  if constexpr (k.kind == ElementwiseKernel::Kind::unary) {
    t[size_t(P)] = unary_kernel<UnaryOp(k.op)>;
  } else if constexpr (k.kind == ElementwiseKernel::Kind::binary) {
    t[size_t(P)] = binary_kernel<BinaryOp(k.op)>;
  } else if constexpr (k.kind == ElementwiseKernel::Kind::compare) {
    t[size_t(P)] = compare_kernel<CompareOp(k.op)>;
  }
}

}  // namespace

void register_elementwise_kernels(CpuKernelTable& t) {
#define PAX_PRIM(id, name, arity, family, accepts, cost, kernel, recompute, wrapper) set_kernel<Prim::id>(t);
#include "pax/ir/prims.def"
#undef PAX_PRIM
  t[size_t(Prim::round)] = round_kernel;
  t[size_t(Prim::is_finite)] = is_finite_kernel;
  t[size_t(Prim::integer_pow)] = integer_pow_kernel;
  t[size_t(Prim::convert_element_type)] = convert_kernel;
  t[size_t(Prim::select_n)] = select_n_kernel;
}

}  // namespace pax::cpu
