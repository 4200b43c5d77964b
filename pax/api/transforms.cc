// Non-template parts of the transforms API.
#include "pax/api/transforms.h"

#include "pax/interp/interpreter.h"

namespace pax {

Array stop_gradient(const Array& x) { return bind1(Prim::stop_gradient, {x}); }

Tree stop_gradient(const Tree& x) {
  return tree_map([](const Array& a) { return stop_gradient(a); }, x);
}

}  // namespace pax
