// The CPU kernel of dot_general. It views the operation as a batched matmul
// (batch, m, k) x (batch, k, n) -> (batch, m, n) over strided views of the
// operands, so transposed operands (A^T B, A B^T of backprop, attention's
// contracting of the last axes) need no copy; batch axes may form two strided
// dimensions (attention's batch and heads); operands whose axes cannot be
// merged into such a view are transposed first. oneDNN runs the floating
// products (gemm_dnnl.h), a blocked loop the integer and f64 ones.
#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <vector>

#include "pax/backend/cpu/copy.h"
#include "pax/backend/cpu/elementwise.h"
#include "pax/backend/cpu/gemm_dnnl.h"
#include "pax/backend/cpu/kernels.h"
#include "pax/core/parallel.h"
#include "pax/core/buffer.h"
#include "pax/core/error.h"
#include "pax/prims/dot_params.h"

namespace pax::cpu {
namespace {

// A list of axes of one operand that become one dimension of the matmul view.
struct AxisGroup {
  std::vector<int64_t> sizes, strides;
  int64_t numel() const { return std::accumulate(sizes.begin(), sizes.end(), int64_t(1), std::multiplies<>()); }
};

AxisGroup group(const TensorView& t, const std::vector<int64_t>& strides, const std::vector<int64_t>& axes) {
  AxisGroup g;
  for (int64_t a : axes) {
    g.sizes.push_back(t.dim(a));
    g.strides.push_back(strides[size_t(a)]);
  }
  return g;
}

// The single stride of the merged group, if its axes (size-1 axes aside) are
// laid out as one row-major run; any value does for a group of size 1.
std::optional<int64_t> merged_stride(const AxisGroup& g) {
  std::optional<int64_t> stride;
  int64_t inner = 0;  // stride expected of the next non-trivial axis, 0 before the first
  for (size_t i = 0; i < g.sizes.size(); ++i) {
    if (g.sizes[i] == 1) continue;
    if (inner != 0 && g.strides[i] * g.sizes[i] != inner) return std::nullopt;
    inner = g.strides[i];
    stride = g.strides[i];
  }
  return stride ? stride : std::optional<int64_t>(0);
}

// The first `count` axes of g (from the front), or the rest (from `count` on).
AxisGroup axes_before(const AxisGroup& g, size_t count) {
  return {{g.sizes.begin(), g.sizes.begin() + ptrdiff_t(count)},
          {g.strides.begin(), g.strides.begin() + ptrdiff_t(count)}};
}
AxisGroup axes_from(const AxisGroup& g, size_t count) {
  return {{g.sizes.begin() + ptrdiff_t(count), g.sizes.end()}, {g.strides.begin() + ptrdiff_t(count), g.strides.end()}};
}

// Where the paired batch axes of both operands split into two runs that each
// merge to one stride (attention's batch and heads axes of (batch, seq, heads,
// dim) arrays, with the sequence axis between them); none when one run would
// be trivial or no split works.
std::optional<size_t> two_run_batch_split(const AxisGroup& a, const AxisGroup& b) {
  for (size_t j = 1; j < a.sizes.size(); ++j) {
    const AxisGroup a0 = axes_before(a, j), a1 = axes_from(a, j), b0 = axes_before(b, j), b1 = axes_from(b, j);
    if (a0.numel() > 1 && a1.numel() > 1 && merged_stride(a0) && merged_stride(a1) && merged_stride(b0) &&
        merged_stride(b1)) {
      return j;
    }
  }
  return std::nullopt;
}

// One operand as (batch, rows, cols) groups.
struct Operand {
  const TensorView* view;
  AxisGroup batch, rows, cols;
};

// Orders the contracting pairs so that the contracting axes of both operands
// merge when their layouts allow (the pairing itself is fixed, the order is free).
void order_contracting(Ints& lc, Ints& rc, const TensorView& lhs, const std::vector<int64_t>& ls, const TensorView& rhs,
                       const std::vector<int64_t>& rs) {
  if (lc.size() < 2) return;
  std::vector<size_t> idx(lc.size());
  auto try_order = [&](const std::vector<int64_t>& s, const Ints& axes) {
    std::iota(idx.begin(), idx.end(), size_t(0));
    std::stable_sort(idx.begin(), idx.end(),
                     [&](size_t x, size_t y) { return s[size_t(axes[x])] > s[size_t(axes[y])]; });
    Ints l, r;
    for (size_t i : idx) {
      l.push_back(lc[i]);
      r.push_back(rc[i]);
    }
    if (merged_stride(group(lhs, ls, l)) && merged_stride(group(rhs, rs, r))) {
      lc = l;
      rc = r;
      return true;
    }
    return false;
  };
  if (!try_order(ls, lc)) try_order(rs, rc);
}

// The operand as a (batch, rows, cols) array of `dtype` with rows
// `row_stride` elements apart (cols, or more where the GEMM asks for padded
// rows): in place when it already is one, otherwise copied (and converted)
// into scratch from ctx that `keep` holds.
const void* packed_operand(const KernelContext& ctx, const Operand& op, DType dtype, int64_t row_stride,
                           std::shared_ptr<Buffer>& keep) {
  const TensorView& t = *op.view;
  std::vector<int64_t> dims, src_strides;
  for (const AxisGroup* g : {&op.batch, &op.rows, &op.cols}) {
    dims.insert(dims.end(), g->sizes.begin(), g->sizes.end());
    src_strides.insert(src_strides.end(), g->strides.begin(), g->strides.end());
  }
  const int64_t n = t.numel(), cols = op.cols.numel(), rows = n / std::max<int64_t>(cols, 1);
  const bool dense = row_stride == cols;
  const bool in_order = n <= 1 || merged_stride(AxisGroup{dims, src_strides}) == std::optional<int64_t>(1);
  if (in_order && dense && t.dtype == dtype) return t.data;
  // Row-major strides, with `row_stride` for the axis just outside the columns.
  std::vector<int64_t> dst_strides(dims.size());
  int64_t stride = 1;
  for (size_t i = dims.size(), first_col = dims.size() - op.cols.sizes.size(); i-- > 0;) {
    dst_strides[i] = stride;
    stride *= dims[i];
    if (i == first_col) stride = row_stride;
  }
  keep = ctx.allocate_scratch(size_t(rows * row_stride) * itemsize(dtype));
  if (t.dtype == dtype) {
    cpu::strided_copy(itemsize(dtype), dims, t.data, src_strides, keep->data(), dst_strides);
  } else if (in_order && dense) {
    cpu::convert_parallel(t.dtype, t.data, dtype, keep->data(), n);
  } else {
    const void* src = t.data;
    std::shared_ptr<Buffer> tmp;
    if (!in_order) {
      tmp = ctx.allocate_scratch(t.nbytes());
      cpu::strided_copy(itemsize(t.dtype), dims, t.data, src_strides, tmp->data(), Shape(dims).strides());
      src = tmp->data();
    }
    const size_t from = itemsize(t.dtype), to = itemsize(dtype);
    parallel_for(rows, 16, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        cpu::convert(t.dtype, static_cast<const char*>(src) + size_t(r * cols) * from, dtype,
                     static_cast<char*>(keep->data()) + size_t(r * row_stride) * to, size_t(cols));
      }
    });
  }
  return keep->data();
}

// The dtype the product is computed in where the CPU has kernels for it (its
// inputs converted to it when different), from the input and output dtypes.
DType compute_dtype(DType in, DType out) {
  if (is_integer(out) || out == DType::f64) return out;
  if (in == DType::bf16 || in == DType::f16) return in;
  return DType::f32;
}

// o[i] += bias[i % bias.numel()] over a row-major o, computed in T (f64 for
// f64, f32 for the other floats) and rounded once, as the separate add would.
template <class T>
void add_bias_in(const TensorView& o, const TensorView& bias, DType wide) {
  const int64_t period = bias.numel(), rows = o.numel() / period;
  std::vector<T> b(static_cast<size_t>(period));
  cpu::convert(bias.dtype, bias.data, wide, b.data(), size_t(period));
  const size_t width = itemsize(o.dtype);
  parallel_for(rows, grain_for(size_t(period) * width), [&](int64_t begin, int64_t end) {
    std::vector<T> row(static_cast<size_t>(period));
    for (int64_t r = begin; r < end; ++r) {
      char* dst = static_cast<char*>(o.data) + size_t(r * period) * width;
      cpu::convert(o.dtype, dst, wide, row.data(), size_t(period));
      for (int64_t j = 0; j < period; ++j) row[size_t(j)] += b[size_t(j)];
      cpu::convert(wide, row.data(), o.dtype, dst, size_t(period));
    }
  });
}

// o = relu(o) in place, as pax::nn::relu computes it: x <= 0 gives +0.0,
// NaNs stay. 16-bit floats are compared in their bits: a sign bit and
// anything but a NaN pattern is <= 0, and so is +0.
template <class T>
void relu_float(T* x, int64_t n) {
  parallel_for(n, 16384, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) x[i] = x[i] <= T(0) ? T(0) : x[i];
  });
}

void relu_16bit(uint16_t* x, int64_t n, uint16_t nan_from) {
  parallel_for(n, 16384, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const uint16_t magnitude = x[i] & 0x7fff;
      if (magnitude < nan_from && (x[i] >> 15 || magnitude == 0)) x[i] = 0;
    }
  });
}

void apply_relu(const TensorView& o) {
  switch (o.dtype) {
    case DType::f32: return relu_float(static_cast<float*>(o.data), o.numel());
    case DType::f64: return relu_float(static_cast<double*>(o.data), o.numel());
    case DType::bf16: return relu_16bit(static_cast<uint16_t*>(o.data), o.numel(), 0x7f81);  // above the infinity
    case DType::f16: return relu_16bit(static_cast<uint16_t*>(o.data), o.numel(), 0x7c01);
    default:
      PAX_CHECK(false, "dot_general: a ReLU of ", dtype_name(o.dtype),
                " products is not computed on the CPU (float results only)");
  }
}

void add_bias(const TensorView& o, const TensorView& bias) {
  PAX_CHECK(is_floating(o.dtype), "dot_general: a bias of ", dtype_name(o.dtype),
            " products is not computed on the CPU (float results only)");
  if (o.dtype == DType::f64) return add_bias_in<double>(o, bias, DType::f64);
  add_bias_in<float>(o, bias, DType::f32);
}

// The product into `o`, written with `c_strides` when given (element strides
// of o's axes). Returns false, having written nothing, where the strided
// output cannot be handed to oneDNN (its kernels or the operands' layout do
// not allow it); without c_strides it always writes o and returns true.
// With a bias (row-major o only), o = product + bias: inside oneDNN's kernel
// where it runs the product, added afterwards otherwise. With a multiplier
// (row-major f32 o only), oneDNN multiplies o by it inside its kernel where it
// can (after the bias), and `multiplied` says so; the caller multiplies
// otherwise.
bool dot_into(const KernelContext& ctx, const Params& p, std::span<const TensorView> in, const TensorView& o,
              const std::vector<int64_t>* c_strides, const TensorView* bias = nullptr,
              const TensorView* multiplier = nullptr, bool* multiplied = nullptr) {
  PAX_CHECK(!(bias && c_strides), "dot_general: a bias needs a row-major result");
  const TensorView& lhs = in[0];
  const TensorView& rhs = in[1];
  DotDims d = dot_dims(p);
  const std::vector<int64_t> ls = lhs.shape->strides(), rs = rhs.shape->strides();
  order_contracting(d.lhs_contracting, d.rhs_contracting, lhs, ls, rhs, rs);
  const Operand a{&lhs, group(lhs, ls, d.lhs_batch),
                  group(lhs, ls, free_axes(lhs.rank(), d.lhs_contracting, d.lhs_batch)),
                  group(lhs, ls, d.lhs_contracting)};
  const Operand b{&rhs, group(rhs, rs, d.rhs_batch), group(rhs, rs, d.rhs_contracting),
                  group(rhs, rs, free_axes(rhs.rank(), d.rhs_contracting, d.rhs_batch))};
  const cpu::GemmShape shape{a.batch.numel(), a.rows.numel(), b.cols.numel(), a.cols.numel()};
  if (c_strides && (o.numel() == 0 || shape.k == 0)) return false;
  if (o.numel() == 0) return true;
  if (shape.k == 0) {
    std::memset(o.data, 0, o.nbytes());
    if (bias) add_bias(o, *bias);
    return true;
  }

  const DType native = compute_dtype(lhs.dtype, o.dtype);
  if (is_integer(native) || native == DType::f64) {
    if (c_strides) return false;
    std::shared_ptr<Buffer> abuf, bbuf;
    cpu::gemm_blocked(native, shape, packed_operand(ctx, a, native, shape.k, abuf),
                      packed_operand(ctx, b, native, shape.n, bbuf), o.data);
    if (bias) add_bias(o, *bias);
    return true;
  }

  // Without a kernel for 16-bit operands on this CPU (bf16 below AVX-512 BF16
  // or AMX), the operands are widened to f32 and the f32 product, accumulated
  // in f32 as the native kernels accumulate, is rounded to the output dtype.
  const DType out_native = o.dtype == DType::f32 ? DType::f32 : native;
  const DType cd = native == DType::f32 || cpu::gemm_dnnl_supported(shape, native, out_native) ? native : DType::f32;

  // oneDNN writes f32 or the compute dtype; anything else goes through an f32
  // temporary converted at the end.
  const bool direct_out = o.dtype == DType::f32 || o.dtype == cd;
  if (c_strides && !direct_out) return false;
  // The output's (batch, rows, cols) groups in the requested layout.
  AxisGroup c_batch, c_rows, c_cols;
  if (c_strides) {
    const auto at = [&](size_t from, size_t count) {
      return std::vector<int64_t>(c_strides->begin() + ptrdiff_t(from), c_strides->begin() + ptrdiff_t(from + count));
    };
    const size_t nb = a.batch.sizes.size(), nm = a.rows.sizes.size();
    c_batch = {a.batch.sizes, at(0, nb)};
    c_rows = {a.rows.sizes, at(nb, nm)};
    c_cols = {b.cols.sizes, at(nb + nm, b.cols.sizes.size())};
    if (!merged_stride(c_rows) || !merged_stride(c_cols)) return false;
  }
  std::shared_ptr<Buffer> cbuf;
  if (!direct_out) cbuf = ctx.allocate_scratch(size_t(o.numel()) * sizeof(float));
  // oneDNN's bias: n values of C's dtype, the bias repeated where it covers
  // fewer of the trailing dims than the rhs's free ones.
  std::shared_ptr<Buffer> bias_buffer;
  const void* gemm_bias = nullptr;
  if (bias && direct_out && bias->dtype == o.dtype && shape.n % bias->numel() == 0) {
    gemm_bias = bias->data;
    if (bias->numel() < shape.n) {
      const size_t bytes = bias->nbytes();
      bias_buffer = ctx.allocate_scratch(size_t(shape.n / bias->numel()) * bytes);
      for (int64_t i = 0; i < shape.n / bias->numel(); ++i)
        std::memcpy(static_cast<char*>(bias_buffer->data()) + size_t(i) * bytes, bias->data, bytes);
      gemm_bias = bias_buffer->data();
    }
  }
  bool bias_added = false;
  // The multiplier goes inside only after a bias that goes inside too.
  const void* gemm_multiplier = multiplier && !c_strides && o.dtype == DType::f32 && multiplier->dtype == o.dtype &&
                                        (!bias || gemm_bias)
                                    ? multiplier->data
                                    : nullptr;
  const cpu::MatrixView c{direct_out ? o.data : cbuf->data(), direct_out ? o.dtype : DType::f32, shape.m * shape.n,
                          shape.n, 1};

  // First with the operands in place where their axes merge into a strided
  // view (the batch axes into one stride, or two when the split allows),
  // then with both contiguous (supported wherever oneDNN has a kernel).
  const bool one_batch_stride = merged_stride(a.batch) && merged_stride(b.batch);
  const std::optional<size_t> split = one_batch_stride ? std::nullopt : two_run_batch_split(a.batch, b.batch);
  auto attempt = [&](bool force_contiguous) {
    std::shared_ptr<Buffer> abuf, bbuf;
    cpu::GemmShape g = shape;
    cpu::MatrixView cv = c;
    if (split && !force_contiguous) {
      g.inner_batch = axes_from(a.batch, *split).numel();
      cv.batch_stride = g.inner_batch * shape.m * shape.n;
      cv.inner_batch_stride = shape.m * shape.n;
    }
    if (c_strides) {
      cv.row_stride = *merged_stride(c_rows);
      cv.col_stride = *merged_stride(c_cols);
      const auto outer = g.inner_batch > 1 ? merged_stride(axes_before(c_batch, *split)) : merged_stride(c_batch);
      const auto inner = g.inner_batch > 1 ? merged_stride(axes_from(c_batch, *split)) : std::optional<int64_t>(0);
      if (!outer || !inner) return false;
      cv.batch_stride = *outer;
      cv.inner_batch_stride = *inner;
    }
    auto view = [&](const Operand& op, std::shared_ptr<Buffer>& keep, int64_t rows, int64_t cols) {
      auto sr = merged_stride(op.rows), sc = merged_stride(op.cols);
      const bool in_place = !force_contiguous && op.view->dtype == cd && sr && sc;
      if (in_place && g.inner_batch > 1) {
        return cpu::MatrixView{op.view->data, cd,  *merged_stride(axes_before(op.batch, *split)),
                               *sr,           *sc, *merged_stride(axes_from(op.batch, *split))};
      }
      if (auto sb = merged_stride(op.batch); in_place && sb) return cpu::MatrixView{op.view->data, cd, *sb, *sr, *sc};
      const int64_t ld = &op == &b ? cpu::gemm_preferred_row_stride(cd, shape.m, cols) : cols;
      const void* data = packed_operand(ctx, op, cd, ld, keep);
      return cpu::MatrixView{const_cast<void*>(data), cd, g.inner_batch * rows * ld, ld, 1, rows * ld};
    };
    const cpu::MatrixView av = view(a, abuf, shape.m, shape.k);
    const cpu::MatrixView bv = view(b, bbuf, shape.k, shape.n);
    if (gemm_multiplier && cpu::gemm_dnnl(ctx, g, av, bv, cv, gemm_bias, gemm_multiplier)) {
      bias_added = gemm_bias != nullptr;
      if (multiplied) *multiplied = true;
      return true;
    }
    if (gemm_bias && cpu::gemm_dnnl(ctx, g, av, bv, cv, gemm_bias)) return bias_added = true;
    return cpu::gemm_dnnl(ctx, g, av, bv, cv);
  };
  if (!attempt(false) && !attempt(true)) {
    if (c_strides) return false;
    // oneDNN offers only its reference code for f32 here (a build without
    // optimised kernels for this CPU): the blocked loop.
    PAX_CHECK(cd == DType::f32, "dot_general: oneDNN has no matmul for ", dtype_name(cd), " operands on this CPU");
    std::shared_ptr<Buffer> abuf, bbuf;
    cpu::gemm_blocked(DType::f32, shape, packed_operand(ctx, a, DType::f32, shape.k, abuf),
                      packed_operand(ctx, b, DType::f32, shape.n, bbuf), c.data);
  }
  if (!direct_out) cpu::convert_parallel(DType::f32, cbuf->data(), o.dtype, o.data, o.numel());
  if (bias && !bias_added) add_bias(o, *bias);
  return true;
}

void dot_general_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                        std::span<const TensorView> out) {
  const TensorView& o = out[0];
  const TensorView* bias = dot_has_bias(p) ? &in[2] : nullptr;
  const TensorView* multiplier = dot_has_multiplier(p) ? &in.back() : nullptr;
  const bool relu = dot_has_relu(p);
  PAX_CHECK(!(relu && multiplier), "dot_general: a product takes a ReLU or a multiplier, not both");
  // The product row-major into `y`, then multiplied where oneDNN did not, or
  // its ReLU applied (a pass over y right after the product: oneDNN 2.6's
  // ReLU post-op turns NaNs into zeros, or leaves negative denormals with a
  // slope).
  auto row_major_into = [&](const TensorView& y) {
    bool multiplied = false;
    dot_into(ctx, p, in, y, nullptr, bias, multiplier, &multiplied);
    if (relu) apply_relu(y);
    if (multiplier && !multiplied) {
      // y *= multiplier with the eager kernel, rounded as the separate multiply rounds.
      const TensorView operands[] = {y, *multiplier};
      cpu_kernel(Prim::mul)(ctx, Params{}, std::span<const TensorView>(operands), std::span<const TensorView>(&y, 1));
    }
  };
  if (!o.strides) return row_major_into(o);
  if (!bias && !multiplier && !relu && dot_into(ctx, p, in, o, o.strides)) return;
  // The product row-major, then moved into the requested layout.
  std::shared_ptr<Buffer> tmp = ctx.allocate_scratch(o.nbytes());
  const TensorView row_major{tmp->data(), o.shape, o.dtype};
  row_major_into(row_major);
  cpu::strided_copy(itemsize(o.dtype), o.shape->dims(), tmp->data(), o.shape->strides(), o.data, *o.strides);
}

}  // namespace

void register_dot_kernels(CpuKernelTable& t) { t[size_t(Prim::dot_general)] = dot_general_kernel; }

}  // namespace pax::cpu
