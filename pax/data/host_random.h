// Host-side randomness for the input pipeline: a SplitMix64 generator and
// permutations drawn from it. Unlike std::shuffle / std::uniform_int_distribution
// (whose results are implementation-defined), these give the same numbers
// with every compiler and standard library, so that a data order depends only
// on the seed and a resumed run on another machine reads the same stream.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace pax::data {

// SplitMix64's output function: a bijective 64-bit mix.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// A key for (a, b): used to derive per-epoch and per-step keys from a seed.
inline uint64_t hash_combine(uint64_t a, uint64_t b) { return mix64(a + 0x9e3779b97f4a7c15ULL * (b + 1)); }

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next() { return mix64(state_ += 0x9e3779b97f4a7c15ULL); }
  // Uniform in [0, n), unbiased (Lemire's multiply-and-reject); n >= 1.
  uint64_t below(uint64_t n) {
    unsigned __int128 m = (unsigned __int128)next() * n;
    uint64_t low = uint64_t(m);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;
      while (low < threshold) {
        m = (unsigned __int128)next() * n;
        low = uint64_t(m);
      }
    }
    return uint64_t(m >> 64);
  }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return double(next() >> 11) * 0x1.0p-53; }

 private:
  uint64_t state_;
};

// A uniformly random permutation of [0, n) (Fisher-Yates) determined by `key`.
inline std::vector<int64_t> random_permutation(int64_t n, uint64_t key) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) p[size_t(i)] = i;
  SplitMix64 gen(key);
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[size_t(i)], p[size_t(gen.below(uint64_t(i) + 1))]);
  return p;
}

}  // namespace pax::data
