// Batching rules of the random primitives. threefry2x32 is elementwise over
// its operands (keys may be scalars per example). random_bits with a batched
// key is rebuilt from threefry2x32 over the whole batch: the construction of
// the random_bits kernel (the CPU backend's threefry.h) with one key per row,
// so every example gets exactly the bits of random_bits(key_i, shape).
#include "pax/interp/interpreter.h"
#include "pax/interp/vmap.h"
#include "pax/ops/lax.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

// threefry2x32(k0, k1, x0, x1): everything on axis 0; a key that is a scalar
// per example stays one when it is shared, and takes the counters' shape when
// it is batched.
Batched threefry2x32_batch(std::span<const Array> values, std::span<const int64_t> bdims, const Params& p,
                           const BatchInfo& info) {
  const std::vector<AVal>& avals = info.in_avals;
  Ints shape = avals[2].shape.dims();
  shape.insert(shape.begin(), info.axis_size);
  std::vector<Array> args;
  for (size_t i = 0; i < values.size(); ++i) {
    const bool scalar_key = avals[i].shape.rank() < avals[2].shape.rank();
    if (scalar_key && bdims[i] < 0) {
      args.push_back(values[i]);
    } else if (scalar_key) {
      args.push_back(lax::broadcast_in_dim(values[i], shape, {0}));
    } else {
      args.push_back(move_batch_axis(values[i], bdims[i], 0, info.axis_size));
    }
  }
  return {bind(Prim::threefry2x32, args, p), {0, 0}};
}

// random_bits(key u32[2]) for a batch of keys u32[B, 2]. For n outputs and
// m = ceil(n / 2) blocks, block i encrypts the counters (i, m + i) — (i, 0)
// for the padding block of an odd n — and yields out[i] and out[m + i]:
// counters = pad(iota(n), 0) split in two halves, as in jax.random.
Batched random_bits_batch(std::span<const Array> values, std::span<const int64_t> bdims, const Params& p,
                          const BatchInfo& info) {
  const int64_t b = info.axis_size;
  const Ints& shape = p.ints("shape");
  const int64_t n = Shape(shape).numel();
  const int64_t m = (n + 1) / 2;
  Array counts = lax::pad(lax::iota(DType::u32, {n}, 0), scalar(uint32_t(0)), {{0, 2 * m - n, 0}});
  auto rows = [&](const Array& x, int64_t axis) { return lax::broadcast_in_dim(x, {b, m}, {axis}); };
  Array x0 = rows(lax::slice(counts, {0}, {m}), 1);
  Array x1 = rows(lax::slice(counts, {m}, {2 * m}), 1);
  Array keys = move_batch_axis(values[0], bdims[0], 0, b);  // u32[B, 2]
  Array k0 = rows(lax::reshape(lax::slice(keys, {0, 0}, {b, 1}), {b}), 0);
  Array k1 = rows(lax::reshape(lax::slice(keys, {0, 1}, {b, 2}), {b}), 0);
  auto [y0, y1] = lax::threefry2x32(k0, k1, x0, x1);
  Array bits = lax::slice(lax::concatenate({y0, y1}, 1), {0, 0}, {b, n});
  Ints out_shape = shape;
  out_shape.insert(out_shape.begin(), b);
  return {{lax::reshape(bits, out_shape)}, {0}};
}

}  // namespace

void register_random_batching(PrimTable& t) {
  t[size_t(Prim::threefry2x32)].batch = threefry2x32_batch;
  t[size_t(Prim::random_bits)].batch = random_bits_batch;
}

}  // namespace pax
