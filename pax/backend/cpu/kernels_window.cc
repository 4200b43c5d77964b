// CPU kernels of the windowed reductions: reduce_window_max,
// select_and_scatter_add and select_and_gather_add (pax/prims/window.cc
// defines what they compute). The trailing axes that no window spans (window
// 1, stride 1, no padding: channels of NHWC pooling) form a contiguous inner
// run, so each output row of that run is reduced over the window's rows with
// plain vector loops; outputs are independent (max, gather) or, for the
// scatter, split across threads over leading axes that no window crosses.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "pax/backend/cpu/kernels.h"
#include "pax/core/parallel.h"
#include "pax/core/error.h"
#include "pax/prims/window_params.h"

namespace pax::cpu {
namespace {

// One axis the windows slide over (outer), with strides in elements.
struct Axis {
  int64_t in, out, window, stride, lo, in_stride, out_stride;
};

struct Layout {
  std::vector<Axis> outer;  // leading axes, window loops over them
  int64_t inner = 1;        // the trailing run no window spans
  int64_t out_count = 1;    // output positions over the outer axes
  int64_t window_count = 1;
};

Layout layout_of(const Shape& in, const Shape& out, const Window& w) {
  Layout l;
  int64_t r = in.rank();
  while (r > 0 && w.dims[size_t(r - 1)] == 1 && w.strides[size_t(r - 1)] == 1 && w.lo[size_t(r - 1)] == 0 &&
         w.hi[size_t(r - 1)] == 0) {
    l.inner *= in[r - 1];
    --r;
  }
  int64_t in_stride = l.inner, out_stride = l.inner;
  l.outer.resize(size_t(r));
  for (int64_t d = r; d-- > 0;) {
    l.outer[size_t(d)] = {in[d],           out[d],    w.dims[size_t(d)], w.strides[size_t(d)],
                          w.lo[size_t(d)], in_stride, out_stride};
    in_stride *= in[d];
    out_stride *= out[d];
    l.out_count *= out[d];
    l.window_count *= w.dims[size_t(d)];
  }
  return l;
}

// Loads of a float dtype as float (double for f64).
template <class T>
struct Elem {
  using F = T;
  static F load(T v) { return v; }
  static T store(F v) { return v; }
};
struct Bf16 {
  uint16_t bits;
};
struct F16 {
  uint16_t bits;
};
template <>
struct Elem<Bf16> {
  using F = float;
  static F load(Bf16 v) { return bf16_to_float(v.bits); }
  static Bf16 store(F v) { return {float_to_bf16(v)}; }
};
template <>
struct Elem<F16> {
  using F = float;
  static F load(F16 v) { return f16_to_float(v.bits); }
  static F16 store(F v) { return {float_to_f16(v)}; }
};

// Whether v replaces the window's best so far: a NaN, or a larger value,
// unless the best is a NaN (the window's first NaN, else its first maximum).
// Written without branches, so that the loops over the inner run vectorise.
template <class F>
inline bool better(F v, F best) {
  return (best == best) & ((v > best) | (v != v));
}

// The windows' walk: output positions in order over the outer axes, each
// window's origin, and the window's elements as offsets from it (row-major).
class Walk {
 public:
  explicit Walk(const Layout& l) : l_(l), rank_(l.outer.size()), o_(rank_, 0), origin_(rank_, 0) {
    const int64_t n = l.window_count;
    for (int64_t k = 0; k < n; ++k) {
      int64_t rest = k, off = 0;
      std::vector<int64_t> w(rank_);
      for (size_t d = rank_; d-- > 0;) {
        w[d] = rest % l.outer[d].window;
        rest /= l.outer[d].window;
        off += w[d] * l.outer[d].in_stride;
      }
      offsets_.push_back(off);
      index_.push_back(std::move(w));
    }
  }
  // Positions the walk at output position `flat`.
  void seek(int64_t flat) {
    for (size_t d = rank_; d-- > 0;) {
      o_[d] = flat % l_.outer[d].out;
      flat /= l_.outer[d].out;
    }
    update();
  }
  void next() {
    for (size_t d = rank_; d-- > 0;) {
      if (++o_[d] < l_.outer[d].out) break;
      o_[d] = 0;
    }
    update();
  }
  int64_t out_offset() const { return out_off_; }
  // Offset of window element k in the input, or -1 when it is padding.
  int64_t element(int64_t k) const {
    if (inside_) return in_base_ + offsets_[size_t(k)];
    int64_t off = 0;
    for (size_t d = 0; d < rank_; ++d) {
      const int64_t i = origin_[d] + index_[size_t(k)][d];
      if (i < 0 || i >= l_.outer[d].in) return -1;
      off += i * l_.outer[d].in_stride;
    }
    return off;
  }

 private:
  void update() {
    out_off_ = 0;
    in_base_ = 0;
    inside_ = true;
    for (size_t d = 0; d < rank_; ++d) {
      const Axis& a = l_.outer[d];
      origin_[d] = o_[d] * a.stride - a.lo;
      inside_ = inside_ && origin_[d] >= 0 && origin_[d] + a.window <= a.in;
      out_off_ += o_[d] * a.out_stride;
      in_base_ += origin_[d] * a.in_stride;
    }
  }

  const Layout& l_;
  size_t rank_;
  std::vector<int64_t> o_, origin_;
  std::vector<int64_t> offsets_;
  std::vector<std::vector<int64_t>> index_;
  int64_t out_off_ = 0, in_base_ = 0;
  bool inside_ = true;
};

// For output positions [first, last): f(walk, best, which) with best[c] the
// maximum of element c of the inner run over the window and which[c] the
// window element holding it (-1 for an all-padding window).
template <class T, bool kWhich = true, class F>
void for_each_window(const Layout& l, const T* x, int64_t first, int64_t last, F&& f) {
  using V = typename Elem<T>::F;
  const int64_t n = l.inner;
  std::vector<V> best(static_cast<size_t>(n));
  std::vector<int32_t> which(static_cast<size_t>(n));
  if (first >= last) return;
  Walk walk(l);
  walk.seek(first);
  for (int64_t flat = first; flat < last; ++flat, walk.next()) {
    bool any = false;
    for (int64_t k = 0; k < l.window_count; ++k) {
      const int64_t at = walk.element(k);
      if (at < 0) continue;
      const T* row = x + at;
      if (!any) {
        for (int64_t c = 0; c < n; ++c) best[size_t(c)] = Elem<T>::load(row[c]);
        std::fill(which.begin(), which.end(), int32_t(k));
        any = true;
        continue;
      }
      V* b = best.data();
      int32_t* w = which.data();
      if constexpr (kWhich) {
        for (int64_t c = 0; c < n; ++c) {
          const V v = Elem<T>::load(row[c]);
          const bool take = better(v, b[c]);
          b[c] = take ? v : b[c];
          w[c] = take ? int32_t(k) : w[c];
        }
      } else {
        for (int64_t c = 0; c < n; ++c) {
          const V v = Elem<T>::load(row[c]);
          b[c] = better(v, b[c]) ? v : b[c];
        }
      }
    }
    if (!any) {
      std::fill(best.begin(), best.end(), -std::numeric_limits<V>::infinity());
      std::fill(which.begin(), which.end(), -1);
    }
    f(walk, best, which);
  }
}

int64_t grain(const Layout& l) { return std::max<int64_t>(1, 8192 / std::max<int64_t>(1, l.inner * l.window_count)); }

template <class T>
void reduce_window_max_typed(const Layout& l, const T* x, T* y) {
  parallel_for(l.out_count, grain(l), [&](int64_t b, int64_t e) {
    for_each_window<T, false>(l, x, b, e, [&](const Walk& walk, const auto& best, const auto&) {
      T* out = y + walk.out_offset();
      for (int64_t c = 0; c < l.inner; ++c) out[c] = Elem<T>::store(best[size_t(c)]);
    });
  });
}

template <class T>
void select_and_gather_typed(const Layout& l, const T* t, const T* x, T* y) {
  parallel_for(l.out_count, grain(l), [&](int64_t b, int64_t e) {
    for_each_window<T>(l, x, b, e, [&](const Walk& walk, const auto&, const auto& which) {
      T* out = y + walk.out_offset();
      for (int64_t c = 0; c < l.inner; ++c) {
        const int32_t k = which[size_t(c)];
        out[c] = k >= 0 ? t[walk.element(k) + c] : Elem<T>::store(0);
      }
    });
  });
}

// dst[c] = src[c] where which[c] == k, else +0 (the bits masked as
// integers: the loop vectorises, and a NaN source goes only where selected).
template <class T>
void masked_copy(T* dst, const T* src, const int32_t* which, int32_t k, int64_t n) {
  using U = std::conditional_t<sizeof(T) == 8, uint64_t, std::conditional_t<sizeof(T) == 4, uint32_t, uint16_t>>;
  static_assert(sizeof(U) == sizeof(T));
  U* __restrict d = reinterpret_cast<U*>(dst);
  const U* __restrict s = reinterpret_cast<const U*>(src);
  for (int64_t c = 0; c < n; ++c) d[c] = s[c] & U(U(0) - U(which[c] == k));
}

template <class T>
void select_and_scatter_typed(const Layout& l, const T* s, const T* x, T* y, int64_t n_in) {
  // Windows that tile the input exactly (stride = window, no padding, no
  // remainder): every element lies in one window, so each is written once,
  // with its window's source value or zero. Otherwise y starts at zero and
  // the windows add into it.
  bool tiles = true;
  for (const Axis& a : l.outer) tiles = tiles && a.stride == a.window && a.lo == 0 && a.in == a.out * a.window;
  if (!tiles || l.out_count == 0) std::memset(static_cast<void*>(y), 0, size_t(n_in) * sizeof(T));
  if (l.out_count == 0) return;  // no window fits: nothing selected
  // Leading axes that no window crosses (window 1, stride 1, no padding):
  // tasks over them write disjoint parts of y.
  int64_t apart = 1;
  for (const Axis& a : l.outer) {
    if (a.window != 1 || a.stride != 1 || a.lo != 0 || a.in != a.out) break;
    apart *= a.out;
  }
  const int64_t per_part = l.out_count / std::max<int64_t>(1, apart);
  parallel_for(apart, 1, [&](int64_t b, int64_t e) {
    for_each_window<T>(l, x, b * per_part, e * per_part, [&](const Walk& walk, const auto&, const auto& which) {
      const T* src = s + walk.out_offset();
      if (tiles) {
        for (int64_t k = 0; k < l.window_count; ++k) {
          masked_copy(y + walk.element(k), src, which.data(), int32_t(k), l.inner);
        }
        return;
      }
      for (int64_t c = 0; c < l.inner; ++c) {
        const int32_t k = which[size_t(c)];
        if (k < 0) continue;
        T& dst = y[walk.element(k) + c];
        dst = Elem<T>::store(Elem<T>::load(dst) + Elem<T>::load(src[c]));
      }
    });
  });
}

template <class Body>
void visit_float(DType dtype, const char* who, Body&& body) {
  switch (dtype) {
    case DType::f32: return body(float{});
    case DType::f64: return body(double{});
    case DType::bf16: return body(Bf16{});
    case DType::f16: return body(F16{});
    default: break;
  }
  PAX_FAIL(who, ": no kernel for ", dtype_name(dtype));
}

Window window_params(const TensorView& x, const Params& p, Prim prim) {
  return window_of(prim, AVal{*x.shape, x.dtype, false}, p);
}

void reduce_window_max_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                              std::span<const TensorView> out) {
  const TensorView &x = in[0], &y = out[0];
  if (y.numel() == 0) return;
  const Layout l = layout_of(*x.shape, *y.shape, window_params(x, p, Prim::reduce_window_max));
  visit_float(x.dtype, "reduce_window_max", [&](auto t) {
    using T = decltype(t);
    reduce_window_max_typed<T>(l, static_cast<const T*>(x.data), static_cast<T*>(y.data));
  });
}

void select_and_scatter_add_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                                   std::span<const TensorView> out) {
  const TensorView &s = in[0], &x = in[1], &y = out[0];
  if (y.numel() == 0) return;
  const Layout l = layout_of(*x.shape, *s.shape, window_params(x, p, Prim::select_and_scatter_add));
  visit_float(x.dtype, "select_and_scatter_add", [&](auto t) {
    using T = decltype(t);
    select_and_scatter_typed<T>(l, static_cast<const T*>(s.data), static_cast<const T*>(x.data),
                                static_cast<T*>(y.data), x.numel());
  });
}

void select_and_gather_add_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                                  std::span<const TensorView> out) {
  const TensorView &t = in[0], &x = in[1], &y = out[0];
  if (y.numel() == 0) return;
  const Layout l = layout_of(*x.shape, *y.shape, window_params(x, p, Prim::select_and_gather_add));
  visit_float(x.dtype, "select_and_gather_add", [&](auto v) {
    using T = decltype(v);
    select_and_gather_typed<T>(l, static_cast<const T*>(t.data), static_cast<const T*>(x.data),
                               static_cast<T*>(y.data));
  });
}

}  // namespace

void register_window_kernels(CpuKernelTable& t) {
  t[size_t(Prim::reduce_window_max)] = reduce_window_max_kernel;
  t[size_t(Prim::select_and_scatter_add)] = select_and_scatter_add_kernel;
  t[size_t(Prim::select_and_gather_add)] = select_and_gather_add_kernel;
}

}  // namespace pax::cpu
