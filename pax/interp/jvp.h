// Forward mode. The jvp level carries a tangent beside each primal and
// applies the primitives' JVP rules; jvp(grad(f)) gives Hessian-vector
// products.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "pax/interp/interpreter.h"
#include "pax/interp/trace.h"

namespace pax {

class JvpTrace : public Trace, public std::enable_shared_from_this<JvpTrace> {
 public:
  std::vector<Array> process(Prim prim, std::span<const Array> inputs, const Params& params) override;
  std::string name() const override { return "jvp"; }
  Array pack(const Array& primal, const Array& tangent);
  // (primal, tangent) of a value; the tangent is undefined (zero) for values
  // that are not this level's.
  std::pair<Array, Array> unpack(const Array& x) const;
};

class JvpTracer : public LevelTracer {
 public:
  JvpTracer(std::shared_ptr<Trace> trace, Array primal, Array tangent)
      : LevelTracer(std::move(trace)), primal(std::move(primal)), tangent(std::move(tangent)) {}
  const Array* concrete() const override;
  const Array primal;
  const Array tangent;
};

// Primal outputs and their tangents. Undefined input tangents are zeros;
// output tangents that do not depend on the inputs are zeros, materialised
// unless `instantiate_zeros` is false (then undefined).
std::pair<std::vector<Array>, std::vector<Array>> jvp_flat(const FlatFn& f, std::span<const Array> primals,
                                                           std::span<const Array> tangents,
                                                           bool instantiate_zeros = true);

}  // namespace pax
