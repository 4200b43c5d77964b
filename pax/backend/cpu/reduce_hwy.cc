// Single-threaded row / column kernels for reductions, arg-reductions and
// cumulative sums (see reduce.h), compiled once per SIMD target by Highway and
// chosen at run time.
// - f32 / f64 rows: four Highway vector accumulators, lanes combined at the end.
// - f32 / f64 columns: Highway vectors along the row, four rows combined per
//   pass into the column accumulators.
// - Integer loops are plain loops that the compiler vectorises for the target
//   (this file is compiled with the target's instruction set); sums and
//   products run in the unsigned type so that overflow wraps.
// - bf16 / f16 accumulate in f32: widened in the vector loads of the loops
//   above, or, where the work is mostly scalar (short rows, narrow columns)
//   and for arg-reductions over columns and scans, in staging blocks.
// Floating max / min propagate NaN whatever the target's Max / Min do with it.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "pax/backend/cpu/reduce_hwy.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "pax/backend/cpu/dispatch.h"
#include "pax/backend/cpu/elementwise.h"
#include "pax/backend/cpu/reduce.h"
#include "pax/core/error.h"

HWY_BEFORE_NAMESPACE();
namespace pax::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr size_t kStage = 4096;  // f32 staging block for bf16 / f16 (16 KiB)

template <ReduceOp kOp>
constexpr bool kMinMax = kOp == ReduceOp::max || kOp == ReduceOp::min;
template <ReduceOp kOp>
constexpr bool kBitwise = kOp == ReduceOp::and_ || kOp == ReduceOp::or_;
template <ReduceOp kOp>
constexpr bool kArith = kOp == ReduceOp::sum || kOp == ReduceOp::prod;

template <class T>
constexpr bool kIsFloat = std::is_floating_point_v<T>;
template <class T>
constexpr bool kIsHalf = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;

// The type an integer reduction computes in: unsigned for wrapping
// arithmetic and bit operations, the storage type for comparisons (and for
// floating types).
template <ReduceOp kOp, class T>
using IntAcc =
    typename std::conditional_t<kMinMax<kOp> || kIsFloat<T>, std::type_identity<T>, std::make_unsigned<T>>::type;

template <ReduceOp kOp, class T>
constexpr T Identity() {
  using L = std::numeric_limits<T>;
  if constexpr (kOp == ReduceOp::sum || kOp == ReduceOp::or_) return T(0);
  else if constexpr (kOp == ReduceOp::prod) return T(1);
  else if constexpr (kOp == ReduceOp::and_) return T(~T(0));
  else if constexpr (kOp == ReduceOp::max) return L::has_infinity ? -L::infinity() : L::lowest();
  else return L::has_infinity ? L::infinity() : L::max();
}

// Scalar combine; floating max / min return the first NaN operand.
template <ReduceOp kOp, class T>
HWY_INLINE T Apply(T a, T b) {
  if constexpr (kOp == ReduceOp::sum) return T(a + b);
  else if constexpr (kOp == ReduceOp::prod) return T(a * b);
  else if constexpr (kOp == ReduceOp::and_) return T(a & b);
  else if constexpr (kOp == ReduceOp::or_) return T(a | b);
  else {
    if constexpr (kIsFloat<T>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    if constexpr (kOp == ReduceOp::max) return a < b ? b : a;
    else return b < a ? b : a;
  }
}

// Vector combine without NaN handling (rows track NaN separately).
template <ReduceOp kOp, class D, class V>
HWY_INLINE V VApply(D, V a, V b) {
  if constexpr (kOp == ReduceOp::sum) return hn::Add(a, b);
  else if constexpr (kOp == ReduceOp::prod) return hn::Mul(a, b);
  else if constexpr (kOp == ReduceOp::max) return hn::Max(a, b);
  else return hn::Min(a, b);
}

// Vector combine with NaN propagation (the first NaN operand wins, as Apply).
template <ReduceOp kOp, class D, class V>
HWY_INLINE V VApplyNaN(D d, V a, V b) {
  V r = VApply<kOp>(d, a, b);
  if constexpr (kMinMax<kOp>) {
    r = hn::IfThenElse(hn::IsNaN(b), b, r);
    r = hn::IfThenElse(hn::IsNaN(a), a, r);
  }
  return r;
}

// ---------------------------------------------------------------------------
// bf16 / f16: widened to f32 by the vector loads of the main loops, or, for
// short rows and narrow columns (mostly scalar work), in staging blocks.

template <class S>
using Wide = std::conditional_t<kIsHalf<S>, float, S>;

template <class D, class S>
HWY_INLINE hn::Vec<D> LoadWide(D d, const S* p) {
  if constexpr (std::is_same_v<S, bf16>) {
    const hn::Rebind<hwy::bfloat16_t, D> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::bfloat16_t*>(p)));
  } else if constexpr (std::is_same_v<S, f16>) {
#if HWY_TARGET == HWY_AVX2 || HWY_TARGET == HWY_AVX3 || HWY_TARGET == HWY_AVX3_DL
    const hn::Rebind<hwy::float16_t, D> dh;
    return hn::PromoteTo(d, hn::LoadU(dh, reinterpret_cast<const hwy::float16_t*>(p)));
#else
    // Highway's software f16 widening turns NaN into a number; widen exactly.
    HWY_ALIGN float buf[64];
    for (size_t k = 0; k < hn::Lanes(d); ++k) buf[k] = float(p[k]);
    return hn::Load(d, buf);
#endif
  } else {
    return hn::LoadU(d, p);
  }
}

// Whether a row is short enough for scalar code.
HWY_INLINE bool ShortRow(size_t len) { return len < 2 * hn::Lanes(hn::ScalableTag<float>()); }

// Widens m rows of w elements (rows `stride` apart) into stage[m * w].
void StageRows(DType dtype, const uint16_t* x, size_t stride, size_t w, size_t m, float* stage) {
  if (stride == w) return convert(dtype, x, DType::f32, stage, m * w);
  for (size_t k = 0; k < m; ++k) convert(dtype, x + k * stride, DType::f32, stage + k * w, w);
}

// Rounds stage[m * w] back into m rows of w elements (rows `stride` apart).
void UnstageRows(DType dtype, const float* stage, size_t w, size_t m, uint16_t* y, size_t stride) {
  if (stride == w) return convert(DType::f32, stage, dtype, y, m * w);
  for (size_t k = 0; k < m; ++k) convert(DType::f32, stage + k * w, dtype, y + k * stride, w);
}

// Calls f(stage, m, r) for consecutive groups of m rows of `len` (<= kStage)
// contiguous elements, starting at row r, widened to f32.
template <class F>
HWY_INLINE void ForStagedRows(DType dtype, const uint16_t* x, size_t rows, size_t len, float* stage, F&& f) {
  const size_t g = kStage / len;
  for (size_t r = 0; r < rows; r += g) {
    const size_t m = std::min(g, rows - r);
    convert(dtype, x + r * len, DType::f32, stage, m * len);
    f(stage, m, r);
  }
}

// Calls f(p, m, r) for the bf16 / f16 rows x (m rows from row r at p): once
// on x itself (the kernels widen in their loads), or, for short rows, on f32
// copies of groups of rows.
template <class S, class F>
HWY_INLINE void HalfRows(DType dtype, const S* x, size_t rows, size_t len, F&& f) {
  if (!ShortRow(len)) return f(x, rows, size_t(0));
  HWY_ALIGN float stage[kStage];
  ForStagedRows(dtype, reinterpret_cast<const uint16_t*>(x), rows, len, stage,
                [&](const float* s, size_t m, size_t r) HWY_ATTR { f(s, m, r); });
}

// ---------------------------------------------------------------------------
// Row reductions

// Four vector accumulators (independent dependency chains, 4 * lanes partial
// results) and, for max / min, a per-lane NaN flag.
template <ReduceOp kOp, class T>
struct RowAcc {
  using D = hn::ScalableTag<T>;
  using V = hn::Vec<D>;
  D d;
  V a0, a1, a2, a3, nan;

  RowAcc() : a0(hn::Set(d, Identity<kOp, T>())), a1(a0), a2(a0), a3(a0), nan(hn::Zero(d)) {}

  HWY_INLINE void Add(V& a, V x) {
    a = VApply<kOp>(d, a, x);
    if constexpr (kMinMax<kOp>) nan = hn::Or(nan, hn::VecFromMask(d, hn::IsNaN(x)));
  }

  template <class S>
  HWY_INLINE void Consume(const S* HWY_RESTRICT x, size_t n) {
    const size_t N = hn::Lanes(d);
    size_t i = 0;
    for (; i + 4 * N <= n; i += 4 * N) {
      Add(a0, LoadWide(d, x + i));
      Add(a1, LoadWide(d, x + i + N));
      Add(a2, LoadWide(d, x + i + 2 * N));
      Add(a3, LoadWide(d, x + i + 3 * N));
    }
    for (; i + N <= n; i += N) Add(a0, LoadWide(d, x + i));
    if (i < n) {
      HWY_ALIGN T buf[64];
      std::fill(buf, buf + N, Identity<kOp, T>());
      for (size_t k = i; k < n; ++k) buf[k - i] = T(x[k]);
      Add(a1, hn::Load(d, buf));
    }
  }

  HWY_INLINE T Finish() {
    if constexpr (kMinMax<kOp>) {
      if (!hn::AllFalse(d, hn::MaskFromVec(nan))) return std::numeric_limits<T>::quiet_NaN();
    }
    const V v = VApply<kOp>(d, VApply<kOp>(d, a0, a1), VApply<kOp>(d, a2, a3));
    if constexpr (kOp == ReduceOp::sum) return hn::GetLane(hn::SumOfLanes(d, v));
    else if constexpr (kOp == ReduceOp::max) return hn::GetLane(hn::MaxOfLanes(d, v));
    else if constexpr (kOp == ReduceOp::min) return hn::GetLane(hn::MinOfLanes(d, v));
    else {
      HWY_ALIGN T lanes[64];
      hn::Store(v, d, lanes);
      T p = lanes[0];
      for (size_t i = 1; i < hn::Lanes(d); ++i) p *= lanes[i];
      return p;
    }
  }
};

// One row of f32 / f64, or of bf16 / f16 that is not short.
template <ReduceOp kOp, class S>
Wide<S> RowFloat(const S* x, size_t n) {
  using T = Wide<S>;
  if (ShortRow(n)) {
    T a = T(x[0]);
    for (size_t i = 1; i < n; ++i) a = Apply<kOp>(a, T(x[i]));
    return a;
  }
  RowAcc<kOp, T> acc;
  acc.Consume(x, n);
  return acc.Finish();
}

template <ReduceOp kOp, class S>
void RowsFloat(const S* x, size_t rows, size_t len, Wide<S>* acc) {
  for (size_t r = 0; r < rows; ++r) acc[r] = RowFloat<kOp>(x + r * len, len);
}

template <ReduceOp kOp, class W>
void RowsInt(const W* HWY_RESTRICT x, size_t rows, size_t len, W* HWY_RESTRICT acc) {
  for (size_t r = 0; r < rows; ++r) {
    const W* row = x + r * len;
    W a = Identity<kOp, W>();
    for (size_t i = 0; i < len; ++i) a = Apply<kOp>(a, row[i]);
    acc[r] = a;
  }
}

// ---------------------------------------------------------------------------
// Column reductions: acc[j] = op(acc[j], x[r * stride + j]) for every row,
// four rows per pass so that the accumulators are read and written once per
// four input rows.

template <ReduceOp kOp, class S, class T>
void ColsAccumulate(const S* x, size_t rows, size_t stride, size_t width, T* HWY_RESTRICT acc) {
  size_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    const S* x0 = x + r * stride;
    const S* x1 = x0 + stride;
    const S* x2 = x1 + stride;
    const S* x3 = x2 + stride;
    size_t j = 0;
    if constexpr (kIsFloat<T>) {
      const hn::ScalableTag<T> d;
      const size_t N = hn::Lanes(d);
      for (; j + N <= width; j += N) {
        const auto v01 = VApplyNaN<kOp>(d, LoadWide(d, x0 + j), LoadWide(d, x1 + j));
        const auto v23 = VApplyNaN<kOp>(d, LoadWide(d, x2 + j), LoadWide(d, x3 + j));
        hn::StoreU(VApplyNaN<kOp>(d, hn::LoadU(d, acc + j), VApplyNaN<kOp>(d, v01, v23)), d, acc + j);
      }
    }
    for (; j < width; ++j) {
      acc[j] = Apply<kOp>(acc[j], Apply<kOp>(Apply<kOp>(T(x0[j]), T(x1[j])), Apply<kOp>(T(x2[j]), T(x3[j]))));
    }
  }
  for (; r < rows; ++r) {
    const S* x0 = x + r * stride;
    size_t j = 0;
    if constexpr (kIsFloat<T>) {
      const hn::ScalableTag<T> d;
      const size_t N = hn::Lanes(d);
      for (; j + N <= width; j += N) {
        hn::StoreU(VApplyNaN<kOp>(d, hn::LoadU(d, acc + j), LoadWide(d, x0 + j)), d, acc + j);
      }
    }
    for (; j < width; ++j) acc[j] = Apply<kOp>(acc[j], T(x0[j]));
  }
}

template <ReduceOp kOp, class S>
void ColsHalf(DType dtype, const S* x, size_t rows, size_t stride, size_t width, float* acc) {
  // Wide blocks are mostly whole vectors: widen in the loads.
  if (width >= 4 * hn::Lanes(hn::ScalableTag<float>())) return ColsAccumulate<kOp>(x, rows, stride, width, acc);
  HWY_ALIGN float stage[kStage];
  const size_t g = kStage / width;
  for (size_t r = 0; r < rows; r += g) {
    const size_t m = std::min(g, rows - r);
    StageRows(dtype, reinterpret_cast<const uint16_t*>(x + r * stride), stride, width, m, stage);
    ColsAccumulate<kOp>(stage, m, width, width, acc);
  }
}

// ---------------------------------------------------------------------------
// Dispatch on (op, dtype) once per call.

template <ReduceOp kOp>
struct OpTag {
  static constexpr ReduceOp value = kOp;
};

template <class F>
HWY_INLINE void VisitOp(ReduceOp op, F&& f) {
  switch (op) {
    case ReduceOp::sum: return f(OpTag<ReduceOp::sum>());
    case ReduceOp::prod: return f(OpTag<ReduceOp::prod>());
    case ReduceOp::max: return f(OpTag<ReduceOp::max>());
    case ReduceOp::min: return f(OpTag<ReduceOp::min>());
    case ReduceOp::and_: return f(OpTag<ReduceOp::and_>());
    case ReduceOp::or_: return f(OpTag<ReduceOp::or_>());
  }
}

const char* OpName(ReduceOp op) {
  static const char* const kNames[] = {"sum", "prod", "max", "min", "and", "or"};
  return kNames[size_t(op)];
}

// Calls f(T{}, OpTag) for a valid (op, dtype) pair with T the storage type
// (bool as uint8_t); throws for an invalid pair.
template <class F>
void VisitReduce(ReduceOp op, DType dtype, F&& f) {
  bool ok = false;
  VisitOp(op, [&](auto tag) HWY_ATTR {
    constexpr ReduceOp kOp = decltype(tag)::value;
    visit_dtype(dtype, [&](auto t) HWY_ATTR {
      using T = decltype(t);
      if constexpr (std::is_same_v<T, bool>) {
        if constexpr (!kArith<kOp>) {
          f(uint8_t{}, tag);
          ok = true;
        }
      } else if constexpr (kIsFloat<T> || kIsHalf<T>) {
        if constexpr (!kBitwise<kOp>) {
          f(t, tag);
          ok = true;
        }
      } else {
        f(t, tag);
        ok = true;
      }
    });
  });
  PAX_CHECK(ok, "reduce kernel: ", OpName(op), " is not defined for ", dtype_name(dtype));
}

void ReduceRows(ReduceOp op, DType dtype, const void* x, size_t rows, size_t len, void* acc) {
  VisitReduce(op, dtype, [&](auto t, auto tag) HWY_ATTR {
    using T = decltype(t);
    constexpr ReduceOp kOp = decltype(tag)::value;
    if constexpr (kIsFloat<T>) {
      RowsFloat<kOp>(static_cast<const T*>(x), rows, len, static_cast<T*>(acc));
    } else if constexpr (kIsHalf<T>) {
      HalfRows(dtype, static_cast<const T*>(x), rows, len, [&](const auto* p, size_t m, size_t r) HWY_ATTR {
        RowsFloat<kOp>(p, m, len, static_cast<float*>(acc) + r);
      });
    } else {
      using W = IntAcc<kOp, T>;
      RowsInt<kOp>(static_cast<const W*>(x), rows, len, static_cast<W*>(acc));
    }
  });
}

void ReduceCols(ReduceOp op, DType dtype, const void* x, size_t rows, size_t stride, size_t width, void* acc) {
  VisitReduce(op, dtype, [&](auto t, auto tag) HWY_ATTR {
    using T = decltype(t);
    constexpr ReduceOp kOp = decltype(tag)::value;
    if constexpr (kIsHalf<T>) {
      float* a = static_cast<float*>(acc);
      std::fill(a, a + width, Identity<kOp, float>());
      ColsHalf<kOp>(dtype, static_cast<const T*>(x), rows, stride, width, a);
    } else {
      using W = IntAcc<kOp, T>;
      W* a = static_cast<W*>(acc);
      std::fill(a, a + width, Identity<kOp, W>());
      ColsAccumulate<kOp>(static_cast<const W*>(x), rows, stride, width, a);
    }
  });
}

// ---------------------------------------------------------------------------
// Arg-reductions. Rows: find the extreme (reduction above), then the first
// element equal to it (or the first NaN). Columns: running best value and
// index per column; a value replaces the best only when strictly better, and
// nothing replaces a NaN.

template <bool kMax>
constexpr ReduceOp kExtreme = kMax ? ReduceOp::max : ReduceOp::min;

// Position of the first x[i] == m (the first NaN when m is NaN), or -1.
template <class S, class T = Wide<S>>
int64_t FindFirstFloat(const S* x, size_t n, T m) {
  const hn::ScalableTag<T> d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  if (m != m) {
    for (; i + N <= n; i += N) {
      const auto hit = hn::IsNaN(LoadWide(d, x + i));
      if (!hn::AllFalse(d, hit)) return int64_t(i) + hn::FindFirstTrue(d, hit);
    }
    for (; i < n; ++i) {
      if (std::isnan(T(x[i]))) return int64_t(i);
    }
    return -1;
  }
  const auto mv = hn::Set(d, m);
  for (; i + N <= n; i += N) {
    const auto hit = hn::Eq(LoadWide(d, x + i), mv);
    if (!hn::AllFalse(d, hit)) return int64_t(i) + hn::FindFirstTrue(d, hit);
  }
  for (; i < n; ++i) {
    if (T(x[i]) == m) return int64_t(i);
  }
  return -1;
}

template <bool kMax, class S>
void ArgRowsFloat(const S* x, size_t rows, size_t len, int32_t* idx) {
  for (size_t r = 0; r < rows; ++r) {
    const S* row = x + r * len;
    idx[r] = int32_t(FindFirstFloat(row, len, RowFloat<kExtreme<kMax>>(row, len)));
  }
}

template <bool kMax, class T>
void ArgRowsInt(const T* x, size_t rows, size_t len, int32_t* idx) {
  for (size_t r = 0; r < rows; ++r) {
    const T* row = x + r * len;
    T best = Identity<kExtreme<kMax>, T>();
    for (size_t i = 0; i < len; ++i) best = Apply<kExtreme<kMax>>(best, row[i]);
    size_t i = 0;
    while (row[i] != best) ++i;
    idx[r] = int32_t(i);
  }
}

// Rows r_base.. of a column block: best[j] / idx[j] updated in place.
template <bool kMax, class T>
void ArgColsUpdate(const T* x, size_t rows, size_t stride, size_t w, size_t r_base, T* HWY_RESTRICT best,
                   int32_t* HWY_RESTRICT idx) {
  for (size_t r = 0; r < rows; ++r) {
    const T* HWY_RESTRICT xr = x + r * stride;
    const int32_t ri = int32_t(r_base + r);
    for (size_t j = 0; j < w; ++j) {
      const T v = xr[j];
      const T b = best[j];
      bool take;
      if constexpr (kIsFloat<T>) {
        // Strictly better, or a NaN replacing a number; never replaces a NaN.
        take = (kMax ? !(v <= b) : !(v >= b)) && b == b;
      } else {
        take = kMax ? v > b : v < b;
      }
      best[j] = take ? v : b;
      idx[j] = take ? ri : idx[j];
    }
  }
}

template <bool kMax, class T>
void ArgCols(const T* x, size_t rows, size_t stride, size_t width, int32_t* idx) {
  HWY_ALIGN T best[kStage];
  for (size_t j0 = 0; j0 < width; j0 += kStage) {
    const size_t w = std::min(kStage, width - j0);
    std::copy(x + j0, x + j0 + w, best);
    std::fill(idx + j0, idx + j0 + w, 0);
    ArgColsUpdate<kMax>(x + stride + j0, rows - 1, stride, w, 1, best, idx + j0);
  }
}

template <bool kMax>
void ArgColsHalf(DType dtype, const uint16_t* x, size_t rows, size_t stride, size_t width, int32_t* idx) {
  HWY_ALIGN float stage[kStage];
  HWY_ALIGN float best[kStage];
  for (size_t j0 = 0; j0 < width; j0 += kStage) {
    const size_t w = std::min(kStage, width - j0);
    const size_t g = kStage / w;
    for (size_t r = 0; r < rows; r += g) {
      const size_t m = std::min(g, rows - r);
      StageRows(dtype, x + r * stride + j0, stride, w, m, stage);
      if (r == 0) {
        std::copy(stage, stage + w, best);
        std::fill(idx + j0, idx + j0 + w, 0);
        ArgColsUpdate<kMax>(stage + w, m - 1, w, w, 1, best, idx + j0);
      } else {
        ArgColsUpdate<kMax>(stage, m, w, w, r, best, idx + j0);
      }
    }
  }
}

// Calls f(T{}, bool_constant<is_max>) with T the storage type (bool as uint8_t).
template <class F>
void VisitArg(bool is_max, DType dtype, F&& f) {
  visit_dtype(dtype, [&](auto t) HWY_ATTR {
    using T = std::conditional_t<std::is_same_v<decltype(t), bool>, uint8_t, decltype(t)>;
    if (is_max) f(T{}, std::true_type());
    else f(T{}, std::false_type());
  });
}

void ArgReduceRows(bool is_max, DType dtype, const void* x, size_t rows, size_t len, int32_t* idx) {
  VisitArg(is_max, dtype, [&](auto t, auto m) HWY_ATTR {
    using T = decltype(t);
    constexpr bool kMax = decltype(m)::value;
    if constexpr (kIsFloat<T>) ArgRowsFloat<kMax>(static_cast<const T*>(x), rows, len, idx);
    else if constexpr (kIsHalf<T>) {
      HalfRows(dtype, static_cast<const T*>(x), rows, len,
               [&](const auto* p, size_t m, size_t r) HWY_ATTR { ArgRowsFloat<kMax>(p, m, len, idx + r); });
    } else {
      ArgRowsInt<kMax>(static_cast<const T*>(x), rows, len, idx);
    }
  });
}

void ArgReduceCols(bool is_max, DType dtype, const void* x, size_t rows, size_t stride, size_t width, int32_t* idx) {
  VisitArg(is_max, dtype, [&](auto t, auto m) HWY_ATTR {
    using T = decltype(t);
    constexpr bool kMax = decltype(m)::value;
    if constexpr (kIsHalf<T>) ArgColsHalf<kMax>(dtype, static_cast<const uint16_t*>(x), rows, stride, width, idx);
    else ArgCols<kMax>(static_cast<const T*>(x), rows, stride, width, idx);
  });
}

// ---------------------------------------------------------------------------
// Cumulative sums. A is the accumulation type (unsigned for integers).

template <class T, class A>
HWY_INLINE A ScanRow(const T* x, T* y, size_t n, bool reverse, A acc) {
  if (reverse) {
    for (size_t i = n; i-- > 0;) {
      acc = A(acc + A(x[i]));
      y[i] = T(acc);
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      acc = A(acc + A(x[i]));
      y[i] = T(acc);
    }
  }
  return acc;
}

template <class T, class A>
HWY_INLINE void Scan4Step(const T* x, T* y, size_t len, size_t i, A& a0, A& a1, A& a2, A& a3) {
  a0 = A(a0 + A(x[i]));
  a1 = A(a1 + A(x[len + i]));
  a2 = A(a2 + A(x[2 * len + i]));
  a3 = A(a3 + A(x[3 * len + i]));
  y[i] = T(a0);
  y[len + i] = T(a1);
  y[2 * len + i] = T(a2);
  y[3 * len + i] = T(a3);
}

// Four rows at a time: four independent dependency chains instead of one.
template <class T, class A>
void ScanRows(const T* x, T* y, size_t rows, size_t len, bool reverse, const A* init) {
  size_t r = 0;
  for (; r + 4 <= rows; r += 4) {
    A a0 = init ? init[r] : A(0), a1 = init ? init[r + 1] : A(0);
    A a2 = init ? init[r + 2] : A(0), a3 = init ? init[r + 3] : A(0);
    const T* xr = x + r * len;
    T* yr = y + r * len;
    if (reverse) {
      for (size_t i = len; i-- > 0;) Scan4Step(xr, yr, len, i, a0, a1, a2, a3);
    } else {
      for (size_t i = 0; i < len; ++i) Scan4Step(xr, yr, len, i, a0, a1, a2, a3);
    }
  }
  for (; r < rows; ++r) ScanRow(x + r * len, y + r * len, len, reverse, init ? init[r] : A(0));
}

void ScanRowsHalf(DType dtype, const uint16_t* x, uint16_t* y, size_t rows, size_t len, bool reverse,
                  const float* init) {
  HWY_ALIGN float stage[kStage];
  if (len <= kStage) {
    ForStagedRows(dtype, x, rows, len, stage, [&](float* s, size_t m, size_t r) HWY_ATTR {
      ScanRows(s, s, m, len, reverse, init ? init + r : nullptr);
      convert(DType::f32, s, dtype, y + r * len, m * len);
    });
    return;
  }
  for (size_t r = 0; r < rows; ++r) {
    float acc = init ? init[r] : 0.0f;
    const size_t blocks = (len + kStage - 1) / kStage;
    for (size_t k = 0; k < blocks; ++k) {
      const size_t b = reverse ? blocks - 1 - k : k;
      const size_t i = b * kStage;
      const size_t m = std::min(kStage, len - i);
      convert(dtype, x + r * len + i, DType::f32, stage, m);
      acc = ScanRow(stage, stage, m, reverse, acc);
      convert(DType::f32, stage, dtype, y + r * len + i, m);
    }
  }
}

// Rows visited in scan order; acc[w] holds the running sums.
template <class T, class A>
void ScanCols(const T* x, T* y, size_t rows, size_t stride, size_t w, bool reverse, A* HWY_RESTRICT acc) {
  for (size_t k = 0; k < rows; ++k) {
    const size_t r = reverse ? rows - 1 - k : k;
    const T* xr = x + r * stride;  // may equal yr (in-place staging)
    T* yr = y + r * stride;
    for (size_t j = 0; j < w; ++j) {
      acc[j] = A(acc[j] + A(xr[j]));
      yr[j] = T(acc[j]);
    }
  }
}

template <class T, class A>
void ScanColsChunked(const T* x, T* y, size_t rows, size_t stride, size_t width, bool reverse, const A* init) {
  HWY_ALIGN A acc[kStage];
  for (size_t j0 = 0; j0 < width; j0 += kStage) {
    const size_t w = std::min(kStage, width - j0);
    if (init) std::copy(init + j0, init + j0 + w, acc);
    else std::fill(acc, acc + w, A(0));
    ScanCols(x + j0, y + j0, rows, stride, w, reverse, acc);
  }
}

void ScanColsHalf(DType dtype, const uint16_t* x, uint16_t* y, size_t rows, size_t stride, size_t width, bool reverse,
                  const float* init) {
  HWY_ALIGN float stage[kStage];
  HWY_ALIGN float acc[kStage];
  for (size_t j0 = 0; j0 < width; j0 += kStage) {
    const size_t w = std::min(kStage, width - j0);
    const size_t g = kStage / w;
    if (init) std::copy(init + j0, init + j0 + w, acc);
    else std::fill(acc, acc + w, 0.0f);
    const size_t groups = (rows + g - 1) / g;
    for (size_t k = 0; k < groups; ++k) {
      const size_t r = (reverse ? groups - 1 - k : k) * g;
      const size_t m = std::min(g, rows - r);
      StageRows(dtype, x + r * stride + j0, stride, w, m, stage);
      ScanCols(stage, stage, m, w, w, reverse, acc);
      UnstageRows(dtype, stage, w, m, y + r * stride + j0, stride);
    }
  }
}

// Calls f(T{}, A{}) for a numeric dtype: storage type T, accumulation type A.
template <class F>
void VisitScan(DType dtype, F&& f) {
  PAX_CHECK(dtype != DType::bool_, "cumsum kernel: not defined for bool");
  visit_dtype(dtype, [&](auto t) HWY_ATTR {
    using T = decltype(t);
    if constexpr (kIsHalf<T>) f(t, float{});
    else if constexpr (kIsFloat<T>) f(t, T{});
    else if constexpr (!std::is_same_v<T, bool>) f(t, std::make_unsigned_t<T>{});
  });
}

void CumsumRows(DType dtype, const void* x, void* y, size_t rows, size_t len, bool reverse, const void* init) {
  VisitScan(dtype, [&](auto t, auto a) HWY_ATTR {
    using T = decltype(t);
    using A = decltype(a);
    if constexpr (kIsHalf<T>) {
      ScanRowsHalf(dtype, static_cast<const uint16_t*>(x), static_cast<uint16_t*>(y), rows, len, reverse,
                   static_cast<const float*>(init));
    } else {
      ScanRows(static_cast<const T*>(x), static_cast<T*>(y), rows, len, reverse, static_cast<const A*>(init));
    }
  });
}

void CumsumCols(DType dtype, const void* x, void* y, size_t rows, size_t stride, size_t width, bool reverse,
                const void* init) {
  VisitScan(dtype, [&](auto t, auto a) HWY_ATTR {
    using T = decltype(t);
    using A = decltype(a);
    if constexpr (kIsHalf<T>) {
      ScanColsHalf(dtype, static_cast<const uint16_t*>(x), static_cast<uint16_t*>(y), rows, stride, width, reverse,
                   static_cast<const float*>(init));
    } else {
      ScanColsChunked(static_cast<const T*>(x), static_cast<T*>(y), rows, stride, width, reverse,
                      static_cast<const A*>(init));
    }
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace pax::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace pax::cpu {

HWY_EXPORT(ReduceRows);
HWY_EXPORT(ReduceCols);
HWY_EXPORT(ArgReduceRows);
HWY_EXPORT(ArgReduceCols);
HWY_EXPORT(CumsumRows);
HWY_EXPORT(CumsumCols);

void reduce_rows(ReduceOp op, DType dtype, const void* x, size_t rows, size_t len, void* acc) {
  HWY_DYNAMIC_DISPATCH(ReduceRows)(op, dtype, x, rows, len, acc);
}
void reduce_cols(ReduceOp op, DType dtype, const void* x, size_t rows, size_t stride, size_t width, void* acc) {
  HWY_DYNAMIC_DISPATCH(ReduceCols)(op, dtype, x, rows, stride, width, acc);
}
void argreduce_rows(bool is_max, DType dtype, const void* x, size_t rows, size_t len, int32_t* idx) {
  HWY_DYNAMIC_DISPATCH(ArgReduceRows)(is_max, dtype, x, rows, len, idx);
}
void argreduce_cols(bool is_max, DType dtype, const void* x, size_t rows, size_t stride, size_t width, int32_t* idx) {
  HWY_DYNAMIC_DISPATCH(ArgReduceCols)(is_max, dtype, x, rows, stride, width, idx);
}
void cumsum_rows(DType dtype, const void* x, void* y, size_t rows, size_t len, bool reverse, const void* init) {
  HWY_DYNAMIC_DISPATCH(CumsumRows)(dtype, x, y, rows, len, reverse, init);
}
void cumsum_cols(DType dtype, const void* x, void* y, size_t rows, size_t stride, size_t width, bool reverse,
                 const void* init) {
  HWY_DYNAMIC_DISPATCH(CumsumCols)(dtype, x, y, rows, stride, width, reverse, init);
}

}  // namespace pax::cpu
#endif  // HWY_ONCE
