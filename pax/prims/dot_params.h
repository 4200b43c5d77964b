// dot_general's dimension numbers read from its Params, and the free axes
// they leave: the shape rule (dot.cc) and the backends' kernels both need
// them.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "pax/ir/params.h"

namespace pax {

struct DotDims {
  Ints lhs_contracting, rhs_contracting, lhs_batch, rhs_batch;
};

// A product with a bias (the compiler's fold_bias_into_products writes it;
// no transform makes one): a third operand, the trailing dims of the result
// in its dtype, added to every result element it broadcasts to.
inline bool dot_has_bias(const Params& p) { return p.has("has_bias") && p.b("has_bias"); }
// A product with a multiplier (the compiler's fold_multipliers_into_products
// writes it): a last operand of the result's shape and dtype, which the result
// (after the bias) is multiplied by, element by element.
inline bool dot_has_multiplier(const Params& p) { return p.has("has_multiplier") && p.b("has_multiplier"); }
// A product with a ReLU (the compiler's fold_relus_into_products writes it):
// its result (after the bias) is relu(result) as pax::nn::relu computes it.
// No operand of its own.
inline bool dot_has_relu(const Params& p) { return p.has("has_relu") && p.b("has_relu"); }
// Operands of a product: lhs, rhs, then the bias and the multiplier where it has them.
inline size_t dot_num_operands(const Params& p) { return 2 + size_t(dot_has_bias(p)) + size_t(dot_has_multiplier(p)); }

inline DotDims dot_dims(const Params& p) {
  return {p.ints("lhs_contracting_dims"), p.ints("rhs_contracting_dims"), p.ints("lhs_batch_dims"),
          p.ints("rhs_batch_dims")};
}

// The axes of an operand of rank `rank` that are neither contracting nor
// batch axes, in order: they become the output's lhs / rhs axes.
inline std::vector<int64_t> free_axes(int64_t rank, const Ints& contracting, const Ints& batch) {
  std::vector<int64_t> out;
  for (int64_t a = 0; a < rank; ++a) {
    if (std::find(contracting.begin(), contracting.end(), a) == contracting.end() &&
        std::find(batch.begin(), batch.end(), a) == batch.end()) {
      out.push_back(a);
    }
  }
  return out;
}

}  // namespace pax
