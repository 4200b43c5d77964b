// Gradient checks for layers: the VJP of a layer's forward pass with respect
// to its params (and floating inputs) against central finite differences.
// Build the layer with dtype = fprop_dtype = f64 for meaningful differences.
#pragma once

#include "pax/nn/layer.h"
#include "pax/testing/transform_check.h"

namespace pax::testing {

// Replaces every params leaf by uniform values in [-scale, scale) (biases and
// scales too, so that they are exercised).
inline Tree randomize_params(Tree vars, uint32_t seed, double scale = 1.0) {
  vars["params"] = tree_map([&](const Array& a) { return random_array(a.shape(), a.dtype(), seed++, -scale, scale); },
                            vars["params"]);
  return vars;
}

// f(params leaves..., inputs...) = call(layer) under apply, output as an Array.
template <class L, class F>
::testing::AssertionResult check_layer_vjp(const L& layer, const Tree& variables, const std::vector<Array>& inputs,
                                           F call, double eps = 1e-5, double tol = 1e-6) {
  auto [leaves, def] = tree_flatten(variables["params"]);
  const size_t np = leaves.size();
  std::vector<Array> args = leaves;
  args.insert(args.end(), inputs.begin(), inputs.end());
  ArrayFn f = [&, def, np](const std::vector<Array>& a) {
    Tree vars = variables;
    vars["params"] = tree_unflatten(def, std::span<const Array>(a.data(), np));
    std::vector<Array> in(a.begin() + long(np), a.end());
    return nn::apply_with(layer, vars, [&](const L& l) { return call(l, in); }).output;
  };
  return check_vjp(f, args, eps, tol);
}

}  // namespace pax::testing
