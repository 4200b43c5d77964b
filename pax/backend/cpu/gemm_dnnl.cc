// Batched matrix products: oneDNN matmul on strided views, and the blocked
// loop for dtypes oneDNN does not multiply (see gemm_dnnl.h).
#include "pax/backend/cpu/gemm_dnnl.h"

#include <algorithm>
#include <vector>

#include "pax/backend/cpu/copy.h"
#include "pax/backend/cpu/dnnl_context.h"
#include "pax/backend/cpu/elementwise.h"
#include "pax/core/parallel.h"
#include "pax/core/buffer.h"
#include "pax/core/error.h"

namespace pax::cpu {
namespace {

constexpr int64_t kMatmulTag = 1;

struct MatmulEntry {
  bool supported = false;
  dnnl::matmul prim;
  dnnl::memory::desc a_md, b_md, c_md, bias_md;  // bias_md: zero when there is no bias
  size_t scratchpad_bytes = 0;
};

// Strides of one (batch, rows, cols) operand as oneDNN sees them. Size-1
// dimensions get the stride that makes the layout dense row-major when it can
// be, so vectors and single matrices match oneDNN's fast plain layouts.
struct Strides3 {
  int64_t batch, rows, cols;
  int64_t inner_batch = 0;  // with two batch dimensions
};

Strides3 canonical(int64_t batch, int64_t rows, int64_t cols, const MatrixView& v) {
  Strides3 s{v.batch_stride, v.row_stride, v.col_stride, v.inner_batch_stride};
  if (rows == 1 && cols == 1) {
    s.rows = s.cols = 1;
  } else if (rows == 1) {
    s.rows = cols * s.cols;
  } else if (cols == 1) {
    s.cols = 1;  // row-major: the only plain layout oneDNN accepts for C
  }
  if (batch == 1) s.batch = rows * cols;
  return s;
}

dnnl::memory::desc operand_md(const GemmShape& g, int64_t rows, int64_t cols, const Strides3& s, DType dtype) {
  if (g.inner_batch > 1) {
    return strided_md({g.batch / g.inner_batch, g.inner_batch, rows, cols}, {s.batch, s.inner_batch, s.rows, s.cols},
                      dtype);
  }
  if (g.batch > 1) return strided_md({g.batch, rows, cols}, {s.batch, s.rows, s.cols}, dtype);
  return strided_md({rows, cols}, {s.rows, s.cols}, dtype);
}

// The bias of a product: n values broadcast over the batch and the rows.
dnnl::memory::desc bias_md(const GemmShape& g, DType dtype) {
  if (g.inner_batch > 1) return strided_md({1, 1, 1, g.n}, {g.n, g.n, g.n, 1}, dtype);
  if (g.batch > 1) return strided_md({1, 1, g.n}, {g.n, g.n, 1}, dtype);
  return strided_md({1, g.n}, {g.n, 1}, dtype);
}

MatmulEntry make_matmul(const GemmShape& g, const Strides3& sa, const Strides3& sb, const Strides3& sc, DType ab_dtype,
                        DType c_dtype, bool with_bias, bool with_multiplier) {
  MatmulEntry e;
  e.a_md = operand_md(g, g.m, g.k, sa, ab_dtype);
  e.b_md = operand_md(g, g.k, g.n, sb, ab_dtype);
  e.c_md = operand_md(g, g.m, g.n, sc, c_dtype);
  if (with_bias) e.bias_md = bias_md(g, c_dtype);
  try {
    const dnnl::matmul::desc desc = with_bias ? dnnl::matmul::desc(e.a_md, e.b_md, e.bias_md, e.c_md)
                                              : dnnl::matmul::desc(e.a_md, e.b_md, e.c_md);
    dnnl::primitive_attr attr = user_scratchpad_attr();
    if (with_multiplier) {
      dnnl::post_ops ops;
      ops.append_binary(dnnl::algorithm::binary_mul, e.c_md);  // laid out as C
      attr.set_post_ops(ops);
    }
    dnnl::matmul::primitive_desc pd(desc, attr, dnnl_engine());
    if (is_reference_impl(pd)) return e;
    e.prim = dnnl::matmul(pd);
    e.scratchpad_bytes = pd.scratchpad_desc().get_size();
    e.supported = true;
  } catch (const dnnl::error&) {
    // No implementation for these dtypes / strides: reported as unsupported.
  }
  return e;
}

}  // namespace

namespace {

std::shared_ptr<const MatmulEntry> matmul_entry(const GemmShape& g, const MatrixView& a, const MatrixView& b,
                                                const MatrixView& c, bool with_bias, bool with_multiplier = false) {
  const Strides3 sa = canonical(g.batch, g.m, g.k, a);
  const Strides3 sb = canonical(g.batch, g.k, g.n, b);
  const Strides3 sc = canonical(g.batch, g.m, g.n, c);
  const DnnlKey key{kMatmulTag,
                    g.batch,
                    g.m,
                    g.n,
                    g.k,
                    g.inner_batch,
                    sa.batch,
                    sa.rows,
                    sa.cols,
                    sa.inner_batch,
                    sb.batch,
                    sb.rows,
                    sb.cols,
                    sb.inner_batch,
                    sc.batch,
                    sc.rows,
                    sc.cols,
                    sc.inner_batch,
                    int64_t(a.dtype),
                    int64_t(c.dtype),
                    int64_t(with_bias) | int64_t(with_multiplier) << 1};
  return dnnl_cached<MatmulEntry>(
      key, [&] { return make_matmul(g, sa, sb, sc, a.dtype, c.dtype, with_bias, with_multiplier); });
}

}  // namespace

namespace {

// oneDNN's f32 GEMM below AVX-512 picks, for products with a small side
// (1/m + 1/n >= 0.0038 in its own terms, and more cases), kernels that read
// the operands in place instead of packing them. Those run at half rate or
// less when B's rows lie a multiple of 1 KiB apart (every row in the same
// cache sets: 1024 or 4096 columns of f32) and when A is read across its rows
// (A^T of a stored matrix, as weight gradients are). Such operands are
// repacked first: B with rows padded by 64 bytes, A row-major. The copy reads
// and writes each element once, a small part of a product it speeds up by
// 1.5x to 2x (bench/README.md).
bool sgemm_reads_in_place() {
  static const bool in_place = [] {
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    return isa == dnnl::cpu_isa::avx2 || isa == dnnl::cpu_isa::avx2_vnni || isa == dnnl::cpu_isa::avx ||
           isa == dnnl::cpu_isa::sse41;
  }();
  return in_place;
}

// Elements from which an operand is worth repacking.
constexpr int64_t kRepackElements = int64_t(1) << 16;
// Rows of C from which a padded copy of B pays for itself.
constexpr int64_t kRepackBMinRows = 128;
constexpr int64_t kRowPadBytes = 64;

bool bad_row_stride(int64_t row_stride, DType dtype) {
  const int64_t bytes = row_stride * int64_t(itemsize(dtype));
  return bytes >= 2048 && bytes % 1024 == 0;
}

// The (batch, rows, cols) operand `v` copied into scratch from ctx (held by
// `keep`) with rows `row_stride` elements apart; the view of the copy.
MatrixView repacked(const KernelContext& ctx, const GemmShape& g, int64_t rows, int64_t cols, const MatrixView& v,
                    int64_t row_stride, std::shared_ptr<Buffer>& keep) {
  const size_t width = itemsize(v.dtype);
  const int64_t outer = g.batch / g.inner_batch, matrix = rows * row_stride;
  keep = ctx.allocate_scratch(size_t(g.batch * matrix) * width);
  const int64_t dims[] = {outer, g.inner_batch, rows, cols};
  const int64_t src_strides[] = {v.batch_stride, v.inner_batch_stride, v.row_stride, v.col_stride};
  const int64_t dst_strides[] = {g.inner_batch * matrix, matrix, row_stride, 1};
  strided_copy(width, dims, v.data, src_strides, keep->data(), dst_strides);
  return MatrixView{keep->data(), v.dtype, g.inner_batch * matrix, row_stride, 1, matrix};
}

}  // namespace

int64_t gemm_preferred_row_stride(DType dtype, int64_t m, int64_t cols) {
  if (dtype != DType::f32 || m < kRepackBMinRows || !sgemm_reads_in_place() || !bad_row_stride(cols, dtype))
    return cols;
  return cols + kRowPadBytes / int64_t(itemsize(dtype));
}

bool gemm_dnnl(const KernelContext& ctx, const GemmShape& g, const MatrixView& a, const MatrixView& b,
               const MatrixView& c, const void* bias, const void* multiplier) {
  PAX_CHECK(g.batch > 0 && g.m > 0 && g.n > 0 && g.k > 0, "gemm_dnnl: sizes must be positive");
  PAX_CHECK(g.inner_batch > 0 && g.batch % g.inner_batch == 0, "gemm_dnnl: inner batch ", g.inner_batch,
            " does not divide the batch ", g.batch);
  MatrixView av = a, bv = b;
  std::shared_ptr<Buffer> akeep, bkeep;
  if (a.dtype == DType::f32 && sgemm_reads_in_place()) {
    if (g.k > 1 && a.col_stride != 1 && g.m * g.k >= kRepackElements) av = repacked(ctx, g, g.m, g.k, a, g.k, akeep);
    if (g.k > 1 && g.m >= kRepackBMinRows && b.col_stride == 1 && g.k * g.n >= kRepackElements &&
        bad_row_stride(b.row_stride, b.dtype)) {
      bv = repacked(ctx, g, g.k, g.n, b, gemm_preferred_row_stride(b.dtype, g.m, g.n), bkeep);
    }
  }
  auto entry = matmul_entry(g, av, bv, c, bias != nullptr, multiplier != nullptr);
  if (!entry->supported) return false;
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, user_memory(entry->a_md, av.data)},
                                             {DNNL_ARG_WEIGHTS, user_memory(entry->b_md, bv.data)},
                                             {DNNL_ARG_DST, user_memory(entry->c_md, c.data)}};
  if (bias) args.emplace(DNNL_ARG_BIAS, user_memory(entry->bias_md, const_cast<void*>(bias)));
  if (multiplier) {
    args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(0) | DNNL_ARG_SRC_1,
                 user_memory(entry->c_md, const_cast<void*>(multiplier)));
  }
  dnnl_execute(ctx, entry->prim, args, entry->scratchpad_bytes);
  return true;
}

bool gemm_dnnl_supported(const GemmShape& g, DType ab_dtype, DType c_dtype) {
  PAX_CHECK(g.batch > 0 && g.m > 0 && g.n > 0 && g.k > 0, "gemm_dnnl: sizes must be positive");
  const GemmShape dense{g.batch, g.m, g.n, g.k};
  const MatrixView a{nullptr, ab_dtype, g.m * g.k, g.k, 1}, b{nullptr, ab_dtype, g.k * g.n, g.n, 1},
      c{nullptr, c_dtype, g.m * g.n, g.n, 1};
  return matmul_entry(dense, a, b, c, false)->supported;
}

namespace {

// Tiles of C (kRows x kCols) are independent tasks; each accumulates over K in
// slabs of kDepth so that its slab of B stays in cache.
constexpr int64_t kRows = 32, kCols = 256, kDepth = 128;

template <class T>
void gemm_blocked_typed(const GemmShape& g, const T* a, const T* b, T* c) {
  const int64_t row_tiles = (g.m + kRows - 1) / kRows, col_tiles = (g.n + kCols - 1) / kCols;
  const int64_t tiles = g.batch * row_tiles * col_tiles;
  parallel_for(tiles, 1, [&](int64_t begin, int64_t end) {
    std::vector<T> acc(size_t(kRows * kCols));
    for (int64_t t = begin; t < end; ++t) {
      const int64_t bi = t / (row_tiles * col_tiles);
      const int64_t i0 = (t / col_tiles) % row_tiles * kRows, j0 = t % col_tiles * kCols;
      const int64_t rows = std::min(kRows, g.m - i0), cols = std::min(kCols, g.n - j0);
      const T* a_b = a + bi * g.m * g.k;
      const T* b_b = b + bi * g.k * g.n;
      std::fill(acc.begin(), acc.end(), T(0));
      for (int64_t k0 = 0; k0 < g.k; k0 += kDepth) {
        const int64_t k1 = std::min(g.k, k0 + kDepth);
        for (int64_t i = 0; i < rows; ++i) {
          T* __restrict acc_row = acc.data() + i * kCols;
          const T* a_row = a_b + (i0 + i) * g.k;
          for (int64_t kk = k0; kk < k1; ++kk) {
            const T av = a_row[kk];
            const T* __restrict b_row = b_b + kk * g.n + j0;
            for (int64_t j = 0; j < cols; ++j) acc_row[j] += T(av * b_row[j]);
          }
        }
      }
      T* c_tile = c + bi * g.m * g.n + i0 * g.n + j0;
      for (int64_t i = 0; i < rows; ++i) std::copy_n(acc.data() + i * kCols, cols, c_tile + i * g.n);
    }
  });
}

// Signed integers are multiplied as their unsigned counterparts: the same bits
// in two's complement, and wrap-around without undefined behaviour.
template <class T>
void gemm_blocked_as(const GemmShape& g, const void* a, const void* b, void* c) {
  gemm_blocked_typed<T>(g, static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(c));
}

}  // namespace

void gemm_blocked(DType dtype, const GemmShape& g, const void* a, const void* b, void* c) {
  if (g.batch * g.m * g.n == 0) return;
  switch (dtype) {
    case DType::u8: return gemm_blocked_as<uint8_t>(g, a, b, c);
    case DType::u32:
    case DType::i32: return gemm_blocked_as<uint32_t>(g, a, b, c);
    case DType::i64: return gemm_blocked_as<uint64_t>(g, a, b, c);
    case DType::f32: return gemm_blocked_as<float>(g, a, b, c);
    case DType::f64: return gemm_blocked_as<double>(g, a, b, c);
    default: break;
  }
  PAX_FAIL("gemm_blocked: unsupported dtype ", dtype_name(dtype));
}

}  // namespace pax::cpu
