// Test helpers shared by the GoogleTest suites: host random arrays, closeness
// checks against reference values, and error-message expectations.
#pragma once

#include <limits>

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "pax/backend/backend.h"
#include "pax/core/array.h"

namespace pax::testing {

// The special values tests feed to kernels.
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr double kInf = std::numeric_limits<double>::infinity();

// The address of an array's memory once the work computing it has run (for
// tests of buffer reuse: donation, in-place updates, shared reshapes); never
// read through it.
inline const void* memory_address(const Array& a) {
  const Device d = a.device();
  backend_for(d).synchronize(d.index);
  return a.buffer()->data();
}

// The bytes of an array, read on the host.
inline std::vector<unsigned char> host_bytes(const Array& a) {
  std::vector<unsigned char> out(a.nbytes());
  a.copy_to_host(a.dtype(), out.data());
  return out;
}

// Uniform values in [lo, hi) from a fixed seed, as f64 on the host.
inline std::vector<double> random_values(int64_t n, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(n));
  for (double& x : v) x = dist(gen);
  return v;
}

// An array of `dtype` holding random_values (converted with convert rules).
inline Array random_array(const Shape& shape, DType dtype, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::vector<double> v = random_values(shape.numel(), seed, lo, hi);
  Array a = array(v, shape);
  if (dtype == DType::f64) return a;
  std::vector<unsigned char> bytes(v.size() * itemsize(dtype));
  convert_host(DType::f64, v.data(), dtype, bytes.data(), v.size());
  return from_host(bytes.data(), shape, dtype);
}

// Multi-index of a row-major flat index, and back (for reference loops).
inline std::vector<int64_t> unravel(int64_t flat, const Shape& shape) {
  std::vector<int64_t> idx(static_cast<size_t>(shape.rank()));
  for (int64_t d = shape.rank() - 1; d >= 0; --d) {
    idx[static_cast<size_t>(d)] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}
inline int64_t ravel(const std::vector<int64_t>& idx, const Shape& shape) {
  int64_t flat = 0;
  for (int64_t d = 0; d < shape.rank(); ++d) flat = flat * shape[d] + idx[static_cast<size_t>(d)];
  return flat;
}

// Checks shape and |actual - expected| <= atol + rtol * |expected| elementwise
// (NaN matches NaN, infinities must match exactly).
inline ::testing::AssertionResult all_close(const Array& actual, const std::vector<double>& expected,
                                            double rtol = 1e-6, double atol = 1e-6) {
  std::vector<double> got = actual.to_vector<double>();
  if (got.size() != expected.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " != expected " << expected.size();
  }
  for (size_t i = 0; i < got.size(); ++i) {
    double g = got[i], e = expected[i];
    bool ok = (std::isnan(e) && std::isnan(g)) || (std::isinf(e) && g == e) ||
              (std::isfinite(e) && std::fabs(g - e) <= atol + rtol * std::fabs(e));
    if (!ok) {
      return ::testing::AssertionFailure()
             << "element " << i << ": got " << g << ", expected " << e << " (rtol " << rtol << ", atol " << atol << ")";
    }
  }
  return ::testing::AssertionSuccess();
}

inline ::testing::AssertionResult all_close(const Array& actual, const Array& expected, double rtol = 1e-6,
                                            double atol = 1e-6) {
  if (actual.shape() != expected.shape()) {
    return ::testing::AssertionFailure() << "shape " << actual.shape() << " != expected " << expected.shape();
  }
  return all_close(actual, expected.to_vector<double>(), rtol, atol);
}

}  // namespace pax::testing

// Expects `stmt` to throw pax::Error whose message contains `substr`.
#define EXPECT_PAX_ERROR(stmt, substr)                                                             \
  do {                                                                                             \
    try {                                                                                          \
      stmt;                                                                                        \
      ADD_FAILURE() << "expected pax::Error containing \"" << (substr) << "\"";                    \
    } catch (const ::pax::Error& e) {                                                              \
      EXPECT_NE(std::string(e.what()).find(substr), std::string::npos) << "message: " << e.what(); \
    }                                                                                              \
  } while (0)
