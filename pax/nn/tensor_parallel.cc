// Tensor parallelism: the blocks of split variables, and Megatron's f and g
// over a mesh axis as custom_vjp pairs around lax::psum.
#include "pax/nn/tensor_parallel.h"

#include <utility>
#include <vector>

#include "pax/api/transforms.h"
#include "pax/core/error.h"
#include "pax/ops/lax.h"
#include "pax/ops/numpy.h"
#include "pax/ops/random.h"

namespace pax::nn {

bool mdl_split(const WeightHParams& spec, const TensorParallelOptions& tp) {
  if (!tp.enabled() || !spec.mdl_dim) return false;
  const int64_t d = *spec.mdl_dim;
  return !spec.mdl_split_if_divisible || (d >= 0 && d < spec.shape.rank() && spec.shape[d] % tp.size == 0);
}

Shape mdl_local_shape(const WeightHParams& spec, const TensorParallelOptions& tp, const std::string& what) {
  if (!mdl_split(spec, tp)) return spec.shape;
  const int64_t d = *spec.mdl_dim;
  PAX_CHECK(d >= spec.repeat_prefix_axes && d < spec.shape.rank(), what, ": mdl_dim ", d, " is not a dimension of ",
            spec.shape, " after its ", spec.repeat_prefix_axes, " repeat axes");
  PAX_CHECK(spec.shape[d] % tp.size == 0, what, " ", spec.shape, ": dimension ", d, " (", spec.shape[d],
            ") does not split over the ", tp.size, " processes of the mesh axis '", tp.axis,
            "' (tensor parallelism needs the heads and hidden widths divisible by it)");
  Shape s = spec.shape;
  s[d] /= tp.size;
  return s;
}

Array mdl_block(const Array& full, const WeightHParams& spec, const TensorParallelOptions& tp) {
  if (!mdl_split(spec, tp)) return full;
  PAX_CHECK(full.shape() == spec.shape, "mdl_block: ", full.aval().str(), " is not the declared ", spec.shape);
  mdl_local_shape(spec, tp, "mdl_block");  // checks the split
  return block_along(full, *spec.mdl_dim, tp.size, tp.index);
}

WeightHParams held_spec(const WeightHParams& spec, const TensorParallelOptions& tp, const FsdpOptions& fsdp,
                        const std::string& what, bool second_dimension) {
  if (!mdl_split(spec, tp)) return spec;
  WeightHParams held = spec;
  held.shape = mdl_local_shape(spec, tp, what);
  const int64_t d = *spec.mdl_dim;
  if (spec.fsdp_dim && *spec.fsdp_dim != -1 && *spec.fsdp_dim != d) {
    // Praxis's [data, mdl]: the data axis splits another dimension.
    PAX_CHECK(second_dimension, what, ": fsdp_dim ", *spec.fsdp_dim, " differs from mdl_dim ", d,
              ", but a pipeline stage's block is split over mdl and data along one dimension (set fsdp_dim to ", d,
              " or -1, or leave it unset)");
    return held;
  }
  held.fsdp_dim = -1;
  if (!fsdp.enabled() || spec.fsdp_dim == -1 || held.shape.numel() < fsdp.min_elements) return held;
  if (held.shape[d] % fsdp.size == 0) {
    held.fsdp_dim = d;  // the two splits nest along mdl_dim
  } else if (second_dimension) {
    for (int64_t k = spec.repeat_prefix_axes; k < held.shape.rank(); ++k)
      if (k != d && held.shape[k] % fsdp.size == 0 &&
          (*held.fsdp_dim < 0 || held.shape[k] > held.shape[*held.fsdp_dim]))
        held.fsdp_dim = k;
  }
  return held;
}

Array part_of(const Array& whole, int64_t dim, const TensorParallelOptions& tp) {
  if (!tp.enabled()) return whole;
  const int64_t n = whole.dim(dim) / tp.size;
  std::vector<Array> start(size_t(whole.ndim()), scalar<int32_t>(0));
  start[size_t(dim)] = lax::axis_index(tp.axis).astype(DType::i32) * int32_t(n);
  Ints sizes = whole.shape().dims();
  sizes[size_t(dim)] = n;
  return lax::dynamic_slice(whole, start, sizes);
}

Array key_of_this_part(const Array& key, const TensorParallelOptions& tp) {
  if (!tp.enabled()) return key;
  return squeeze(part_of(random::split(key, tp.size), 0, tp), 0);  // one of (size, 2)
}

Array gather_parts(const Array& part, int64_t dim, const TensorParallelOptions& tp) {
  if (!tp.enabled()) return part;
  const std::string axis = tp.axis;
  const auto g = custom_vjp(
      [axis, dim](const Array& v) { return lax::all_gather(v, axis, dim, /*tiled=*/true); },
      [axis, dim](const Array& v) {
        return std::make_pair(lax::all_gather(v, axis, dim, /*tiled=*/true), std::vector<Array>{});
      },
      [tp, dim](const std::vector<Array>&, const Array& ct) { return part_of(ct, dim, tp); }, "gather_parts");
  return g(part);
}

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

Array enter_split(const Array& x, const TensorParallelOptions& tp) {
  return tp.enabled() ? enter_split(x, tp.axis) : x;
}

Array leave_split(const Array& partial, const TensorParallelOptions& tp) {
  return tp.enabled() ? leave_split(partial, tp.axis) : partial;
}

}  // namespace pax::nn
