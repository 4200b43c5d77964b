// The eager interpreter: run a primitive now, on concrete arrays.
#include <vector>

#include "pax/backend/backend.h"
#include "pax/core/error.h"
#include "pax/interp/interpreter.h"
#include "pax/prims/registry.h"

namespace pax {

std::vector<Array> eager_apply(Prim prim, std::span<const Array> inputs, const Params& params) {
  const PrimDef& def = prim_def(prim);
  if (def.impl) {
    infer_avals(
        prim,
        [&] {
          std::vector<AVal> avals;
          for (const Array& a : inputs) avals.push_back(a.aval());
          return avals;
        }(),
        params);
    return def.impl(inputs, params);
  }
  std::vector<AVal> in_avals;
  in_avals.reserve(inputs.size());
  for (const Array& a : inputs) in_avals.push_back(a.aval());
  std::vector<AVal> out_avals = infer_avals(prim, in_avals, params);

  if (def.output_aliases_input >= 0) {
    return {Array(std::move(out_avals[0]), inputs[size_t(def.output_aliases_input)].buffer())};
  }
  const Backend& backend = default_backend();
  KernelFn kernel = backend.kernel(prim);
  PAX_CHECK(kernel, prim_name(prim), ": primitive has no kernel on the ", backend.name, " backend");

  std::vector<TensorView> in_views(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    in_views[i] = TensorView{const_cast<void*>(inputs[i].data()), &inputs[i].shape(), inputs[i].dtype()};
  }
  std::vector<Array> outputs;
  outputs.reserve(out_avals.size());
  for (AVal& aval : out_avals) {
    size_t nbytes = size_t(aval.shape.numel()) * itemsize(aval.dtype);
    outputs.emplace_back(std::move(aval), backend.allocate(nbytes));
  }
  std::vector<TensorView> out_views(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    out_views[i] = TensorView{const_cast<void*>(outputs[i].data()), &outputs[i].shape(), outputs[i].dtype()};
  }
  kernel(params, in_views, out_views);
  return outputs;
}

}  // namespace pax
