// Random-number primitives: threefry2x32 (the Threefry-2x32 block cipher, 20
// rounds) and random_bits (u32 bits from a raw key u32[2], identical to
// jax.random's non-partitionable threefry random_bits). Both are counter-based:
// every output depends only on its index, so results are the same for any
// thread count and chunking.
#include <cstdint>
#include <string>
#include <vector>

#include "pax/core/parallel.h"
#include "pax/backend/cpu/threefry.h"
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
    PAX_CHECK(in[i].shape.rank() == 0 || in[i].shape == x0.shape, "threefry2x32: key ", kNames[i], " ",
              in[i].str(), " must be a scalar (u32[]) or have the counters' shape ", x0.str());
  }
  AVal out{x0.shape, DType::u32, false};
  return {out, out};
}

void threefry2x32_kernel(const Params&, std::span<const TensorView> in, std::span<const TensorView> out) {
  const TensorView &k0 = in[0], &k1 = in[1], &x0 = in[2], &x1 = in[3];
  const int64_t n = x0.numel();
  // A 0-d key with 0-d counters is also "broadcast"; either reading is right.
  const bool b0 = k0.rank() == 0, b1 = k1.rank() == 0;
  parallel_for(n, grain_for(4 * sizeof(uint32_t)), [&](int64_t b, int64_t e) {
    cpu::threefry2x32(k0.as<uint32_t>() + (b0 ? 0 : b), b0, k1.as<uint32_t>() + (b1 ? 0 : b), b1,
                      x0.as<uint32_t>() + b, x1.as<uint32_t>() + b, out[0].as<uint32_t>() + b,
                      out[1].as<uint32_t>() + b, size_t(e - b));
  });
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
    PAX_CHECK(n <= kMaxRandomBits / d, "random_bits: shape ", ints_str(dims), " has more than ",
              kMaxRandomBits, " (2^32 - 2) elements, the largest size supported");
    n *= d;
  }
  return {AVal{Shape(dims), DType::u32, false}};
}

void random_bits_kernel(const Params&, std::span<const TensorView> in, std::span<const TensorView> out) {
  const uint32_t* key = in[0].as<uint32_t>();
  const int64_t n = out[0].numel();
  const int64_t blocks = (n + 1) / 2;
  uint32_t* y = out[0].as<uint32_t>();
  // Each block writes two u32; about 256 KiB of output per chunk.
  parallel_for(blocks, grain_for(2 * sizeof(uint32_t)), [&](int64_t b, int64_t e) {
    cpu::threefry_random_bits(key[0], key[1], uint64_t(n), uint64_t(b), uint64_t(e), y);
  });
}

}  // namespace

void register_random_prims(PrimTable& t) {
  t[size_t(Prim::threefry2x32)] = PrimDef{threefry2x32_rule, threefry2x32_kernel};
  t[size_t(Prim::random_bits)] = PrimDef{random_bits_rule, random_bits_kernel};
}

}  // namespace pax
