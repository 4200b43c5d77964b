// Scatter-add kernel (see gather.h). Race-free and deterministic without
// atomics: the operand is cut into tiles, each owned by one chunk of work,
// and a chunk adds the part of every update window that falls in its tile,
// walking the windows in update order. So every output element receives its
// contributions in update order, from a single thread, however the work is
// split. Tiles are ranges of (at most) two operand axes:
//   - columns: a window axis that no index addresses (its start is always 0),
//     e.g. the D axis of the embedding gradient; splitting it keeps heavily
//     repeated indices (padding tokens) spread over threads;
//   - regions: the indexed axis with the largest extent. Windows are first
//     bucketed by region (a stable counting sort), so a chunk visits only the
//     windows that reach its region.
#include <algorithm>
#include <cstring>
#include <memory>

#include <omp.h>

#include "pax/backend/cpu/copy.h"
#include "pax/backend/cpu/dispatch.h"
#include "pax/backend/cpu/elementwise.h"
#include "pax/backend/cpu/gather.h"
#include "pax/backend/cpu/gather_common.h"
#include "pax/core/parallel.h"
#include "pax/core/buffer.h"

namespace pax::cpu {
namespace {

// Uninitialised scratch from the kernel's context (the host's caching
// allocator on the CPU), so that repeated calls (every training step) neither
// zero nor fault in fresh pages. Empty (null) for n == 0.
template <class T>
class Scratch {
 public:
  Scratch() = default;
  Scratch(const KernelContext& ctx, int64_t n) : buf_(n > 0 ? ctx.allocate_scratch(size_t(n) * sizeof(T)) : nullptr) {}
  T* data() const { return buf_ ? static_cast<T*>(buf_->data()) : nullptr; }
  T& operator[](int64_t i) const { return data()[i]; }

 private:
  std::shared_ptr<Buffer> buf_;
};

// A split of one operand axis into blocks of `grain` coordinates.
struct Split {
  int64_t blocks = 1;
  int64_t grain = 1;
  int shift = 0;       // log2(grain) for region splits, whose grain is a power of two
  int64_t window = 1;  // window size along the axis
  int64_t dim = -1;    // index into Plan::dims, -1 when the window has size 1 there
};

struct Plan {
  std::vector<Dim2> dims;  // window axes of size > 1: a = operand stride, b = updates stride
  Split col, reg;
  // Offset in updates of window b: b * window_numel when the batch axes lead,
  // else through the batch strides.
  bool batch_leading = true;
  int64_t window_numel = 1;
  std::vector<int64_t> batch_sizes, batch_strides;

  int64_t ubase(int64_t b) const {
    if (batch_leading) return b * window_numel;
    int64_t u = 0;
    for (size_t q = batch_sizes.size(); q-- > 0;) {
      u += (b % batch_sizes[q]) * batch_strides[q];
      b /= batch_sizes[q];
    }
    return u;
  }
};

// Per window: operand offset of its first element (-1: dropped) and, when
// splitting by region, its start along the region axis.
struct Windows {
  int64_t count = 0;
  Scratch<int64_t> obase, coord;
};

// Window ids grouped by the region blocks they reach, each group in update
// order: ids[start[r] .. start[r + 1]) for region block r.
struct Buckets {
  std::vector<int64_t> start;
  Scratch<int64_t> ids;
};

// Below this many added elements (or with one thread) the work runs as one chunk.
constexpr int64_t kChunkWork = 1 << 15;

template <class T>
inline T add_one(T a, T b) {
  if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) {
    return T(float(a) + float(b));
  } else if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return T(U(a) + U(b));  // wraps like XLA
  } else {
    return a + b;
  }
}

// o[i * os] += u[i * us] for i < n.
template <class T>
void add_run(DType dtype, T* o, int64_t os, const T* u, int64_t us, int64_t n) {
  if (os == 1 && us == 1 && n >= 16) {
    binary(BinaryOp::add, dtype, o, u, o, size_t(n));
    return;
  }
  for (int64_t i = 0; i < n; ++i) o[i * os] = add_one(o[i * os], u[i * us]);
}

Buckets bucket_by_region(const KernelContext& ctx, const Windows& w, const Split& reg) {
  const int64_t n = w.count;
  constexpr int64_t kSegment = 1 << 14;
  const int64_t segs = (n + kSegment - 1) / kSegment;
  // Calls f(block) for every region block that window b reaches.
  auto for_blocks = [&](int64_t b, auto&& f) {
    if (w.obase[b] < 0) return;
    const int64_t lo = w.coord[b] >> reg.shift;
    const int64_t hi = (w.coord[b] + reg.window - 1) >> reg.shift;
    for (int64_t r = lo; r <= hi; ++r) f(r);
  };
  // pos[s * blocks + r]: entries of segment s in region block r, then where they go.
  std::vector<int64_t> pos(size_t(segs * reg.blocks), 0);
  parallel_for(segs, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      int64_t* c = pos.data() + s * reg.blocks;
      for (int64_t b = s * kSegment; b < std::min(n, (s + 1) * kSegment); ++b)
        for_blocks(b, [&](int64_t r) { ++c[r]; });
    }
  });
  Buckets out;
  out.start.assign(size_t(reg.blocks + 1), 0);
  int64_t sum = 0;
  for (int64_t r = 0; r < reg.blocks; ++r) {
    out.start[size_t(r)] = sum;
    for (int64_t s = 0; s < segs; ++s) {
      const int64_t c = pos[size_t(s * reg.blocks + r)];
      pos[size_t(s * reg.blocks + r)] = sum;
      sum += c;
    }
  }
  out.start[size_t(reg.blocks)] = sum;
  out.ids = Scratch<int64_t>(ctx, sum);
  parallel_for(segs, 1, [&](int64_t s0, int64_t s1) {
    for (int64_t s = s0; s < s1; ++s) {
      int64_t* p = pos.data() + s * reg.blocks;
      for (int64_t b = s * kSegment; b < std::min(n, (s + 1) * kSegment); ++b) {
        for_blocks(b, [&](int64_t r) { out.ids[p[r]++] = b; });
      }
    }
  });
  return out;
}

// Restricts dims[split.dim] to the part of a window (starting at `coord` along
// the split axis) inside [c0, c1); false when nothing is left.
inline bool restrict_to(const Split& split, int64_t coord, int64_t c0, int64_t c1, std::vector<Dim2>& dims, int64_t& o,
                        int64_t& u, int64_t& outer_count, int64_t outer_dims) {
  const int64_t p0 = std::max<int64_t>(c0 - coord, 0);
  const int64_t p1 = std::min(c1 - coord, split.window);
  if (p0 >= p1) return false;
  if (split.dim >= 0) {
    Dim2& d = dims[size_t(split.dim)];
    d.size = p1 - p0;
    o += p0 * d.a;
    u += p0 * d.b;
    if (split.dim < outer_dims) outer_count = outer_count / split.window * d.size;
  }
  return true;
}

template <class T>
void apply_windows(const Plan& p, DType dtype, const Windows& w, const Buckets& buckets, const T* upd, T* out) {
  std::vector<Dim2> full = p.dims;
  if (full.empty()) full.push_back(Dim2{1, 0, 0});
  const int64_t outer_dims = int64_t(full.size()) - 1;
  int64_t outer_full = 1;
  for (int64_t d = 0; d < outer_dims; ++d) outer_full *= full[size_t(d)].size;
  const bool by_region = p.reg.blocks > 1;

  parallel_for(p.col.blocks * p.reg.blocks, 1, [&](int64_t cb, int64_t ce) {
    std::vector<Dim2> dims = full;
    Odometer2 od(std::span<const Dim2>(dims.data(), size_t(outer_dims)));
    for (int64_t c = cb; c < ce; ++c) {
      const int64_t rb = c / p.col.blocks, colb = c % p.col.blocks;
      const int64_t r0 = rb * p.reg.grain, r1 = r0 + p.reg.grain;
      const int64_t c0 = colb * p.col.grain, c1 = c0 + p.col.grain;
      const int64_t first = by_region ? buckets.start[size_t(rb)] : 0;
      const int64_t last = by_region ? buckets.start[size_t(rb + 1)] : w.count;
      if (p.dims.empty()) {
        // Single-element windows: a bucket holds exactly the windows of its region.
        for (int64_t e = first; e < last; ++e) {
          const int64_t b = by_region ? buckets.ids[e] : e;
          const int64_t o = w.obase[b];
          if (o >= 0) out[o] = add_one(out[o], upd[p.ubase(b)]);
        }
        continue;
      }
      for (int64_t e = first; e < last; ++e) {
        const int64_t b = by_region ? buckets.ids[e] : e;
        int64_t o = w.obase[b];
        if (o < 0) continue;
        int64_t u = p.ubase(b), outer_count = outer_full;
        if (by_region && !restrict_to(p.reg, w.coord[b], r0, r1, dims, o, u, outer_count, outer_dims)) continue;
        if (p.col.blocks > 1) restrict_to(p.col, 0, c0, c1, dims, o, u, outer_count, outer_dims);
        const Dim2& in = dims.back();
        if (outer_count == 1) {
          add_run(dtype, out + o, in.a, upd + u, in.b, in.size);
          continue;
        }
        od.reset(0);
        for (int64_t q = 0; q < outer_count; ++q, od.next()) {
          add_run(dtype, out + o + od.a, in.a, upd + u + od.b, in.b, in.size);
        }
      }
    }
  });
}

}  // namespace

void scatter_add(const KernelContext& ctx, const ScatterSpec& spec, const TensorView& operand,
                 const TensorView& indices, const TensorView& updates, const TensorView& out) {
  copy_bytes(out.data, operand.data, out.nbytes());
  if (updates.numel() == 0 || out.numel() == 0) return;
  const Shape& os = *operand.shape;
  const Shape& us = *updates.shape;
  const std::vector<int64_t> ostr = os.strides();
  const std::vector<int64_t> ustr = us.strides();
  const auto& uwd = spec.update_window_dims;
  const auto& sdod = spec.scatter_dims_to_operand_dims;
  auto contains = [](const std::vector<int64_t>& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); };

  // Window size along every operand axis (1 for inserted axes).
  std::vector<int64_t> wsize(size_t(os.rank()), 1);
  std::vector<int64_t> dim_axis;  // operand axis of each entry of plan.dims
  Plan plan;
  for (int64_t d = 0, j = 0; d < os.rank(); ++d) {
    if (contains(spec.inserted_window_dims, d)) continue;
    const int64_t uaxis = uwd[size_t(j++)];
    wsize[size_t(d)] = us[uaxis];
    plan.window_numel *= us[uaxis];
    if (us[uaxis] > 1) {
      plan.dims.push_back(Dim2{us[uaxis], ostr[size_t(d)], ustr[size_t(uaxis)]});
      dim_axis.push_back(d);
    }
  }
  for (int64_t q = 0; q < us.rank(); ++q) {
    if (contains(uwd, q)) continue;
    plan.batch_sizes.push_back(us[q]);
    plan.batch_strides.push_back(ustr[size_t(q)]);
    plan.batch_leading = plan.batch_leading && q < int64_t(plan.batch_sizes.size());
  }
  const int64_t nwindows = updates.numel() / plan.window_numel;
  auto dim_index = [&](int64_t axis) {
    auto it = std::find(dim_axis.begin(), dim_axis.end(), axis);
    return it == dim_axis.end() ? int64_t(-1) : int64_t(it - dim_axis.begin());
  };

  // Tiles: the widest unindexed window axis (columns) and the widest indexed
  // axis (regions); about 4 tiles per thread. The result does not depend on
  // the tiling (see the file comment), so the thread count may shape it.
  int64_t col_axis = -1, reg_k = -1;
  for (int64_t d : dim_axis) {
    if (!contains(sdod, d) && (col_axis < 0 || wsize[size_t(d)] > wsize[size_t(col_axis)])) col_axis = d;
  }
  for (size_t k = 0; k < sdod.size(); ++k) {
    if (reg_k < 0 || os[sdod[k]] > os[sdod[size_t(reg_k)]]) reg_k = int64_t(k);
  }
  const int64_t threads = omp_get_max_threads();
  if (threads > 1 && nwindows * plan.window_numel >= kChunkWork) {
    const int64_t target = 4 * threads;
    if (col_axis >= 0) {
      // Column blocks of at least 64 elements keep the adds vectorised and
      // the rows of updates streaming; narrower only when there are no regions.
      const int64_t min_cols = reg_k >= 0 ? 64 : 8;
      const int64_t extent = wsize[size_t(col_axis)];
      plan.col.blocks = std::clamp<int64_t>(extent / min_cols, 1, target);
      plan.col.grain = (extent + plan.col.blocks - 1) / plan.col.blocks;
      plan.col.blocks = (extent + plan.col.grain - 1) / plan.col.grain;
      plan.col.window = extent;
      plan.col.dim = dim_index(col_axis);
    }
    if (reg_k >= 0 && plan.col.blocks < target) {
      const int64_t axis = sdod[size_t(reg_k)];
      const int64_t extent = os[axis];
      // A power-of-two grain turns the bucketing divisions into shifts.
      const int64_t blocks = std::clamp<int64_t>(target / plan.col.blocks, 1, std::max<int64_t>(extent, 1));
      while ((int64_t(1) << plan.reg.shift) * blocks < extent) ++plan.reg.shift;
      plan.reg.grain = int64_t(1) << plan.reg.shift;
      plan.reg.blocks = (extent + plan.reg.grain - 1) / plan.reg.grain;
      plan.reg.window = wsize[size_t(axis)];
      plan.reg.dim = dim_index(axis);
    }
  }
  const bool by_region = plan.reg.blocks > 1;

  StartIndexMap map;
  map.clip = false;
  for (int64_t d : sdod) {
    map.max_start.push_back(os[d] - wsize[size_t(d)]);
    map.stride.push_back(ostr[size_t(d)]);
  }
  Windows w{nwindows, Scratch<int64_t>(ctx, nwindows), Scratch<int64_t>(ctx, by_region ? nwindows : 0)};
  const int64_t k = int64_t(sdod.size());
  visit_index_dtype(indices.dtype, [&](auto i) {
    using I = decltype(i);
    const I* idx = static_cast<const I*>(indices.data);
    parallel_for(nwindows, 1 << 14, [&](int64_t b0, int64_t b1) {
      if (by_region) {
        for (int64_t b = b0; b < b1; ++b) w.obase[b] = start_offset(idx + b * k, map, reg_k, &w.coord[b]);
      } else {
        for (int64_t b = b0; b < b1; ++b) w.obase[b] = start_offset(idx + b * k, map);
      }
    });
  });
  const Buckets buckets = by_region ? bucket_by_region(ctx, w, plan.reg) : Buckets{};

  visit_dtype(operand.dtype, [&](auto t) {
    using T = decltype(t);
    if constexpr (std::is_same_v<T, bool>) {
      PAX_FAIL("scatter_add: bool operands are not supported");
    } else {
      apply_windows(plan, operand.dtype, w, buckets, static_cast<const T*>(updates.data), static_cast<T*>(out.data));
    }
  });
}

}  // namespace pax::cpu
