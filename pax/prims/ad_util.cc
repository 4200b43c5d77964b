// Helpers shared by the VJP / JVP rules.
#include "pax/prims/ad_util.h"

#include <algorithm>

namespace pax::ad {

Array unbroadcast(const Array& ct, const Shape& shape, const Ints& broadcast_dimensions) {
  Ints sum_axes;
  for (int64_t d = 0; d < ct.ndim(); ++d) {
    auto it = std::find(broadcast_dimensions.begin(), broadcast_dimensions.end(), d);
    if (it == broadcast_dimensions.end()) {
      sum_axes.push_back(d);
    } else if (shape[int64_t(it - broadcast_dimensions.begin())] == 1 && ct.dim(d) != 1) {
      sum_axes.push_back(d);
    }
  }
  Array reduced = sum_axes.empty() ? ct : lax::reduce_sum(ct, sum_axes);
  return lax::reshape(reduced, shape.dims());
}

}  // namespace pax::ad
