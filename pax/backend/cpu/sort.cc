// Sort and top_k kernels (see sort.h). Every element is first mapped to an
// unsigned "order key" whose integer order is the total order of its dtype, so
// comparisons are plain integer compares and long rows can be radix sorted.
// Sorting computes a permutation of each row (stable LSD passes, from the
// last key to the first) and then gathers every operand through it.
#include "pax/backend/cpu/sort.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <type_traits>
#include <vector>

#include "pax/backend/cpu/dispatch.h"
#include "pax/core/parallel.h"

namespace pax::cpu {
namespace {

// Floats: NaNs become the largest key (all equal), -0 becomes +0, then the
// sign-magnitude bits are turned into an order-preserving unsigned integer.
// Branch-free: random signs would otherwise mispredict half the time.
template <class U>
inline U float_order(U bits, U exp_mask) {
  constexpr int kBits = int(sizeof(U) * 8);
  constexpr U kSign = U(U(1) << (kBits - 1));
  const U mag = U(bits & ~kSign);
  const U negative = U(U(0) - U(bits >> (kBits - 1)));  // all ones when the sign is set
  U key = U(bits ^ U(negative | kSign));
  key = mag > exp_mask ? U(~U(0)) : key;
  return mag == 0 ? kSign : key;
}

template <class T>
inline auto order_key(T v) {
  if constexpr (std::is_same_v<T, bool>) {
    return uint8_t(v ? 1 : 0);
  } else if constexpr (std::is_same_v<T, uint8_t> || std::is_same_v<T, uint32_t>) {
    return v;
  } else if constexpr (std::is_same_v<T, int32_t> || std::is_same_v<T, int64_t>) {
    using U = std::make_unsigned_t<T>;
    return U(U(v) ^ (U(1) << (sizeof(U) * 8 - 1)));
  } else if constexpr (std::is_same_v<T, bf16>) {
    return float_order<uint16_t>(v.bits, 0x7f80);
  } else if constexpr (std::is_same_v<T, f16>) {
    return float_order<uint16_t>(v.bits, 0x7c00);
  } else if constexpr (std::is_same_v<T, float>) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    return float_order<uint32_t>(b, 0x7f800000u);
  } else {
    static_assert(std::is_same_v<T, double>);
    uint64_t b;
    std::memcpy(&b, &v, 8);
    return float_order<uint64_t>(b, 0x7ff0000000000000ull);
  }
}

template <class T>
using KeyOf = decltype(order_key(T{}));

// A key with a 32-bit position below it: one integer compare orders by key,
// then by position.
template <class K>
using Composite = std::conditional_t<(sizeof(K) <= 4), uint64_t, unsigned __int128>;

// Rows shorter than this are sorted by comparison; longer ones by radix.
constexpr int64_t kRadixMin = 512;

// Per-thread buffers, reused across rows.
struct Scratch {
  std::vector<uint32_t> ord, ord2;
  std::vector<unsigned __int128> comp;  // composites (either width)
  std::vector<uint64_t> keys, keys2;    // radix keys (any width up to 8 bytes)
  std::vector<int64_t> hist;            // radix histograms, 256 per key byte

  void resize(int64_t n) {
    ord.resize(size_t(n));
    ord2.resize(size_t(n));
    comp.resize(size_t(n));
    keys.resize(size_t(n));
    keys2.resize(size_t(n));
    hist.resize(8 * 256);
  }
};

// Reorders ord[0..n) stably by the key of row[ord[r]], ascending or
// (kDescending) descending.
template <class T, bool kDescending = false>
void sort_pass(const T* row, int64_t n, Scratch& s) {
  using K = KeyOf<T>;
  uint32_t* ord = s.ord.data();
  auto key_of = [&](int64_t r) {
    const K key = order_key(row[ord[r]]);
    return kDescending ? K(~key) : key;
  };
  if (n < kRadixMin) {
    using C = Composite<K>;
    C* comp = reinterpret_cast<C*>(s.comp.data());
    for (int64_t r = 0; r < n; ++r) comp[r] = (C(key_of(r)) << 32) | C(r);
    std::sort(comp, comp + n);
    for (int64_t r = 0; r < n; ++r) s.ord2[size_t(r)] = ord[uint32_t(comp[r])];
    s.ord.swap(s.ord2);
    return;
  }
  // LSD radix sort on the key bytes, skipping bytes that are equal everywhere.
  K* keys = reinterpret_cast<K*>(s.keys.data());
  K* keys2 = reinterpret_cast<K*>(s.keys2.data());
  constexpr int kBytes = int(sizeof(K));
  int64_t* hist = s.hist.data();
  std::fill(hist, hist + kBytes * 256, 0);
  for (int64_t r = 0; r < n; ++r) {
    const K key = key_of(r);
    keys[r] = key;
    for (int b = 0; b < kBytes; ++b) ++hist[b * 256 + int((key >> (8 * b)) & 0xff)];
  }
  uint32_t* vals = ord;
  uint32_t* vals2 = s.ord2.data();
  for (int b = 0; b < kBytes; ++b) {
    int64_t* h = hist + b * 256;
    if (h[(keys[0] >> (8 * b)) & 0xff] == n) continue;
    int64_t sum = 0;
    for (int v = 0; v < 256; ++v) {
      const int64_t c = h[v];
      h[v] = sum;
      sum += c;
    }
    for (int64_t r = 0; r < n; ++r) {
      const int64_t dst = h[(keys[r] >> (8 * b)) & 0xff]++;
      keys2[dst] = keys[r];
      vals2[dst] = vals[r];
    }
    std::swap(keys, keys2);
    std::swap(vals, vals2);
  }
  if (vals != s.ord.data()) s.ord.swap(s.ord2);
}

// dst[r] = src[ord[r]] for r < n.
template <class W>
void permute_row(const W* src, W* dst, const uint32_t* ord, int64_t n) {
  for (int64_t r = 0; r < n; ++r) dst[r] = src[ord[r]];
}

// Rows along an axis other than the last are strided. They are sorted in
// tiles of kTile neighbouring rows, copied to contiguous scratch and back by
// tile transposes, so that no pass walks memory with a large (often
// power-of-two, cache-set-aliasing) stride.
constexpr int64_t kTile = 16;

// Transposes between a strided tile (n rows of `cols` neighbouring elements,
// `stride` apart) and `cols` contiguous rows of n.
template <class W>
void tile_to_rows(const W* src, int64_t stride, W* dst, int64_t n, int64_t cols) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < cols; ++j) dst[j * n + r] = src[r * stride + j];
}
template <class W>
void rows_to_tile(const W* src, W* dst, int64_t stride, int64_t n, int64_t cols) {
  for (int64_t r = 0; r < n; ++r)
    for (int64_t j = 0; j < cols; ++j) dst[r * stride + j] = src[j * n + r];
}

// Sorts one contiguous row of every operand: src[op] -> dst[op].
void sort_row(std::span<const TensorView> in, const std::vector<const void*>& src, const std::vector<void*>& dst,
              int64_t n, int64_t num_keys, Scratch& s) {
  for (int64_t i = 0; i < n; ++i) s.ord[size_t(i)] = uint32_t(i);
  for (int64_t key = num_keys; key-- > 0;) {
    visit_dtype(in[size_t(key)].dtype, [&](auto t) {
      using T = decltype(t);
      sort_pass(static_cast<const T*>(src[size_t(key)]), n, s);
    });
  }
  for (size_t op = 0; op < in.size(); ++op) {
    visit_width(itemsize(in[op].dtype), [&](auto w) {
      using W = decltype(w);
      permute_row(static_cast<const W*>(src[op]), static_cast<W*>(dst[op]), s.ord.data(), n);
    });
  }
}

}  // namespace

void sort(std::span<const TensorView> in, std::span<const TensorView> out, int64_t dimension, int64_t num_keys) {
  const Shape& shape = *in[0].shape;
  const int64_t n = shape[dimension];
  if (shape.numel() == 0) return;
  int64_t inner = 1;
  for (int64_t d = dimension + 1; d < shape.rank(); ++d) inner *= shape[d];
  const int64_t outer = shape.numel() / (n * inner);
  const int64_t tile = inner == 1 ? 1 : kTile;
  const int64_t tiles_per_outer = (inner + tile - 1) / tile;
  const size_t nops = in.size();

  parallel_for(outer * tiles_per_outer, std::max<int64_t>(1, 16384 / (n * tile)), [&](int64_t t0, int64_t t1) {
    Scratch s;
    s.resize(n);
    // Contiguous copies of a tile of every operand (unused when inner == 1).
    std::vector<std::vector<uint64_t>> in_rows(nops), out_rows(nops);
    if (inner > 1) {
      for (size_t op = 0; op < nops; ++op) {
        const size_t words = (size_t(tile * n) * itemsize(in[op].dtype) + 7) / 8;
        in_rows[op].resize(words);
        out_rows[op].resize(words);
      }
    }
    std::vector<const void*> src(nops);
    std::vector<void*> dst(nops);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t j0 = (t % tiles_per_outer) * tile;
      const int64_t cols = std::min(tile, inner - j0);
      const int64_t base = (t / tiles_per_outer) * n * inner + j0;
      if (inner == 1) {
        for (size_t op = 0; op < nops; ++op) {
          const size_t w = itemsize(in[op].dtype);
          src[op] = static_cast<const char*>(in[op].data) + base * w;
          dst[op] = static_cast<char*>(out[op].data) + base * w;
        }
        sort_row(in, src, dst, n, num_keys, s);
        continue;
      }
      for (size_t op = 0; op < nops; ++op) {
        visit_width(itemsize(in[op].dtype), [&](auto w) {
          using W = decltype(w);
          tile_to_rows(static_cast<const W*>(in[op].data) + base, inner, reinterpret_cast<W*>(in_rows[op].data()), n,
                       cols);
        });
      }
      for (int64_t j = 0; j < cols; ++j) {
        for (size_t op = 0; op < nops; ++op) {
          const size_t w = itemsize(in[op].dtype);
          src[op] = reinterpret_cast<const char*>(in_rows[op].data()) + size_t(j * n) * w;
          dst[op] = reinterpret_cast<char*>(out_rows[op].data()) + size_t(j * n) * w;
        }
        sort_row(in, src, dst, n, num_keys, s);
      }
      for (size_t op = 0; op < nops; ++op) {
        visit_width(itemsize(in[op].dtype), [&](auto w) {
          using W = decltype(w);
          rows_to_tile(reinterpret_cast<const W*>(out_rows[op].data()), static_cast<W*>(out[op].data) + base, inner, n,
                       cols);
        });
      }
    }
  });
}

namespace {

// Composite of the key and the complemented index: larger means "comes first"
// (larger key, then lower index).
template <class T>
void top_k_typed(const T* x, int64_t rows, int64_t n, int64_t k, T* values, int32_t* indices) {
  using C = Composite<KeyOf<T>>;
  auto composite = [](T v, int64_t i) { return (C(order_key(v)) << 32) | C(0xffffffffu - uint32_t(i)); };
  parallel_for(rows, std::max<int64_t>(1, 65536 / n), [&](int64_t r0, int64_t r1) {
    std::vector<C> buf;
    Scratch s;
    const std::greater<C> gt;
    for (int64_t r = r0; r < r1; ++r) {
      const T* xr = x + r * n;
      if (k * 8 <= n) {
        // Min-heap of the best k so far: most elements only meet the threshold test.
        buf.resize(size_t(k));
        for (int64_t i = 0; i < k; ++i) buf[size_t(i)] = composite(xr[i], i);
        std::make_heap(buf.begin(), buf.end(), gt);
        for (int64_t i = k; i < n; ++i) {
          const C c = composite(xr[i], i);
          if (c > buf.front()) {
            std::pop_heap(buf.begin(), buf.end(), gt);
            buf.back() = c;
            std::push_heap(buf.begin(), buf.end(), gt);
          }
        }
        std::sort_heap(buf.begin(), buf.end(), gt);
        for (int64_t j = 0; j < k; ++j) {
          const uint32_t i = 0xffffffffu - uint32_t(buf[size_t(j)]);
          values[r * k + j] = xr[i];
          indices[r * k + j] = int32_t(i);
        }
      } else {
        // Large k: a full stable sort of the row, descending.
        s.resize(n);
        for (int64_t i = 0; i < n; ++i) s.ord[size_t(i)] = uint32_t(i);
        sort_pass<T, true>(xr, n, s);
        for (int64_t j = 0; j < k; ++j) {
          const uint32_t i = s.ord[size_t(j)];
          values[r * k + j] = xr[i];
          indices[r * k + j] = int32_t(i);
        }
      }
    }
  });
}

}  // namespace

void top_k(const TensorView& x, int64_t k, const TensorView& values, const TensorView& indices) {
  const int64_t n = x.dim(x.rank() - 1);
  if (values.numel() == 0) return;
  visit_dtype(x.dtype, [&](auto t) {
    using T = decltype(t);
    top_k_typed(static_cast<const T*>(x.data), x.numel() / n, n, k, static_cast<T*>(values.data),
                indices.as<int32_t>());
  });
}

}  // namespace pax::cpu
