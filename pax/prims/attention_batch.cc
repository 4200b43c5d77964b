// Batching rules of dot_product_attention and its backward: the mapped axis
// joins the batch axis (operands [V, B, ...] become [V * B, ...]), so the
// batched program is one attention of a larger batch. A bias or mask that
// broadcasts over the batch stays as it is when nothing maps it, except in
// the backward, whose bias gradient belongs to each mapped example.
#include <vector>

#include "pax/interp/interpreter.h"
#include "pax/interp/vmap.h"
#include "pax/ops/lax.h"
#include "pax/prims/attention_params.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

// x with the mapped axis first, [V, ...rest].
Array mapped_first(const Array& x, int64_t bdim, int64_t v) { return move_batch_axis(x, bdim, 0, v); }

// [V, B, ...] -> [V * B, ...].
Array merge_leading(const Array& x) {
  Ints dims = x.shape().dims();
  dims[1] *= dims[0];
  dims.erase(dims.begin());
  return lax::reshape(x, dims);
}

// [V * B, ...] -> [V, B, ...].
Array split_leading(const Array& x, int64_t v) {
  Ints dims = x.shape().dims();
  dims[0] /= v;
  dims.insert(dims.begin(), v);
  return lax::reshape(x, dims);
}

Batched batch_attention(Prim prim, std::span<const Array> values, std::span<const int64_t> bdims, const Params& p,
                        const BatchInfo& info) {
  const AttentionParams a = attention_params(p, prim);
  const bool backward = prim == Prim::dot_product_attention_bwd;
  const int64_t v = info.axis_size, batch = info.in_avals[0].shape[0];
  std::vector<Array> operands;
  for (size_t i = 0; i < values.size(); ++i) {
    const bool broadcasting = int(i) == a.bias || int(i) == a.mask;
    if (broadcasting && bdims[i] < 0 && values[i].shape()[0] == 1 && !(backward && int(i) == a.bias)) {
      operands.push_back(values[i]);  // broadcasts over the merged batch as over one
      continue;
    }
    Array x = mapped_first(values[i], bdims[i], v);
    if (broadcasting && x.shape()[1] == 1 && batch != 1) {
      Ints dims = x.shape().dims();
      dims[1] = batch;
      x = lax::broadcast_in_dim(x, dims, {0, 1, 2, 3, 4});
    }
    operands.push_back(merge_leading(x));
  }
  const std::vector<Array> out = bind(prim, operands, p);
  Batched b;
  for (size_t j = 0; j < out.size(); ++j) {
    Array y = split_leading(out[j], v);
    // The bias gradient of a bias that broadcasts over the batch: summed
    // over each mapped example's batch.
    if (backward && j == 3 && info.out_avals[j].shape[0] == 1 && batch != 1) {
      y = lax::reshape(lax::reduce_sum(y, {1}), [&] {
        Ints dims = info.out_avals[j].shape.dims();
        dims.insert(dims.begin(), v);
        return dims;
      }());
    }
    b.values.push_back(y);
    b.bdims.push_back(0);
  }
  return b;
}

Batched attention_batch(std::span<const Array> values, std::span<const int64_t> bdims, const Params& p,
                        const BatchInfo& info) {
  return batch_attention(Prim::dot_product_attention, values, bdims, p, info);
}

Batched attention_bwd_batch(std::span<const Array> values, std::span<const int64_t> bdims, const Params& p,
                            const BatchInfo& info) {
  return batch_attention(Prim::dot_product_attention_bwd, values, bdims, p, info);
}

}  // namespace

void register_attention_batching(PrimTable& t) {
  t[size_t(Prim::dot_product_attention)].batch = attention_batch;
  t[size_t(Prim::dot_product_attention_bwd)].batch = attention_bwd_batch;
}

}  // namespace pax
