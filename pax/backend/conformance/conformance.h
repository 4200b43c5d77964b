// The backend conformance suite's shared pieces: the devices under test and
// the one way inputs reach them, the execution modes, host references kept
// in long double, comparison with a tolerance per operation class, and the
// registry of which primitives have a conformance case (checked against
// prims.def by Conformance.EveryPrimitiveHasACase).
//
// Every input goes through put() and every result comes back through
// read_back() (to_vector), so that a device whose memory the host cannot
// read runs the same cases unchanged.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pax/core/array.h"
#include "pax/core/device.h"
#include "pax/ir/prims.h"

namespace pax::conformance {

// ---- devices and placement

// The devices every case runs on. Today the default device; the list of all
// devices present comes here once arrays can be placed on each.
std::vector<Device> conformance_devices();
// `host_value` on device `d`: the only place inputs are placed (today the
// value itself, on the default device).
Array put(const Array& host_value, Device d);

// ---- execution modes

// eager: the lax functions on concrete arrays; jit: pax::jit of the same
// function. Whether jit runs generated code is decided for the whole process
// by PAX_COMPILE (sync: generated code; off: interpreted), since the CPU
// backend reads it once: ctest runs the suite under both.
enum class Mode { eager, jit };
inline constexpr Mode kModes[] = {Mode::eager, Mode::jit};
// "eager", "jit (generated code)" or "jit (interpreted)".
std::string mode_name(Mode m);
// Whether this process's jitted loops run generated code.
bool jit_generates_code();

using Fn = std::function<std::vector<Array>(const std::vector<Array>&)>;
// f(args) in mode `m` (a fresh jit per call, so that each case is traced and
// compiled on its own).
std::vector<Array> run(Mode m, const Fn& f, const std::vector<Array>& args);

// ---- host values

// A host copy of an array's values, widened to long double (exact for every
// dtype: bool and integers up to 64 bits, and f64).
struct Host {
  DType dtype = DType::f32;
  Shape shape;
  std::vector<long double> v;
  size_t size() const { return v.size(); }
};
// The one read-back of a result (to_vector).
Host read_back(const Array& a);
// An array of `dtype` holding `values`, which must be representable in it,
// placed on `d`.
Array make(const std::vector<long double>& values, const Shape& shape, DType dtype, Device d);

// `x` rounded to `dtype` as the dtype's own arithmetic rounds: to nearest
// even for floats (subnormals and overflow to inf included), wrapped modulo
// 2^bits for integers, != 0 for bool.
long double round_to(long double x, DType dtype);
// convert_element_type's rules from any value to `dtype` (float to integer
// truncates and saturates, NaN to 0; to bool: != 0).
long double convert_value(long double x, DType dtype);

// Values of `dtype` for tests: floats spread over [lo, hi] (n of them)
// rounded to the dtype, followed by `specials` rounded; integers: a spread
// over the dtype's range with its extremes.
std::vector<long double> float_values(DType dtype, long double lo, long double hi, int n,
                                      const std::vector<long double>& specials = {});
std::vector<long double> int_values(DType dtype);
// Uniform pseudo-random values in [lo, hi) rounded to dtype (fixed seed).
std::vector<long double> random_values(DType dtype, int64_t n, uint32_t seed, long double lo, long double hi);

// The dtypes of prims.def's accepts column.
std::vector<DType> accepted_dtypes(Accepts accepts);
inline constexpr DType kAllDTypes[] = {DType::bool_, DType::u8,  DType::u32, DType::i32, DType::i64,
                                       DType::bf16,  DType::f16, DType::f32, DType::f64};
inline constexpr DType kFloatDTypes[] = {DType::bf16, DType::f16, DType::f32, DType::f64};

// ---- comparison

// How far a result may be from the reference rounded to its dtype: exactly
// equal, or within a number of units in the last place of the dtype (per
// precision; bf16 and f16 compute in f32 and round, so one of their ulps
// covers the f32 error). NaN matches NaN; +0 matches -0.
struct Tolerance {
  double ulps_f32 = 0, ulps_f64 = 0, ulps_half = 0;
  static Tolerance exact() { return {}; }
  static Tolerance ulps(double f32, double f64, double half = 1) { return {f32, f64, half}; }
  double for_dtype(DType d) const;
};
// The distance in ulps of `dtype` between two values representable in it
// (0 for NaN and NaN; infinite for NaN and a number).
double ulp_distance(long double a, long double b, DType dtype);
// got against want (exact values, rounded to got's dtype here).
::testing::AssertionResult matches(const Host& got, const std::vector<long double>& want, const Tolerance& tol,
                                   const Host* inputs = nullptr, const Host* inputs2 = nullptr);

// ---- coverage

// Records that `prim` (a prims.def name) has a conformance case of the given
// kind; returns true so that it can initialise a namespace-scope constant.
bool register_case(const char* prim);
bool register_derivative_case(const char* prim);
// A function listing derivative cases by primitive name, called when the
// coverage test runs (its cases hold arrays, which are not made before main).
bool register_derivative_lister(std::vector<std::string> (*lister)());
#define PAX_CONFORMANCE_CONCAT2(a, b) a##b
#define PAX_CONFORMANCE_CONCAT(a, b) PAX_CONFORMANCE_CONCAT2(a, b)
// At namespace scope in a case file: the primitives its cases cover.
#define PAX_CONFORMANCE_COVERS(...)                                            \
  [[maybe_unused]] const bool PAX_CONFORMANCE_CONCAT(kCovers, __LINE__) = [] { \
    for (const char* p : {__VA_ARGS__}) ::pax::conformance::register_case(p);  \
    return true;                                                               \
  }()
#define PAX_CONFORMANCE_DERIVATIVES(...)                                                 \
  [[maybe_unused]] const bool PAX_CONFORMANCE_CONCAT(kDerivatives, __LINE__) = [] {      \
    for (const char* p : {__VA_ARGS__}) ::pax::conformance::register_derivative_case(p); \
    return true;                                                                         \
  }()

// Runs `check(device, mode)` on every device under test and mode, with the
// pair named in failures.
void for_each_device_and_mode(const std::function<void(Device, Mode)>& check);

}  // namespace pax::conformance
