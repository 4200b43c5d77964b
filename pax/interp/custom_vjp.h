// The rule object of custom_vjp_call: a function with a user-supplied
// backward pass (as jax.custom_vjp). Under grad, `fwd` computes the outputs
// and residuals and `bwd` maps residuals and output cotangents to input
// cotangents; elsewhere `fn` runs. The functions must not close over traced
// values (pass them as arguments).
#pragma once

#include <functional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "pax/interp/trace.h"
#include "pax/ir/params.h"

namespace pax {

class CustomVjpRule : public ParamObject {
 public:
  using Fwd = std::function<std::pair<std::vector<Array>, std::vector<Array>>(std::span<const Array>)>;
  using Bwd = std::function<std::vector<Array>(std::span<const Array> residuals, std::span<const Array> cts)>;
  FlatFn fn;
  Fwd fwd;
  Bwd bwd;
  std::vector<AVal> out_avals;  // of fn for this call's input avals
  // fn traced for this call's input avals (the compiler inlines it when the
  // call is not differentiated); null when fn was not traced.
  JaxprPtr jaxpr;
  std::string name = "custom_vjp";
  // The named vmap axes fn, fwd and bwd are batched over already. A call
  // goes to every other named vmap level above it, even with inputs that
  // level does not batch, so that a collective over that axis in bwd binds.
  std::vector<std::string> batched_axes;
  bool batched_over(const std::string& axis) const {
    for (const std::string& a : batched_axes)
      if (a == axis) return true;
    return false;
  }
  std::string str() const override { return name; }
};

}  // namespace pax
