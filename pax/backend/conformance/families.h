// Helpers of the conformance cases of the non-elementwise families: a case
// runs on every device and mode and compares each output with a host
// reference computed by a plain loop over long double values.
#pragma once

#include <string>
#include <vector>

#include "pax/backend/conformance/conformance.h"

namespace pax::conformance {

// A host value of `dtype` and `shape` from `values` (rounded to the dtype).
Host host(DType dtype, const Shape& shape, std::vector<long double> values);
// Small integers (in [-4, 4]) of `dtype`: sums and products of a few of them
// are exact in every dtype, so reductions and products compare exactly.
Host small_ints(DType dtype, const Shape& shape, uint32_t seed);
// Distinct values of `dtype` (for data movement: each output element names
// the input element it came from).
Host distinct(DType dtype, const Shape& shape);

// Whether the primitive's shape rule accepts these operands (f traced
// abstractly, nothing run).
bool accepts(const Fn& f, const std::vector<Host>& in);

// Runs f on every device and mode; output k must have want[k]'s dtype and
// shape and match its values within `tol`.
void expect_op(const std::string& label, const Fn& f, const std::vector<Host>& in, const std::vector<Host>& want,
               Tolerance tol = Tolerance::exact());

// Row-major flat index helpers.
std::vector<int64_t> unravel(int64_t flat, const Shape& shape);
int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape);

}  // namespace pax::conformance
