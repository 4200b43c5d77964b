// The eager interpreter: run a primitive now, on concrete arrays, on the
// device its operands live on (place_operands).
#include <vector>

#include "pax/backend/backend.h"
#include "pax/core/error.h"
#include "pax/interp/interpreter.h"
#include "pax/prims/registry.h"

namespace pax {

std::vector<Array> eager_apply(Prim prim, std::span<const Array> operands, const Params& params) {
  const PrimDef& def = prim_def(prim);
  std::vector<Array> moved;
  const auto [device, committed] = place_operands(operands, moved, prim_name(prim));
  if (!moved.empty()) operands = moved;
  std::span<const Array> inputs = operands;
  std::vector<AVal> in_avals;
  in_avals.reserve(inputs.size());
  for (const Array& a : inputs) in_avals.push_back(a.aval());
  if (def.impl) {
    infer_avals(prim, in_avals, params);
    // The rule's own operations and executables run where the operands live.
    const DefaultDeviceScope on_device(device);
    std::vector<Array> out = def.impl(inputs, params);
    if (committed) {
      for (Array& a : out)
        if (a.is_concrete() && !a.committed()) a = Array(a.aval(), a.buffer(), true);
    }
    return out;
  }
  std::vector<AVal> out_avals = infer_avals(prim, in_avals, params);

  if (def.output_aliases_input >= 0) {
    return {Array(std::move(out_avals[0]), inputs[size_t(def.output_aliases_input)].buffer(), committed)};
  }
  const Backend& backend = backend_for(device);
  KernelFn kernel = backend.kernel(prim);
  if (!kernel && def.expand) {
    // A primitive defined by a composite runs it where the backend has no
    // kernel of its own.
    const DefaultDeviceScope on_device(device);
    return def.expand(inputs, params);
  }
  PAX_CHECK(kernel, prim_name(prim), ": primitive has no kernel on the ", backend.name, " backend");

  std::vector<Array> outputs;
  outputs.reserve(out_avals.size());
  for (AVal& aval : out_avals) {
    size_t nbytes = size_t(aval.shape.numel()) * itemsize(aval.dtype);
    outputs.emplace_back(
        std::move(aval),
        device.kind == DeviceKind::cpu ? Buffer::allocate(nbytes) : backend.memory.allocate(nbytes, device.index),
        committed);
  }
  // A backend with a stream of its own queues the kernel there; the CPU
  // runs it now, on this thread.
  if (backend.launch) {
    backend.launch(device.index, kernel, params, std::vector<Array>(inputs.begin(), inputs.end()), outputs);
    return outputs;
  }
  std::vector<TensorView> in_views(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    in_views[i] = TensorView{inputs[i].buffer()->data(), &inputs[i].shape(), inputs[i].dtype()};
  }
  std::vector<TensorView> out_views(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    out_views[i] = TensorView{outputs[i].buffer()->data(), &outputs[i].shape(), outputs[i].dtype()};
  }
  kernel(host_kernel_context(), params, in_views, out_views);
  return outputs;
}

}  // namespace pax
