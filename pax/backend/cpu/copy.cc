// Strided copy engine (see copy.h).
#include "pax/backend/cpu/copy.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "pax/backend/cpu/dispatch.h"
#include "pax/backend/cpu/dnnl_context.h"
#include "pax/backend/cpu/fused_kernels.h"
#include "pax/core/parallel.h"

namespace pax::cpu {
namespace {

struct Dim {
  int64_t size;
  int64_t src;  // stride in elements
  int64_t dst;
};

// Drops size-1 dimensions and merges neighbours that are contiguous in both
// layouts. Returns false when the index space is empty.
bool simplify(std::span<const int64_t> dims, std::span<const int64_t> ss, std::span<const int64_t> ds,
              std::vector<Dim>& out) {
  out.clear();
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 0) return false;
    if (dims[d] == 1) continue;
    Dim cur{dims[d], ss[d], ds[d]};
    if (!out.empty()) {
      Dim& prev = out.back();
      if (prev.src == cur.src * cur.size && prev.dst == cur.dst * cur.size) {
        prev.size *= cur.size;
        prev.src = cur.src;
        prev.dst = cur.dst;
        continue;
      }
    }
    out.push_back(cur);
  }
  return true;
}

// Odometer over the outer dimensions [0, n) of `dims`, tracking both offsets.
struct Odometer {
  const std::vector<Dim>& dims;
  size_t n;
  std::vector<int64_t> idx;
  int64_t src = 0, dst = 0;

  Odometer(const std::vector<Dim>& d, size_t outer, int64_t flat) : dims(d), n(outer), idx(outer, 0) {
    for (size_t k = n; k-- > 0;) {
      idx[k] = flat % dims[k].size;
      flat /= dims[k].size;
      src += idx[k] * dims[k].src;
      dst += idx[k] * dims[k].dst;
    }
  }
  void next() {
    for (size_t k = n; k-- > 0;) {
      src += dims[k].src;
      dst += dims[k].dst;
      if (++idx[k] < dims[k].size) return;
      src -= dims[k].src * dims[k].size;
      dst -= dims[k].dst * dims[k].size;
      idx[k] = 0;
    }
  }
};

template <class T>
void copy_typed(const std::vector<Dim>& dims, const T* src, T* dst) {
  if (dims.empty()) {
    *dst = *src;
    return;
  }
  const Dim inner = dims.back();
  const size_t outer_dims = dims.size() - 1;
  int64_t outer = 1;
  for (size_t k = 0; k < outer_dims; ++k) outer *= dims[k].size;

  // Transpose: the innermost destination dimension is contiguous but the
  // source walks it with a large stride, and some outer dimension is
  // contiguous in the source. Copy 2-D tiles of (that dimension, inner).
  int64_t tdim = -1;
  if (inner.dst == 1 && inner.src != 1 && inner.src != 0) {
    for (size_t k = 0; k < outer_dims; ++k) {
      if (dims[k].src == 1) tdim = int64_t(k);
    }
  }
  if (tdim >= 0 && dims[size_t(tdim)].size >= 8 && inner.size >= 8) {
    // Reorder so that the tiled dimension is the last outer one.
    std::vector<Dim> rest;
    for (size_t k = 0; k < outer_dims; ++k) {
      if (int64_t(k) != tdim) rest.push_back(dims[k]);
    }
    const Dim row = dims[size_t(tdim)];
    int64_t rest_count = 1;
    for (const Dim& d : rest) rest_count *= d.size;
    constexpr int64_t kTile = 32;
    const int64_t row_tiles = (row.size + kTile - 1) / kTile;
    const int64_t work = rest_count * row_tiles;
    const int64_t tile_bytes = kTile * inner.size * int64_t(sizeof(T));
    parallel_for(work, std::max<int64_t>(1, (256 << 10) / std::max<int64_t>(1, tile_bytes)), [&](int64_t b, int64_t e) {
      for (int64_t w = b; w < e; ++w) {
        Odometer od(rest, rest.size(), w / row_tiles);
        const int64_t r0 = (w % row_tiles) * kTile;
        const int64_t r1 = std::min(row.size, r0 + kTile);
        for (int64_t c0 = 0; c0 < inner.size; c0 += kTile) {
          const int64_t c1 = std::min(inner.size, c0 + kTile);
          for (int64_t r = r0; r < r1; ++r) {
            const T* s = src + od.src + r * row.src;
            T* t = dst + od.dst + r * row.dst;
            for (int64_t c = c0; c < c1; ++c) t[c] = s[c * inner.src];
          }
        }
      }
    });
    return;
  }

  const int64_t row_bytes = inner.size * int64_t(sizeof(T));
  const int64_t grain = std::max<int64_t>(1, (256 << 10) / std::max<int64_t>(1, row_bytes));
  parallel_for(outer, grain, [&](int64_t b, int64_t e) {
    Odometer od(dims, outer_dims, b);
    for (int64_t o = b; o < e; ++o, od.next()) {
      const T* s = src + od.src;
      T* t = dst + od.dst;
      if (inner.src == 1 && inner.dst == 1) {
        std::memcpy(t, s, size_t(row_bytes));
      } else if (inner.src == 0 && inner.dst == 1) {
        std::fill(t, t + inner.size, *s);
      } else if (inner.dst == 1) {
        for (int64_t i = 0; i < inner.size; ++i) t[i] = s[i * inner.src];
      } else {
        for (int64_t i = 0; i < inner.size; ++i) t[i * inner.dst] = s[i * inner.src];
      }
    }
  });
}

constexpr int64_t kReorderTag = 3;

// A transpose of 4-, 2- or 1-byte elements (the tiled case of copy_typed)
// through oneDNN's reorder, which moves whole vectors through in-register
// transposes: an order of magnitude faster than element-wise copies on large
// arrays. The bits are moved, not converted (f32 / bf16 / u8 as carriers).
// False when oneDNN has no fast reorder for it.
bool dnnl_transpose(size_t width, const std::vector<Dim>& dims, const void* src, void* dst) {
  if (width != 4 && width != 2 && width != 1) return false;
  if (dims.size() < 2 || dims.size() > 6) return false;
  int64_t n = 1;
  for (const Dim& d : dims) {
    if (d.src <= 0 || d.dst <= 0) return false;  // reversals and broadcasts stay with the engine
    n *= d.size;
  }
  if (n < (int64_t(1) << 14)) return false;  // small: the primitive's call costs more than it saves
  const DType carrier = width == 4 ? DType::f32 : width == 2 ? DType::bf16 : DType::bool_;
  DnnlKey key{kReorderTag, int64_t(width)};
  std::vector<int64_t> sizes, src_strides, dst_strides;
  for (const Dim& d : dims) {
    sizes.push_back(d.size);
    src_strides.push_back(d.src);
    dst_strides.push_back(d.dst);
    key.insert(key.end(), {d.size, d.src, d.dst});
  }
  struct Entry {
    bool ok = false;
    dnnl::reorder prim;
    dnnl::memory::desc from, to;
  };
  auto entry = dnnl_cached<Entry>(key, [&] {
    Entry e;
    auto md = [&](const std::vector<int64_t>& strides) {
      if (carrier == DType::bool_) {
        return dnnl::memory::desc(dnnl::memory::dims(sizes.begin(), sizes.end()), dnnl::memory::data_type::u8,
                                  dnnl::memory::dims(strides.begin(), strides.end()));
      }
      return strided_md(sizes, strides, carrier);
    };
    e.from = md(src_strides);
    e.to = md(dst_strides);
    try {
      dnnl::reorder::primitive_desc pd(dnnl_engine(), e.from, dnnl_engine(), e.to);
      if (is_reference_impl(pd) || std::string(pd.impl_info_str()).find("simple") != std::string::npos) return e;
      e.prim = dnnl::reorder(pd);
      e.ok = true;
    } catch (const dnnl::error&) {
    }
    return e;
  });
  if (!entry->ok) return false;
  dnnl_execute(entry->prim,
               {{DNNL_ARG_FROM, user_memory(entry->from, src)}, {DNNL_ARG_TO, user_memory(entry->to, dst)}});
  return true;
}

// Whether copy_typed would take its tiled transpose path.
bool is_transpose(const std::vector<Dim>& dims) {
  if (dims.size() < 2) return false;
  const Dim& inner = dims.back();
  if (inner.dst != 1 || inner.src == 1 || inner.src == 0) return false;
  for (size_t k = 0; k + 1 < dims.size(); ++k) {
    if (dims[k].src == 1) return true;
  }
  return false;
}

}  // namespace

void strided_copy(size_t width, std::span<const int64_t> dims, const void* src, std::span<const int64_t> src_strides,
                  void* dst, std::span<const int64_t> dst_strides) {
  std::vector<Dim> simple;
  if (!simplify(dims, src_strides, dst_strides, simple)) return;
  if (is_transpose(simple) && dnnl_transpose(width, simple, src, dst)) return;
  visit_width(width, [&](auto t) {
    using T = decltype(t);
    copy_typed(simple, static_cast<const T*>(src), static_cast<T*>(dst));
  });
}

void fill(size_t width, const void* value, void* dst, int64_t n) {
  PAX_CHECK(width == 1 || width == 2 || width == 4 || width == 8, "fill: invalid element width ", width);
  char* out = static_cast<char*>(dst);
  parallel_for(n, grain_for(int64_t(width)),
               [&](int64_t b, int64_t e) { fill_block(width, value, out + size_t(b) * width, size_t(e - b)); });
}

void copy_bytes(void* dst, const void* src, size_t nbytes) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  parallel_for(int64_t(nbytes), 1 << 20, [&](int64_t b, int64_t e) { std::memcpy(d + b, s + b, size_t(e - b)); });
}

}  // namespace pax::cpu
