// The pass pipeline.
#include "pax/compile/passes/passes.h"
#include "pax/compile/passes/rewrite.h"

namespace pax {

Jaxpr optimize(const Jaxpr& jaxpr, const PassOptions& options) {
  Jaxpr cur = inline_calls(jaxpr);
  passes::check_pass(cur, "inline_calls");
  if (options.native_product) {
    cur = widen_products(cur, options.native_product);
    passes::check_pass(cur, "widen_products");
  }
  for (int round = 0; round < 2; ++round) {
    cur = fold_constants(cur, options.fold_limit);
    passes::check_pass(cur, "fold_constants");
    cur = simplify(cur);
    passes::check_pass(cur, "simplify");
    cur = cse(cur);
    passes::check_pass(cur, "cse");
    cur = dce(cur);
    passes::check_pass(cur, "dce");
  }
  cur = hoist_input_computations(cur);
  passes::check_pass(cur, "hoist_input_computations");
  return cur;
}

}  // namespace pax
