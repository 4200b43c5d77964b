// bind(): the single entry point through which every primitive is applied.
// It hands the application to the interpreter level that owns one of the
// inputs (trace, vjp, vmap — see DESIGN.md), or, when every input is concrete,
// runs the backend kernel now (the eager interpreter).
#pragma once

#include <initializer_list>
#include <span>
#include <vector>

#include "pax/core/array.h"
#include "pax/ir/params.h"
#include "pax/ir/prims.h"

namespace pax {

// A value owned by an interpreter level; interpreters derive from it.
class Tracer {
 public:
  virtual ~Tracer() = default;
};

std::vector<Array> bind(Prim prim, std::span<const Array> inputs, const Params& params = {});
inline std::vector<Array> bind(Prim prim, std::initializer_list<Array> inputs, const Params& params = {}) {
  return bind(prim, std::span<const Array>(inputs.begin(), inputs.size()), params);
}
// For primitives with exactly one output.
Array bind1(Prim prim, std::span<const Array> inputs, const Params& params = {});
inline Array bind1(Prim prim, std::initializer_list<Array> inputs, const Params& params = {}) {
  return bind1(prim, std::span<const Array>(inputs.begin(), inputs.size()), params);
}

// The eager interpreter: checks shapes, allocates the results and runs the
// CPU kernel. Inputs must all be concrete.
std::vector<Array> eager_apply(Prim prim, std::span<const Array> inputs, const Params& params);

}  // namespace pax
