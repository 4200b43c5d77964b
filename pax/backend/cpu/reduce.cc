// Parallel drivers of the reduction kernels (see reduce.h): how the
// (outer, n, inner) index space is cut into tasks, the per-block partial
// results, and their combination in a fixed order.
#include "pax/backend/cpu/reduce.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <type_traits>
#include <vector>

#include "pax/backend/cpu/copy.h"
#include "pax/backend/cpu/dispatch.h"
#include "pax/backend/cpu/elementwise.h"
#include "pax/core/parallel.h"
#include "pax/core/buffer.h"
#include "pax/core/error.h"

namespace pax::cpu {
namespace {

constexpr int64_t kTaskElems = int64_t(1) << 15;  // input elements a task should cover
constexpr int64_t kRowBlock = kReduceRowBlock;
constexpr int64_t kColChunk = 4096;  // columns per task
constexpr int64_t kColBlock = 1024;  // most rows accumulated into one column partial
constexpr int64_t kMinTasks = 16;    // independent tasks wanted before splitting n further

// How (outer, n, inner) is cut: n into nb blocks of rb rows, inner into nc
// chunks of cw columns; one task per (outer, block, chunk). Depends on the
// sizes only, so partial results and their combination order do too.
struct Plan {
  int64_t outer, n, inner;
  int64_t rb, nb, cw, nc;

  int64_t tasks() const { return outer * nb * nc; }
  int64_t block_rows(int64_t b) const { return std::min(rb, n - b * rb); }
  int64_t chunk_cols(int64_t c) const { return std::min(cw, inner - c * cw); }
  // Tasks per parallel_for chunk: about kTaskElems input elements.
  int64_t grain() const { return std::max<int64_t>(1, kTaskElems / (rb * cw)); }
};

// `for_threads`: cut n finer when there are too few tasks otherwise (not
// done for the combination of partials, which is small).
Plan make_plan(int64_t outer, int64_t n, int64_t inner, bool for_threads = true) {
  Plan p{outer, n, inner, n, 1, 1, 1};
  if (inner == 1) {
    p.rb = std::min(n, kRowBlock);
  } else {
    p.cw = std::min(inner, kColChunk);
    p.nc = ceil_div(inner, p.cw);
    p.rb = std::min(n, kColBlock);
    const int64_t independent = outer * p.nc;
    if (for_threads && independent * ceil_div(n, p.rb) < kMinTasks) {
      // Too few tasks for the threads: cut n finer, down to ~kTaskElems per task.
      const int64_t want = ceil_div(kMinTasks, independent);
      p.rb = std::min(p.rb, std::max(ceil_div(n, want), ceil_div(kTaskElems, p.cw)));
    }
  }
  p.nb = ceil_div(n, p.rb);
  return p;
}

// Scans cut n only when there are too few tasks otherwise: every cut costs
// an extra pass over the input (block sums first). Columns stay in wide
// chunks, which stream better than narrow ones even with that extra pass.
Plan make_scan_plan(int64_t outer, int64_t n, int64_t inner) {
  Plan p{outer, n, inner, n, 1, 1, 1};
  if (inner > 1) {
    p.cw = std::min(inner, kColChunk);
    p.nc = ceil_div(inner, p.cw);
  }
  const int64_t independent = outer * p.nc;
  if (independent < kMinTasks && n * p.cw >= 2 * kTaskElems) {
    // Row blocks are scanned four per task (see cumsum), so rows are cut four times finer.
    const int64_t per_task = inner == 1 ? 4 : 1;
    const int64_t want = ceil_div(kMinTasks * per_task, independent);
    p.rb = std::max(ceil_div(n, want), ceil_div(kTaskElems, p.cw * per_task));
  }
  p.nb = ceil_div(n, p.rb);
  return p;
}

// Scratch memory from the kernel's context; none (null) for 0 bytes.
struct Scratch {
  std::shared_ptr<Buffer> buf;
  Scratch(const KernelContext& ctx, size_t nbytes) : buf(nbytes ? ctx.allocate_scratch(nbytes) : nullptr) {}
  template <class T>
  T* as() const {
    return buf ? static_cast<T*>(buf->data()) : nullptr;
  }
};

// Calls f(o, b, c) for every task, in parallel.
template <class F>
void for_each_task(const Plan& p, F&& f) {
  parallel_for(p.tasks(), p.grain(), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) f(t / (p.nb * p.nc), (t / p.nc) % p.nb, t % p.nc);
  });
}

// part[o, b, i] (accumulator dtype) = op over the rows of block b of x[o, :, i].
void block_partials(ReduceOp op, DType dtype, const char* x, const Plan& p, char* part) {
  const int64_t xw = int64_t(itemsize(dtype));
  const int64_t aw = int64_t(itemsize(accumulator_dtype(dtype)));
  if (p.inner == 1 && p.nb == 1) {
    // Whole rows: one kernel call per run of rows.
    parallel_for(p.outer, p.grain(), [&](int64_t o0, int64_t o1) {
      reduce_rows(op, dtype, x + o0 * p.n * xw, size_t(o1 - o0), size_t(p.n), part + o0 * aw);
    });
    return;
  }
  for_each_task(p, [&](int64_t o, int64_t b, int64_t c) {
    const int64_t src = (o * p.n + b * p.rb) * p.inner + c * p.cw;
    const int64_t dst = (o * p.nb + b) * p.inner + c * p.cw;
    if (p.inner == 1) {
      reduce_rows(op, dtype, x + src * xw, 1, size_t(p.block_rows(b)), part + dst * aw);
    } else {
      reduce_cols(op, dtype, x + src * xw, size_t(p.block_rows(b)), size_t(p.inner), size_t(p.chunk_cols(c)),
                  part + dst * aw);
    }
  });
}

// Whether v is a better arg-reduction candidate than the current best `cur`
// (strictly better, or a NaN replacing a number; nothing replaces a NaN).
template <bool kMax, class V>
bool better(V v, V cur) {
  if constexpr (std::is_floating_point_v<V>) {
    return (kMax ? !(v <= cur) : !(v >= cur)) && cur == cur;
  } else {
    return kMax ? v > cur : v < cur;
  }
}

// y[o, i] = the best of the per-block indices idx[o, b, i] (block-relative),
// earlier blocks winning ties.
template <bool kMax, class T, class I>
void combine_arg(const Plan& p, const T* x, const int32_t* idx, I* y) {
  using V = std::conditional_t<std::is_same_v<T, bf16> || std::is_same_v<T, f16>, float, T>;
  parallel_for(p.outer * p.inner, grain_for(int64_t(p.nb) * 8), [&](int64_t e0, int64_t e1) {
    for (int64_t e = e0; e < e1; ++e) {
      const int64_t o = e / p.inner, i = e % p.inner;
      const T* col = x + o * p.n * p.inner + i;
      int64_t best = idx[o * p.nb * p.inner + i];
      for (int64_t b = 1; b < p.nb; ++b) {
        const int64_t cand = b * p.rb + idx[(o * p.nb + b) * p.inner + i];
        if (better<kMax>(V(col[cand * p.inner]), V(col[best * p.inner]))) best = cand;
      }
      y[e] = I(best);
    }
  });
}

// part[o, b, i] <- the sum of the blocks before b in scan order (the value a
// block's running sum starts from).
template <class A>
void exclusive_block_prefix(const Plan& p, bool reverse, A* part) {
  parallel_for(p.outer * p.inner, grain_for(int64_t(p.nb) * int64_t(sizeof(A))), [&](int64_t e0, int64_t e1) {
    for (int64_t e = e0; e < e1; ++e) {
      A* col = part + (e / p.inner) * p.nb * p.inner + e % p.inner;
      A carry = A(0);
      for (int64_t k = 0; k < p.nb; ++k) {
        A& s = col[(reverse ? p.nb - 1 - k : k) * p.inner];
        const A next = A(carry + s);
        s = carry;
        carry = next;
      }
    }
  });
}

}  // namespace

DType accumulator_dtype(DType dtype) { return dtype == DType::bf16 || dtype == DType::f16 ? DType::f32 : dtype; }

void reduce_identity(ReduceOp op, DType dtype, void* out) {
  const bool bitwise = op == ReduceOp::and_ || op == ReduceOp::or_;
  PAX_CHECK(!bitwise || !(is_floating(dtype)), "reduce: and / or are not defined for ", dtype_name(dtype));
  visit_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    T v{};
    if constexpr (std::is_same_v<T, bool>) {
      v = op == ReduceOp::prod || op == ReduceOp::and_ || op == ReduceOp::min;
    } else if constexpr (std::is_integral_v<T>) {
      using L = std::numeric_limits<T>;
      switch (op) {
        case ReduceOp::sum:
        case ReduceOp::or_: v = T(0); break;
        case ReduceOp::prod: v = T(1); break;
        case ReduceOp::and_: v = T(~T(0)); break;
        case ReduceOp::max: v = L::lowest(); break;
        case ReduceOp::min: v = L::max(); break;
      }
    } else {
      const float inf = std::numeric_limits<float>::infinity();
      double d = op == ReduceOp::prod ? 1.0 : op == ReduceOp::max ? -inf : op == ReduceOp::min ? inf : 0.0;
      v = T(d);
    }
    std::memcpy(out, &v, sizeof(T));
  });
}

void reduce(const KernelContext& ctx, ReduceOp op, DType dtype, const void* x, DType out_dtype, void* y, int64_t outer,
            int64_t n, int64_t inner) {
  const DType acc = accumulator_dtype(dtype);
  PAX_CHECK(accumulator_dtype(out_dtype) == acc, "reduce: cannot reduce ", dtype_name(dtype), " into ",
            dtype_name(out_dtype));
  const int64_t m = outer * inner;
  if (m == 0) return;
  if (n == 0) {
    alignas(8) unsigned char identity[8];
    reduce_identity(op, out_dtype, identity);
    fill(itemsize(out_dtype), identity, y, m);
    return;
  }
  if (n == 1) {
    if (out_dtype == dtype) copy_bytes(y, x, size_t(m) * itemsize(dtype));
    else convert_parallel(dtype, static_cast<const char*>(x), out_dtype, static_cast<char*>(y), m);
    return;
  }
  const size_t aw = itemsize(acc);
  const Plan p = make_plan(outer, n, inner);
  const bool direct = acc == out_dtype;
  // Partials go straight to y when there is one block and no final rounding.
  Scratch part(ctx, p.nb == 1 && direct ? 0 : size_t(m * p.nb) * aw);
  char* part_ptr = p.nb == 1 && direct ? static_cast<char*>(y) : part.as<char>();
  block_partials(op, dtype, static_cast<const char*>(x), p, part_ptr);

  // Combine the block partials [outer, nb, inner], level by level (one level
  // unless n is in the billions).
  Plan level = p;
  char* src = part_ptr;
  std::vector<Scratch> levels;
  while (level.nb > 1) {
    const Plan q = make_plan(outer, level.nb, inner, /*for_threads=*/false);
    const bool last = q.nb == 1 && direct;
    levels.emplace_back(ctx, last ? 0 : size_t(m * q.nb) * aw);
    char* dst = last ? static_cast<char*>(y) : levels.back().as<char>();
    block_partials(op, acc, src, q, dst);
    src = dst;
    level = q;
  }
  if (!direct) convert_parallel(acc, src, out_dtype, static_cast<char*>(y), m);
}

void argreduce(const KernelContext& ctx, bool is_max, DType dtype, DType index_dtype, const void* x, void* y,
               int64_t outer, int64_t n, int64_t inner) {
  PAX_CHECK(index_dtype == DType::i32 || index_dtype == DType::i64,
            "argreduce: index dtype must be int32 or int64, got ", dtype_name(index_dtype));
  const int64_t m = outer * inner;
  if (m == 0) return;
  PAX_CHECK(n > 0, "argreduce: cannot reduce an axis of size 0");
  const Plan p = make_plan(outer, n, inner);
  const size_t xw = itemsize(dtype);
  const char* xc = static_cast<const char*>(x);
  Scratch idx(ctx, size_t(m * p.nb) * sizeof(int32_t));
  int32_t* ip = idx.as<int32_t>();
  if (p.inner == 1 && p.nb == 1) {
    parallel_for(outer, p.grain(), [&](int64_t o0, int64_t o1) {
      argreduce_rows(is_max, dtype, xc + o0 * n * int64_t(xw), size_t(o1 - o0), size_t(n), ip + o0);
    });
  } else {
    for_each_task(p, [&](int64_t o, int64_t b, int64_t c) {
      const int64_t src = (o * n + b * p.rb) * inner + c * p.cw;
      int32_t* dst = ip + (o * p.nb + b) * inner + c * p.cw;
      if (inner == 1) {
        argreduce_rows(is_max, dtype, xc + src * int64_t(xw), 1, size_t(p.block_rows(b)), dst);
      } else {
        argreduce_cols(is_max, dtype, xc + src * int64_t(xw), size_t(p.block_rows(b)), size_t(inner),
                       size_t(p.chunk_cols(c)), dst);
      }
    });
  }
  visit_dtype(dtype, [&](auto t) {
    using T = decltype(t);
    const T* xt = static_cast<const T*>(x);
    auto run = [&](auto* out) {
      if (is_max) combine_arg<true>(p, xt, ip, out);
      else combine_arg<false>(p, xt, ip, out);
    };
    if (index_dtype == DType::i32) run(static_cast<int32_t*>(y));
    else run(static_cast<int64_t*>(y));
  });
}

void cumsum(const KernelContext& ctx, DType dtype, const void* x, void* y, int64_t outer, int64_t n, int64_t inner,
            bool reverse) {
  PAX_CHECK(dtype != DType::bool_, "cumsum: not defined for bool");
  const int64_t m = outer * n * inner;
  if (m == 0) return;
  const Plan p = make_scan_plan(outer, n, inner);
  const int64_t w = int64_t(itemsize(dtype));
  const DType acc = accumulator_dtype(dtype);
  const char* xc = static_cast<const char*>(x);
  char* yc = static_cast<char*>(y);
  if (p.inner == 1 && p.nb == 1) {
    // Multiples of four rows per chunk: the row kernel scans four at once.
    parallel_for(outer, ceil_div(p.grain(), 4) * 4, [&](int64_t o0, int64_t o1) {
      cumsum_rows(dtype, xc + o0 * n * w, yc + o0 * n * w, size_t(o1 - o0), size_t(n), reverse, nullptr);
    });
    return;
  }
  // Long scans: block sums first, then each block scans from the sum of the
  // blocks before it.
  Scratch part(ctx, p.nb > 1 ? size_t(outer * p.nb * inner) * itemsize(acc) : 0);
  if (p.nb > 1) {
    block_partials(ReduceOp::sum, dtype, xc, p, part.as<char>());
    visit_dtype(acc, [&](auto t) {
      using T = decltype(t);
      if constexpr (std::is_floating_point_v<T>) exclusive_block_prefix(p, reverse, part.as<T>());
      else if constexpr (!std::is_same_v<T, bool> && std::is_integral_v<T>)
        exclusive_block_prefix(p, reverse, part.as<std::make_unsigned_t<T>>());
    });
  }
  const int64_t aw = int64_t(itemsize(acc));
  if (inner == 1) {
    // The full blocks of one row are rows of rb elements: scan up to four at
    // once (independent chains; the results do not depend on the grouping).
    parallel_for(p.tasks(), 4, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1;) {
        const int64_t o = t / p.nb, b = t % p.nb;
        int64_t count = 1;
        while (t + count < t1 && b + count < p.nb && p.block_rows(b + count) == p.rb) ++count;
        if (p.block_rows(b) != p.rb) count = 1;
        const int64_t off = o * n + b * p.rb;
        cumsum_rows(dtype, xc + off * w, yc + off * w, size_t(count), size_t(p.block_rows(b)), reverse,
                    part.as<char>() + t * aw);
        t += count;
      }
    });
    return;
  }
  for_each_task(p, [&](int64_t o, int64_t b, int64_t c) {
    const int64_t off = (o * n + b * p.rb) * inner + c * p.cw;
    const void* init = p.nb > 1 ? part.as<char>() + ((o * p.nb + b) * inner + c * p.cw) * aw : nullptr;
    cumsum_cols(dtype, xc + off * w, yc + off * w, size_t(p.block_rows(b)), size_t(inner), size_t(p.chunk_cols(c)),
                reverse, init);
  });
}

}  // namespace pax::cpu
