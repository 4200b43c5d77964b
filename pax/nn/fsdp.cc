// Fully sharded data parallelism: which dimension a weight is split along,
// this process's block, and the gather back to the declared weight.
#include "pax/nn/fsdp.h"

#include "pax/core/error.h"
#include "pax/ops/lax.h"

namespace pax::nn {

int64_t fsdp_split_dim(const WeightHParams& spec, const FsdpOptions& fsdp, const std::string& what) {
  if (!fsdp.enabled() || spec.collection != "params") return -1;
  const Shape& shape = spec.shape;
  const int64_t first = spec.repeat_prefix_axes;
  if (spec.fsdp_dim) {
    const int64_t d = *spec.fsdp_dim;
    if (d == -1) return -1;
    PAX_CHECK(d >= first && d < shape.rank() && shape[d] % fsdp.size == 0, what, ": fsdp_dim ", d, " cannot split ",
              shape, " over the ", fsdp.size, " processes of axis '", fsdp.axis,
              "' (valid: -1, or a dimension >= ", first, " whose size the process count divides)");
    return d;
  }
  if (shape.numel() < fsdp.min_elements) return -1;
  int64_t best = -1;
  for (int64_t d = first; d < shape.rank(); ++d)
    if (shape[d] % fsdp.size == 0 && (best < 0 || shape[d] > shape[best])) best = d;
  return best;
}

Array block_along(const Array& full, int64_t dim, int64_t count, int64_t index) {
  const int64_t block = full.dim(dim) / count;
  Ints start(size_t(full.ndim()), 0), limit = full.shape().dims();
  start[size_t(dim)] = index * block;
  limit[size_t(dim)] = (index + 1) * block;
  return lax::slice(full, start, limit);
}

Array fsdp_block(const Array& full, int64_t dim, const FsdpOptions& fsdp) {
  return dim < 0 ? full : block_along(full, dim, fsdp.size, fsdp.index);
}

Array fsdp_gather(const Array& block, const Shape& declared, const FsdpOptions& fsdp, const std::string& what) {
  const Shape& have = block.shape();
  if (have == declared) return block;
  int64_t split = -1;
  bool fits = fsdp.enabled() && have.rank() == declared.rank();
  for (int64_t d = 0; fits && d < have.rank(); ++d) {
    if (have[d] == declared[d]) continue;
    fits = split < 0 && have[d] * fsdp.size == declared[d];
    split = d;
  }
  PAX_CHECK(fits && split >= 0, what, " has shape ", have, " but the layer declares ", declared,
            fsdp.enabled() ? " (nor is it a block of it split over the " + std::to_string(fsdp.size) +
                                 " processes of axis '" + fsdp.axis + "')"
                           : std::string());
  return lax::all_gather(block, fsdp.axis, split, /*tiled=*/true);
}

}  // namespace pax::nn
