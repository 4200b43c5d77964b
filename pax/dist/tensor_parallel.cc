// Megatron's f and g over a mesh axis (see tensor_parallel.h), as custom_vjp
// pairs around lax::psum.
#include "pax/dist/tensor_parallel.h"

#include <utility>
#include <vector>

#include "pax/api/transforms.h"
#include "pax/ops/lax.h"

namespace pax::dist {

Array enter_split(const Array& x, const std::string& axis) {
  const auto f = custom_vjp(
      [](const Array& v) { return v; }, [](const Array& v) { return std::make_pair(v, std::vector<Array>{}); },
      [axis](const std::vector<Array>&, const Array& g) { return lax::psum(g, axis); }, "enter_split");
  return f(x);
}

Array leave_split(const Array& partial, const std::string& axis) {
  const auto g = custom_vjp([axis](const Array& v) { return lax::psum(v, axis); },
                            [axis](const Array& v) { return std::make_pair(lax::psum(v, axis), std::vector<Array>{}); },
                            [](const std::vector<Array>&, const Array& ct) { return ct; }, "leave_split");
  return g(partial);
}

}  // namespace pax::dist
