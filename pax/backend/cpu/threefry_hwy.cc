// Vectorised Threefry-2x32 (20 rounds, JAX / Random123 schedule), compiled once
// per SIMD target by Highway. Several independent vectors go through the
// rounds together: each round is a serial add -> rotate -> xor chain, so the
// interleaving is what keeps the vector units busy. Tails run through one
// padded vector step, so every element takes the same code path.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "pax/backend/cpu/threefry_hwy.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep
#include <hwy/highway.h>

#include <algorithm>

#include "pax/backend/cpu/threefry.h"

HWY_BEFORE_NAMESPACE();
namespace pax::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

using D = hn::ScalableTag<uint32_t>;
using V = hn::Vec<D>;

constexpr size_t kUnroll = 4;  // vectors in flight in the main loops
constexpr size_t kMaxLanes = HWY_MAX_BYTES / sizeof(uint32_t);

// One round on K vectors: x0 += x1; x1 = rotl(x1, R) ^ x0.
template <int R, size_t K>
HWY_INLINE void Round(V* x0, V* x1) {
  for (size_t j = 0; j < K; ++j) {
    x0[j] = hn::Add(x0[j], x1[j]);
    x1[j] = hn::Xor(hn::RotateRight<32 - R>(x1[j]), x0[j]);
  }
}

// Four rounds with rotations R; the schedule alternates (13, 15, 26, 6) and
// (17, 29, 16, 24) between key injections.
template <size_t K, int... R>
HWY_INLINE void Rounds(V* x0, V* x1) {
  (Round<R, K>(x0, x1), ...);
}

// Key injection number s: x0 += a, x1 += b + s.
template <size_t K>
HWY_INLINE void Inject(D d, V* x0, V* x1, const V* a, const V* b, uint32_t s) {
  const V vs = hn::Set(d, s);
  for (size_t j = 0; j < K; ++j) {
    x0[j] = hn::Add(x0[j], a[j]);
    x1[j] = hn::Add(x1[j], hn::Add(b[j], vs));
  }
}

// Encrypts K vectors of counters (x0, x1) in place under keys (k0, k1).
template <size_t K>
HWY_INLINE void Encrypt(D d, const V* k0, const V* k1, V* x0, V* x1) {
  V k2[K];
  const V parity = hn::Set(d, 0x1BD11BDAu);
  for (size_t j = 0; j < K; ++j) k2[j] = hn::Xor(hn::Xor(k0[j], k1[j]), parity);
  Inject<K>(d, x0, x1, k0, k1, 0);
  Rounds<K, 13, 15, 26, 6>(x0, x1);
  Inject<K>(d, x0, x1, k1, k2, 1);
  Rounds<K, 17, 29, 16, 24>(x0, x1);
  Inject<K>(d, x0, x1, k2, k0, 2);
  Rounds<K, 13, 15, 26, 6>(x0, x1);
  Inject<K>(d, x0, x1, k0, k1, 3);
  Rounds<K, 17, 29, 16, 24>(x0, x1);
  Inject<K>(d, x0, x1, k1, k2, 4);
  Rounds<K, 13, 15, 26, 6>(x0, x1);
  Inject<K>(d, x0, x1, k2, k0, 5);
}

template <bool kBroadcast>
HWY_INLINE V LoadKey(D d, const uint32_t* k, size_t i) {
  if constexpr (kBroadcast) return hn::Set(d, k[0]);
  else return hn::LoadU(d, k + i);
}

template <bool kB0, bool kB1>
void Threefry2x32Loop(const uint32_t* k0, const uint32_t* k1, const uint32_t* x0, const uint32_t* x1, uint32_t* y0,
                      uint32_t* y1, size_t n) {
  const D d;
  const size_t N = hn::Lanes(d);
  size_t i = 0;
  for (; i + kUnroll * N <= n; i += kUnroll * N) {
    V a[kUnroll], b[kUnroll], v0[kUnroll], v1[kUnroll];
    for (size_t j = 0; j < kUnroll; ++j) {
      const size_t o = i + j * N;
      a[j] = LoadKey<kB0>(d, k0, o);
      b[j] = LoadKey<kB1>(d, k1, o);
      v0[j] = hn::LoadU(d, x0 + o);
      v1[j] = hn::LoadU(d, x1 + o);
    }
    Encrypt<kUnroll>(d, a, b, v0, v1);
    for (size_t j = 0; j < kUnroll; ++j) {
      hn::StoreU(v0[j], d, y0 + i + j * N);
      hn::StoreU(v1[j], d, y1 + i + j * N);
    }
  }
  for (; i + N <= n; i += N) {
    V a = LoadKey<kB0>(d, k0, i), b = LoadKey<kB1>(d, k1, i);
    V v0 = hn::LoadU(d, x0 + i), v1 = hn::LoadU(d, x1 + i);
    Encrypt<1>(d, &a, &b, &v0, &v1);
    hn::StoreU(v0, d, y0 + i);
    hn::StoreU(v1, d, y1 + i);
  }
  if (i < n) {
    const size_t cnt = n - i;
    HWY_ALIGN uint32_t ba[kMaxLanes] = {}, bb[kMaxLanes] = {}, b0[kMaxLanes] = {}, b1[kMaxLanes] = {};
    if (!kB0) std::copy(k0 + i, k0 + n, ba);
    if (!kB1) std::copy(k1 + i, k1 + n, bb);
    std::copy(x0 + i, x0 + n, b0);
    std::copy(x1 + i, x1 + n, b1);
    V a = kB0 ? hn::Set(d, k0[0]) : hn::Load(d, ba);
    V b = kB1 ? hn::Set(d, k1[0]) : hn::Load(d, bb);
    V v0 = hn::Load(d, b0), v1 = hn::Load(d, b1);
    Encrypt<1>(d, &a, &b, &v0, &v1);
    hn::Store(v0, d, b0);
    hn::Store(v1, d, b1);
    std::copy(b0, b0 + cnt, y0 + i);
    std::copy(b1, b1 + cnt, y1 + i);
  }
}

void Threefry2x32(const uint32_t* k0, bool k0_broadcast, const uint32_t* k1, bool k1_broadcast, const uint32_t* x0,
                  const uint32_t* x1, uint32_t* y0, uint32_t* y1, size_t n) {
  if (k0_broadcast && k1_broadcast) Threefry2x32Loop<true, true>(k0, k1, x0, x1, y0, y1, n);
  else if (k0_broadcast) Threefry2x32Loop<true, false>(k0, k1, x0, x1, y0, y1, n);
  else if (k1_broadcast) Threefry2x32Loop<false, true>(k0, k1, x0, x1, y0, y1, n);
  else Threefry2x32Loop<false, false>(k0, k1, x0, x1, y0, y1, n);
}

void ThreefryRandomBits(uint32_t k0, uint32_t k1, uint64_t n, uint64_t begin, uint64_t end, uint32_t* out) {
  const D d;
  const size_t N = hn::Lanes(d);
  const uint64_t m = (n + 1) / 2;
  const uint64_t pairs = n / 2;  // blocks whose y1 is kept (all but the padding block)
  const V a = hn::Set(d, k0), b = hn::Set(d, k1);
  const V vm = hn::Set(d, uint32_t(m));
  // Counters fit in u32 because n < 2^32 - 1.
  uint64_t i = begin;
  const uint64_t full_end = std::min(end, pairs);
  for (; i + kUnroll * N <= full_end; i += kUnroll * N) {
    V ka[kUnroll], kb[kUnroll], v0[kUnroll], v1[kUnroll];
    for (size_t j = 0; j < kUnroll; ++j) {
      ka[j] = a;
      kb[j] = b;
      v0[j] = hn::Iota(d, uint32_t(i + j * N));
      v1[j] = hn::Add(v0[j], vm);
    }
    Encrypt<kUnroll>(d, ka, kb, v0, v1);
    for (size_t j = 0; j < kUnroll; ++j) {
      hn::StoreU(v0[j], d, out + i + j * N);
      hn::StoreU(v1[j], d, out + m + i + j * N);
    }
  }
  for (; i + N <= full_end; i += N) {
    V v0 = hn::Iota(d, uint32_t(i));
    V v1 = hn::Add(v0, vm);
    Encrypt<1>(d, &a, &b, &v0, &v1);
    hn::StoreU(v0, d, out + i);
    hn::StoreU(v1, d, out + m + i);
  }
  while (i < end) {
    const uint64_t cnt = std::min<uint64_t>(N, end - i);
    HWY_ALIGN uint32_t b0[kMaxLanes] = {}, b1[kMaxLanes] = {};
    for (uint64_t j = 0; j < cnt; ++j) {
      b0[j] = uint32_t(i + j);
      b1[j] = i + j < pairs ? uint32_t(m + i + j) : 0u;
    }
    V v0 = hn::Load(d, b0), v1 = hn::Load(d, b1);
    Encrypt<1>(d, &a, &b, &v0, &v1);
    hn::Store(v0, d, b0);
    hn::Store(v1, d, b1);
    for (uint64_t j = 0; j < cnt; ++j) {
      out[i + j] = b0[j];
      if (i + j < pairs) out[m + i + j] = b1[j];
    }
    i += cnt;
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace pax::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace pax::cpu {

HWY_EXPORT(Threefry2x32);
HWY_EXPORT(ThreefryRandomBits);

void threefry2x32(const uint32_t* k0, bool k0_broadcast, const uint32_t* k1, bool k1_broadcast, const uint32_t* x0,
                  const uint32_t* x1, uint32_t* y0, uint32_t* y1, size_t n) {
  HWY_DYNAMIC_DISPATCH(Threefry2x32)(k0, k0_broadcast, k1, k1_broadcast, x0, x1, y0, y1, n);
}

void threefry_random_bits(uint32_t k0, uint32_t k1, uint64_t n, uint64_t begin, uint64_t end, uint32_t* out) {
  HWY_DYNAMIC_DISPATCH(ThreefryRandomBits)(k0, k1, n, begin, end, out);
}

}  // namespace pax::cpu
#endif  // HWY_ONCE
