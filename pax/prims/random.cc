// Random-number primitives: threefry2x32 (the Threefry-2x32 block cipher, 20
// rounds) and random_bits (u32 bits from a raw key u32[2], identical to
// jax.random's non-partitionable threefry random_bits). Both are counter-based:
// every output depends only on its index, so results are the same for any
// thread count and chunking. Shape/dtype rules; the CPU kernels are the
// backend's (kernels_random.cc).
#include <cstdint>
#include <string>
#include <vector>

#include "pax/core/error.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

// jax.random switches to a split-key construction at 2^32 - 1 counters, which
// random_bits does not implement.
constexpr int64_t kMaxRandomBits = int64_t(0xFFFFFFFFu) - 1;

// ---------------------------------------------------------------------------
// threefry2x32(k0, k1, x0, x1) -> (y0, y1)

std::vector<AVal> threefry2x32_rule(std::span<const AVal> in, const Params&) {
  static const char* const kNames[] = {"k0", "k1", "x0", "x1"};
  for (size_t i = 0; i < 4; ++i) {
    PAX_CHECK(in[i].dtype == DType::u32, "threefry2x32: operand ", kNames[i], " is ", in[i].str(),
              "; all operands must have dtype u32");
  }
  const AVal& x0 = in[2];
  PAX_CHECK(in[3].shape == x0.shape, "threefry2x32: counters x0 ", x0.str(), " and x1 ", in[3].str(),
            " must have the same shape");
  for (size_t i = 0; i < 2; ++i) {
    PAX_CHECK(in[i].shape.rank() == 0 || in[i].shape == x0.shape, "threefry2x32: key ", kNames[i], " ", in[i].str(),
              " must be a scalar (u32[]) or have the counters' shape ", x0.str());
  }
  AVal out{x0.shape, DType::u32, false};
  return {out, out};
}

// ---------------------------------------------------------------------------
// random_bits(key u32[2]) shape, bit_width -> u32[shape]

std::vector<AVal> random_bits_rule(std::span<const AVal> in, const Params& p) {
  const AVal& key = in[0];
  PAX_CHECK(key.dtype == DType::u32 && key.shape == Shape{2}, "random_bits: key ", key.str(),
            " must be a raw threefry key u32[2]");
  const int64_t bit_width = p.i("bit_width");
  PAX_CHECK(bit_width == 32, "random_bits: bit_width ", bit_width, " is not supported; valid value: 32");
  const Ints& dims = p.ints("shape");
  int64_t n = 1;
  for (int64_t d : dims) {
    PAX_CHECK(d >= 0, "random_bits: shape ", ints_str(dims), " has a negative dimension");
  }
  for (int64_t d : dims) {
    if (d == 0) {
      n = 0;
      break;
    }
    PAX_CHECK(n <= kMaxRandomBits / d, "random_bits: shape ", ints_str(dims), " has more than ", kMaxRandomBits,
              " (2^32 - 2) elements, the largest size supported");
    n *= d;
  }
  return {AVal{Shape(dims), DType::u32, false}};
}

}  // namespace

void register_random_prims(PrimTable& t) {
  t[size_t(Prim::threefry2x32)] = PrimDef{threefry2x32_rule};
  t[size_t(Prim::random_bits)] = PrimDef{random_bits_rule};
}

}  // namespace pax
