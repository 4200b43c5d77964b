// For the tests of fully sharded data, tensor and pipeline parallelism
// (pax/nn/*_test.cc): the block of a split array a process holds, found from
// its shape, and the small f64 transformer stacks those tests split.
#pragma once

#include <cstdint>

#include "pax/core/array.h"
#include "pax/nn/transformers.h"
#include "pax/ops/numpy.h"

namespace pax::testing {

// Block `index` of `full` along the one dimension where `block`'s shape
// differs from it (blocks of equal size); `full` itself where none does.
inline Array block_of(const Array& full, const Array& block, int64_t index) {
  for (int64_t d = 0; d < full.ndim(); ++d)
    if (full.dim(d) != block.dim(d)) return slice_along(full, d, index * block.dim(d), (index + 1) * block.dim(d));
  return full;
}

// A Transformer layer template in f64: depth 8, hidden width 12, `heads`
// heads (edit it for a case, then stack it with repeat_of).
inline std::shared_ptr<nn::Transformer::HParams> f64_transformer(int64_t heads) {
  auto sub = nn::tpl<nn::Transformer>();
  sub->input_dims = 8;
  sub->hidden_dims = 12;
  sub->num_heads = heads;
  sub->dtype = sub->fprop_dtype = DType::f64;
  return sub;
}

// A Repeat of `layers` copies of `sub`, in f64.
inline nn::Repeat::HParams repeat_of(const HParamsPtr& sub, int64_t layers) {
  nn::Repeat::HParams hp;
  hp.sub_tpl = sub;
  hp.x_times = layers;
  hp.dtype = hp.fprop_dtype = DType::f64;
  return hp;
}

}  // namespace pax::testing
