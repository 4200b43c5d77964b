// CPU kernels of the reduction primitives: reduce_sum / max / min / prod /
// and / or, argmax / argmin and cumsum. They bring any axis set to the
// (outer, reduced, inner) form of the drivers in reduce.h: unit dimensions
// are dropped and adjacent dimensions merged; reduced axes that are not
// adjacent take one pass per group of adjacent ones.
#include <memory>
#include <vector>

#include "pax/backend/cpu/kernels.h"
#include "pax/backend/cpu/reduce.h"
#include "pax/core/buffer.h"

namespace pax::cpu {
namespace {

template <Prim P>
constexpr cpu::ReduceOp kReduceOp = P == Prim::reduce_sum    ? cpu::ReduceOp::sum
                                    : P == Prim::reduce_prod ? cpu::ReduceOp::prod
                                    : P == Prim::reduce_max  ? cpu::ReduceOp::max
                                    : P == Prim::reduce_min  ? cpu::ReduceOp::min
                                    : P == Prim::reduce_and  ? cpu::ReduceOp::and_
                                                             : cpu::ReduceOp::or_;

// Adjacent dimensions with the same role merged; unit dimensions dropped.
struct Group {
  bool reduced;
  int64_t size;
};

std::vector<Group> merge_dims(const Shape& s, const std::vector<int64_t>& axes) {
  std::vector<bool> reduced(size_t(s.rank()), false);
  for (int64_t a : axes) reduced[size_t(a)] = true;
  std::vector<Group> groups;
  for (int64_t d = 0; d < s.rank(); ++d) {
    if (s[d] == 1) continue;
    if (!groups.empty() && groups.back().reduced == reduced[size_t(d)]) groups.back().size *= s[d];
    else groups.push_back({reduced[size_t(d)], s[d]});
  }
  return groups;
}

// Reduced axes that are not adjacent (e.g. {0, 2} of NCHW-like layouts) are
// reduced one group at a time, innermost first: each pass is a plain
// (outer, n, inner) reduction whose result is smaller than its input, which
// moves less memory than transposing the reduced axes together first.
// Intermediate results stay in the accumulator dtype (no double rounding).
template <Prim P>
void reduce_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                   std::span<const TensorView> out) {
  const TensorView& x = in[0];
  const TensorView& y = out[0];
  const int64_t m = y.numel();
  if (m == 0) return;
  if (x.numel() == 0) return cpu::reduce(ctx, kReduceOp<P>, x.dtype, x.data, y.dtype, y.data, m, 0, 1);
  std::vector<Group> groups = merge_dims(*x.shape, normalize_axes(p.ints("axes"), x.rank(), prim_name(P)));
  const DType acc = cpu::accumulator_dtype(x.dtype);
  const void* src = x.data;
  DType src_dtype = x.dtype;
  std::shared_ptr<Buffer> held;
  while (true) {
    // The innermost reduced group g and what lies before / after it.
    size_t g = groups.size();
    while (g > 0 && !groups[g - 1].reduced) --g;
    if (g == 0) return cpu::reduce(ctx, kReduceOp<P>, src_dtype, src, y.dtype, y.data, m, 1, 1);  // a copy
    --g;
    int64_t outer = 1, inner = 1;
    bool more = false;
    for (size_t k = 0; k < g; ++k) {
      outer *= groups[k].size;
      more = more || groups[k].reduced;
    }
    for (size_t k = g + 1; k < groups.size(); ++k) inner *= groups[k].size;
    const int64_t n = groups[g].size;
    if (!more) return cpu::reduce(ctx, kReduceOp<P>, src_dtype, src, y.dtype, y.data, outer, n, inner);
    std::shared_ptr<Buffer> next = ctx.allocate_scratch(size_t(outer * inner) * itemsize(acc));
    cpu::reduce(ctx, kReduceOp<P>, src_dtype, src, acc, next->data(), outer, n, inner);
    held = std::move(next);
    src = held->data();
    src_dtype = acc;
    // Drop the group; kept groups on either side merge (groups[g - 1] is kept).
    groups.erase(groups.begin() + int64_t(g));
    if (g < groups.size()) {
      groups[g - 1].size *= groups[g].size;
      groups.erase(groups.begin() + int64_t(g));
    }
  }
}

// The (outer, n, inner) form around one axis.
struct Canonical {
  int64_t outer = 1, n = 1, inner = 1;
};

Canonical around_axis(const Shape& s, int64_t axis) {
  Canonical c;
  for (int64_t d = 0; d < s.rank(); ++d) (d < axis ? c.outer : d == axis ? c.n : c.inner) *= s[d];
  return c;
}

template <Prim P>
void arg_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                std::span<const TensorView> out) {
  const TensorView& x = in[0];
  const Canonical c = around_axis(*x.shape, normalize_axis(p.i("axis"), x.rank(), prim_name(P)));
  cpu::argreduce(ctx, P == Prim::argmax, x.dtype, out[0].dtype, x.data, out[0].data, c.outer, c.n, c.inner);
}

void cumsum_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                   std::span<const TensorView> out) {
  const TensorView& x = in[0];
  const Canonical c = around_axis(*x.shape, normalize_axis(p.i("axis"), x.rank(), "cumsum"));
  cpu::cumsum(ctx, x.dtype, x.data, out[0].data, c.outer, c.n, c.inner, p.b("reverse"));
}

template <Prim... Ps>
void set_reduce_kernels(CpuKernelTable& t) {
  ((t[size_t(Ps)] = reduce_kernel<Ps>), ...);
}

}  // namespace

void register_reduce_kernels(CpuKernelTable& t) {
  set_reduce_kernels<Prim::reduce_sum, Prim::reduce_max, Prim::reduce_min, Prim::reduce_prod, Prim::reduce_and,
                     Prim::reduce_or>(t);
  t[size_t(Prim::argmax)] = arg_kernel<Prim::argmax>;
  t[size_t(Prim::argmin)] = arg_kernel<Prim::argmin>;
  t[size_t(Prim::cumsum)] = cumsum_kernel;
}

}  // namespace pax::cpu
