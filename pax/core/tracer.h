// Tracer: the base of every value an interpreter level owns (a jaxpr variable
// while tracing, a primal with its tape slot under grad, a batched value under
// vmap). Arrays hold one instead of a buffer; see pax/interp for the levels.
#pragma once

#include <string>

namespace pax {

class Array;

class Tracer {
 public:
  virtual ~Tracer() = default;
  // The concrete value behind the tracer when there is one (grad and jvp
  // tracers of concrete primals), so that value-dependent C++ control flow
  // works outside jit; nullptr while tracing for jit or under vmap.
  virtual const Array* concrete() const { return nullptr; }
  // The transformation that owns the value ("jit", "grad", "vmap", ...), for errors.
  virtual std::string owner() const = 0;
};

}  // namespace pax
