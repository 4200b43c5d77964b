// Strided copy engine (see copy.h).
#include "pax/backend/cpu/copy.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "pax/backend/cpu/dispatch.h"
#include "pax/backend/cpu/fused_kernels.h"
#include "pax/backend/cpu/parallel.h"

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
    parallel_for(work, std::max<int64_t>(1, (256 << 10) / std::max<int64_t>(1, tile_bytes)),
                 [&](int64_t b, int64_t e) {
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

}  // namespace

void strided_copy(size_t width, std::span<const int64_t> dims, const void* src,
                  std::span<const int64_t> src_strides, void* dst, std::span<const int64_t> dst_strides) {
  std::vector<Dim> simple;
  if (!simplify(dims, src_strides, dst_strides, simple)) return;
  visit_width(width, [&](auto t) {
    using T = decltype(t);
    copy_typed(simple, static_cast<const T*>(src), static_cast<T*>(dst));
  });
}

void fill(size_t width, const void* value, void* dst, int64_t n) {
  PAX_CHECK(width == 1 || width == 2 || width == 4 || width == 8, "fill: invalid element width ", width);
  char* out = static_cast<char*>(dst);
  parallel_for(n, grain_for(int64_t(width)), [&](int64_t b, int64_t e) {
    fill_block(width, value, out + size_t(b) * width, size_t(e - b));
  });
}

void copy_bytes(void* dst, const void* src, size_t nbytes) {
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  parallel_for(int64_t(nbytes), 1 << 20, [&](int64_t b, int64_t e) { std::memcpy(d + b, s + b, size_t(e - b)); });
}

}  // namespace pax::cpu
