// The inner loops of the CPU attention kernels (see attention_hwy.h),
// compiled once per SIMD target by Highway and chosen at run time.
// - gemm: tiles of kRows rows of C by kVecs vectors of columns held in
//   registers, each accumulating over the whole depth: per step, one vector
//   load of B per column vector and one broadcast of A per row. The last
//   column vector of a ragged tile is read and written only in its lanes
//   (LoadFirst, StoreFirst); a short last row tile has a kernel of its own
//   height (one per height and width), so that no row is computed twice.
// - Row operations: whole vectors through Highway (mask bytes widened to
//   lanes), the last partial vector only in its lanes (exp) or by a scalar
//   loop (where it reads strided or byte operands, or a caller's rows).
// - transpose: a vector of rows at a time, one gather per column.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "pax/backend/cpu/attention_hwy.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>
#include <hwy/contrib/math/math-inl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "pax/backend/cpu/attention.h"
#include "pax/backend/cpu/attention_hwy.h"

HWY_BEFORE_NAMESPACE();
namespace pax::cpu::attention_detail {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<float>;
using V = hn::Vec<D>;

// Tile shape: AVX-512's 32 registers hold 6 x 4 accumulators with the 4 B
// vectors and a broadcast; 16 registers (AVX2) hold 4 x 2.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
constexpr size_t kRows = 6, kVecs = 4;
#else
constexpr size_t kRows = 4, kVecs = 2;
#endif

// The softmax's exp is 0 below this argument: e^-86.5 is 2.7e-38, a normal
// f32 (2^-125 and up), so the result's exponent can be set directly. What is
// flushed weighs less than 2^-100 of a row's largest term, which is 1.
constexpr float kExpArgMin = -86.5f;
// Above this argument (never reached: the arguments are logits minus their
// maximum or their log-sum-exp) the exponent would overflow.
constexpr float kExpArgMax = 80.0f;

// A vector's first `count` lanes: loaded (the others 0) or stored without
// touching the memory past them. x86 from AVX2 up loads and stores under a
// mask that way. Elsewhere (NEON; on x86 the portable fallback, SSE4 and
// SSSE3 not being compiled here) Highway's MaskedLoad may read the whole
// vector, past the end of an allocation maybe, and its BlendedStore writes
// the whole vector back (non-atomically: it would race with the thread that
// owns the next elements, another head's row), so the lanes pass through a
// buffer on the stack there.
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX2
HWY_INLINE V LoadFirst(D d, hn::Mask<D> first, size_t /*count*/, const float* HWY_RESTRICT p) {
  return hn::MaskedLoad(first, d, p);
}
HWY_INLINE void StoreFirst(V v, D d, hn::Mask<D> first, size_t /*count*/, float* HWY_RESTRICT p) {
  hn::BlendedStore(v, first, d, p);
}
#else
constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(float);
HWY_INLINE V LoadFirst(D d, hn::Mask<D> /*first*/, size_t count, const float* HWY_RESTRICT p) {
  HWY_ALIGN float lanes[kMaxLanes] = {};
  std::memcpy(lanes, p, count * sizeof(float));
  return hn::Load(d, lanes);
}
HWY_INLINE void StoreFirst(V v, D d, hn::Mask<D> /*first*/, size_t count, float* HWY_RESTRICT p) {
  HWY_ALIGN float lanes[kMaxLanes];
  hn::Store(v, d, lanes);
  std::memcpy(p, lanes, count * sizeof(float));
}
#endif

// One tile of C: kR (<= kRows) rows by kNV vectors of columns, the last of
// them holding `tail` columns when kTail.
template <size_t kR, size_t kNV, bool kTail>
HWY_NOINLINE void Tile(size_t tail, int64_t k, float alpha, const float* HWY_RESTRICT a, int64_t a_row, int64_t a_col,
                       const float* HWY_RESTRICT b, int64_t ldb, float* HWY_RESTRICT c, int64_t ldc, bool accumulate) {
  const D d;
  const size_t lanes = hn::Lanes(d);
  const float* ar[kR];
  for (size_t r = 0; r < kR; ++r) ar[r] = a + int64_t(r) * a_row;
  V acc[kR][kNV];
  for (size_t r = 0; r < kR; ++r)
    for (size_t j = 0; j < kNV; ++j) acc[r][j] = hn::Zero(d);
  const auto last = hn::FirstN(d, kTail ? tail : lanes);
  for (int64_t p = 0; p < k; ++p) {
    V bv[kNV];
    for (size_t j = 0; j < kNV; ++j)
      bv[j] = (kTail && j + 1 == kNV) ? LoadFirst(d, last, tail, b + j * lanes) : hn::LoadU(d, b + j * lanes);
    for (size_t r = 0; r < kR; ++r) {
      const V av = hn::Set(d, *ar[r]);
      ar[r] += a_col;
      for (size_t j = 0; j < kNV; ++j) acc[r][j] = hn::MulAdd(av, bv[j], acc[r][j]);
    }
    b += ldb;
  }
  const V valpha = hn::Set(d, alpha);
  for (size_t r = 0; r < kR; ++r) {
    for (size_t j = 0; j < kNV; ++j) {
      float* cp = c + int64_t(r) * ldc + int64_t(j * lanes);
      V v = hn::Mul(acc[r][j], valpha);
      if (kTail && j + 1 == kNV) {
        if (accumulate) v = hn::Add(v, LoadFirst(d, last, tail, cp));
        StoreFirst(v, d, last, tail, cp);
      } else {
        if (accumulate) v = hn::Add(v, hn::LoadU(d, cp));
        hn::StoreU(v, d, cp);
      }
    }
  }
}

using TileFn = void (*)(size_t, int64_t, float, const float*, int64_t, int64_t, const float*, int64_t, float*, int64_t,
                        bool);

// The tile of `rows` rows (1 to kR) by `vecs` vectors (1 to kNV).
template <size_t kR, size_t kNV>
TileFn PickTile(size_t rows, size_t vecs, bool tail) {
  if constexpr (kR == 0 || kNV == 0) {
    return nullptr;
  } else if (rows < kR) {
    return PickTile<kR - 1, kNV>(rows, vecs, tail);
  } else if (vecs < kNV) {
    return PickTile<kR, kNV - 1>(rows, vecs, tail);
  } else {
    return tail ? &Tile<kR, kNV, true> : &Tile<kR, kNV, false>;
  }
}

// Column panels outermost, so that a panel of B (k x kVecs vectors) stays in
// cache while every row tile of A passes over it.
void Gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_row, int64_t a_col, const float* b,
          int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  const D d;
  const int64_t lanes = int64_t(hn::Lanes(d)), panel = int64_t(kVecs) * lanes;
  for (int64_t j0 = 0; j0 < n; j0 += panel) {
    const int64_t width = std::min(panel, n - j0);
    const size_t vecs = size_t((width + lanes - 1) / lanes);
    const size_t tail = size_t(width - int64_t(vecs - 1) * lanes);
    const TileFn full = PickTile<kRows, kVecs>(kRows, vecs, tail != size_t(lanes));
    for (int64_t i0 = 0; i0 < m; i0 += int64_t(kRows)) {
      const size_t rows = size_t(std::min<int64_t>(int64_t(kRows), m - i0));
      const TileFn tile = rows == kRows ? full : PickTile<kRows, kVecs>(rows, vecs, tail != size_t(lanes));
      tile(tail, k, alpha, a + i0 * a_row, a_row, a_col, b + j0, ldb, c + i0 * ldc + j0, ldc, accumulate);
    }
  }
}

// Whether mask byte s is set, for whole vectors: the bytes widened to lanes.
HWY_INLINE hn::Mask<D> MaskSet(const uint8_t* HWY_RESTRICT mask) {
  const D d;
  const hn::Rebind<uint8_t, D> d8;
  const hn::Rebind<int32_t, D> di;
  const auto wide = hn::PromoteTo(di, hn::LoadU(d8, mask));
  return hn::RebindMask(d, hn::Ne(wide, hn::Zero(di)));
}

float LogitsRow(float* HWY_RESTRICT x, int64_t n, int64_t valid, float scale, float cap, float* HWY_RESTRICT slope,
                const float* HWY_RESTRICT bias, int64_t bias_stride, const uint8_t* HWY_RESTRICT mask,
                int64_t mask_stride) {
  const D d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  // A mask broadcast along the row masks all of it or none of it.
  if (mask != nullptr && mask_stride == 0) {
    if (mask[0] == 0) valid = 0;
    mask = nullptr;
  }
  const V vscale = hn::Set(d, scale), vmasked = hn::Set(d, kMaskedLogit);
  const V vcap = hn::Set(d, cap), vinv_cap = hn::Set(d, cap > 0.0f ? 1.0f / cap : 0.0f), one = hn::Set(d, 1.0f);
  V vmax = hn::Set(d, -std::numeric_limits<float>::infinity());
  int64_t s = 0;
  if ((bias == nullptr || bias_stride <= 1) && (mask == nullptr || mask_stride == 1)) {
    const V bias0 = bias != nullptr && bias_stride == 0 ? hn::Set(d, bias[0]) : hn::Zero(d);
    for (; s + lanes <= valid; s += lanes) {
      V v = hn::Mul(hn::LoadU(d, x + s), vscale);
      if (cap > 0.0f) {
        const V t = hn::Tanh(d, hn::Mul(v, vinv_cap));
        v = hn::Mul(vcap, t);
        if (slope != nullptr) hn::StoreU(hn::NegMulAdd(t, t, one), d, slope + s);
      }
      if (bias != nullptr) v = hn::Add(v, bias_stride == 1 ? hn::LoadU(d, bias + s) : bias0);
      if (mask != nullptr) v = hn::IfThenElse(MaskSet(mask + s), v, vmasked);
      hn::StoreU(v, d, x + s);
      vmax = hn::Max(vmax, v);
    }
  }
  float max = hn::GetLane(hn::MaxOfLanes(d, vmax));
  for (; s < valid; ++s) {
    float v = scale * x[s];
    if (cap > 0.0f) {
      const float t = std::tanh(v / cap);
      v = cap * t;
      if (slope != nullptr) slope[s] = 1.0f - t * t;
    }
    if (bias != nullptr) v = v + bias[s * bias_stride];
    if (mask != nullptr && mask[s * mask_stride] == 0) v = kMaskedLogit;
    x[s] = v;
    max = std::max(max, v);
  }
  for (s = std::max<int64_t>(valid, 0); s < n; ++s) x[s] = kMaskedLogit;
  if (valid < n) max = std::max(max, kMaskedLogit);
  return max;
}

// exp(arg) for arguments in [kExpArgMin, kExpArgMax], 0 below, NaN kept.
// Highway's Exp (its range reduction and polynomial, so the same accuracy)
// with one power of two instead of two and the rounding done by a shifter
// whose bits carry n: about two thirds of its instructions. AVX-512 scales
// by 2^n in one instruction (VSCALEFPS), which also carries NaN through and
// whose zero mask gives the lanes below kExpArgMin their 0: there the
// argument needs only its upper clamp (what the reduction makes of a lane
// that is masked off does not matter).
HWY_INLINE V ExpOrZero(D d, V arg) {
  const V lo = hn::Set(d, kExpArgMin), hi = hn::Set(d, kExpArgMax);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  // MINPS returns its second operand where either is NaN: NaN passes.
  const V x{_mm512_min_ps(hi.raw, arg.raw)};
#else
  const V x = hn::Min(hn::Max(lo, arg), hi);
#endif
  // t = 1.5 * 2^23 + round(x / ln 2): n sits in t's low mantissa bits.
  const V shifter = hn::Set(d, 12582912.0f);
  const V t = hn::MulAdd(x, hn::Set(d, 1.44269504088896341f), shifter);
  const V n = hn::Sub(t, shifter);
  // r = x - n ln 2 in two parts (Highway's constants), |r| <= ln 2 / 2.
  V r = hn::MulAdd(n, hn::Set(d, -0.693145751953125f), x);
  r = hn::MulAdd(n, hn::Set(d, -1.428606765330187045e-6f), r);
  // e^r = 1 + r + r^2 P(r), Highway's minimax P of degree 5.
  const V r2 = hn::Mul(r, r);
  const V p01 = hn::MulAdd(hn::Set(d, 0.166666671633720397949219f), r, hn::Set(d, 0.5f));
  const V p23 = hn::MulAdd(hn::Set(d, 0.00833336077630519866943359f), r, hn::Set(d, 0.0416664853692054748535156f));
  const V p45 = hn::MulAdd(hn::Set(d, 0.000198527617612853646278381f), r, hn::Set(d, 0.00139304355252534151077271f));
  const V poly = hn::MulAdd(hn::MulAdd(p45, r2, p23), r2, p01);
  const V e_r = hn::Add(hn::MulAdd(poly, r2, r), hn::Set(d, 1.0f));
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  // e_r * 2^n in one instruction where arg >= kExpArgMin or is NaN (the
  // unordered compare), 0 elsewhere.
  const __mmask16 keep = _mm512_cmp_ps_mask(arg.raw, lo.raw, _CMP_NLT_UQ);
  return V{_mm512_maskz_scalef_ps(keep, e_r.raw, n.raw)};
#else
  // e_r * 2^n: n added to e_r's exponent field (t's bits shifted by 23 are
  // n << 23; the result stays normal for n >= -125).
  const hn::RebindToSigned<D> di;
  const V y = hn::BitCast(d, hn::Add(hn::BitCast(di, e_r), hn::ShiftLeft<23>(hn::BitCast(di, t))));
  return hn::IfThenElse(hn::Eq(arg, arg), hn::IfThenZeroElse(hn::Lt(arg, lo), y), arg);
#endif
}

float ExpRow(float* HWY_RESTRICT x, int64_t n, float shift) {
  const D d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  const V vshift = hn::Set(d, shift);
  V sum = hn::Zero(d);
  int64_t s = 0;
  for (; s + lanes <= n; s += lanes) {
    const V y = ExpOrZero(d, hn::Sub(hn::LoadU(d, x + s), vshift));
    hn::StoreU(y, d, x + s);
    sum = hn::Add(sum, y);
  }
  if (s < n) {
    const size_t count = size_t(n - s);
    const auto last = hn::FirstN(d, count);
    const V y = hn::IfThenElseZero(last, ExpOrZero(d, hn::Sub(LoadFirst(d, last, count, x + s), vshift)));
    StoreFirst(y, d, last, count, x + s);
    sum = hn::Add(sum, y);
  }
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

void Transpose(const float* HWY_RESTRICT x, int64_t x_row, int64_t rows, int64_t cols, float* HWY_RESTRICT dst,
               int64_t ldd) {
  const D d;
  const hn::RebindToSigned<D> di;
  const int64_t lanes = int64_t(hn::Lanes(d));
  // Lane i gathers from row s0 + i (32-bit offsets: rows further apart go
  // one element at a time).
  const bool gather = x_row <= int64_t(std::numeric_limits<int32_t>::max()) / lanes;
  const auto offsets = hn::Mul(hn::Iota(di, 0), hn::Set(di, hn::TFromD<decltype(di)>(gather ? x_row : 0)));
  int64_t s0 = 0;
  for (; gather && s0 + lanes <= rows; s0 += lanes) {
    const float* src = x + s0 * x_row;
    for (int64_t j = 0; j < cols; ++j) hn::StoreU(hn::GatherIndex(d, src + j, offsets), d, dst + j * ldd + s0);
  }
  for (; s0 < rows; ++s0)
    for (int64_t j = 0; j < cols; ++j) dst[j * ldd + s0] = x[s0 * x_row + j];
}

float Dot(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b, int64_t n) {
  const D d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  V sum0 = hn::Zero(d), sum1 = hn::Zero(d);
  int64_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    sum0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), sum0);
    sum1 = hn::MulAdd(hn::LoadU(d, a + i + lanes), hn::LoadU(d, b + i + lanes), sum1);
  }
  if (i + lanes <= n) {
    sum0 = hn::MulAdd(hn::LoadU(d, a + i), hn::LoadU(d, b + i), sum0);
    i += lanes;
  }
  float sum = hn::GetLane(hn::SumOfLanes(d, hn::Add(sum0, sum1)));
  for (; i < n; ++i) sum += a[i] * b[i];  // scalar: the rows are the callers' tensors, read no further
  return sum;
}

void DlogitsRow(float* HWY_RESTRICT ds, const float* HWY_RESTRICT p, int64_t n, int64_t valid, float delta,
                const uint8_t* HWY_RESTRICT mask, int64_t mask_stride) {
  const D d;
  const int64_t lanes = int64_t(hn::Lanes(d));
  if (mask != nullptr && mask_stride == 0) {
    if (mask[0] == 0) valid = 0;
    mask = nullptr;
  }
  valid = std::max<int64_t>(valid, 0);
  const V vdelta = hn::Set(d, delta);
  int64_t s = 0;
  if (mask == nullptr || mask_stride == 1) {
    for (; s + lanes <= valid; s += lanes) {
      V v = hn::Mul(hn::LoadU(d, p + s), hn::Sub(hn::LoadU(d, ds + s), vdelta));
      if (mask != nullptr) v = hn::IfThenElseZero(MaskSet(mask + s), v);
      hn::StoreU(v, d, ds + s);
    }
  }
  for (; s < valid; ++s) ds[s] = mask != nullptr && mask[s * mask_stride] == 0 ? 0.0f : p[s] * (ds[s] - delta);
  for (s = valid; s < n; ++s) ds[s] = 0.0f;
}

}  // namespace HWY_NAMESPACE
}  // namespace pax::cpu::attention_detail
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace pax::cpu::attention_detail {

HWY_EXPORT(Gemm);
HWY_EXPORT(LogitsRow);
HWY_EXPORT(ExpRow);
HWY_EXPORT(DlogitsRow);
HWY_EXPORT(Dot);
HWY_EXPORT(Transpose);

void gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_row, int64_t a_col, const float* b,
          int64_t ldb, float* c, int64_t ldc, bool accumulate) {
  HWY_DYNAMIC_DISPATCH(Gemm)(m, n, k, alpha, a, a_row, a_col, b, ldb, c, ldc, accumulate);
}

float logits_row(float* x, int64_t n, int64_t valid, float scale, float cap, float* slope, const float* bias,
                 int64_t bias_stride, const uint8_t* mask, int64_t mask_stride) {
  return HWY_DYNAMIC_DISPATCH(LogitsRow)(x, n, valid, scale, cap, slope, bias, bias_stride, mask, mask_stride);
}

float exp_row(float* x, int64_t n, float shift) { return HWY_DYNAMIC_DISPATCH(ExpRow)(x, n, shift); }

float dot(const float* a, const float* b, int64_t n) { return HWY_DYNAMIC_DISPATCH(Dot)(a, b, n); }

void transpose(const float* x, int64_t x_row, int64_t rows, int64_t cols, float* dst, int64_t ldd) {
  HWY_DYNAMIC_DISPATCH(Transpose)(x, x_row, rows, cols, dst, ldd);
}

void dlogits_row(float* ds, const float* p, int64_t n, int64_t valid, float delta, const uint8_t* mask,
                 int64_t mask_stride) {
  HWY_DYNAMIC_DISPATCH(DlogitsRow)(ds, p, n, valid, delta, mask, mask_stride);
}

}  // namespace pax::cpu::attention_detail
#endif  // HWY_ONCE
