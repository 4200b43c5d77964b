// Moving arrays between devices (jax.device_put / jax.device_get): the only
// way an array changes device. Copies stage through the backends' memory
// functions (pax/core/device.h), never through a pointer into device memory.
#pragma once

#include "pax/core/array.h"
#include "pax/core/tree.h"

namespace pax {

// `x` on `device`, committed there (copied when it lives elsewhere; a tracer
// is returned as it is).
Array device_put(const Array& x, Device device);
// Every leaf of `tree` on `device`, committed there.
Tree device_put(const Tree& tree, Device device);
// Every leaf of `tree` on the host (the CPU device), committed there; waits
// for the work that computes them.
Tree device_get(const Tree& tree);
Array device_get(const Array& x);

// `x` on `device`, keeping it uncommitted: how an operation brings an
// uncommitted operand to its committed ones.
Array move_uncommitted(const Array& x, Device device);

}  // namespace pax
