// Shape (the dimensions of an Array) and AVal (shape + dtype + weak flag: what
// is known of an array without its values, as in JAX's ShapedArray).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <span>
#include <string>
#include <vector>

#include "pax/core/dtype.h"

namespace pax {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}
  explicit Shape(std::span<const int64_t> dims) : dims_(dims.begin(), dims.end()) {}

  int64_t rank() const { return int64_t(dims_.size()); }
  int64_t operator[](int64_t i) const { return dims_[size_t(i)]; }
  int64_t& operator[](int64_t i) { return dims_[size_t(i)]; }
  int64_t numel() const;  // product of dims; 1 for rank 0
  const std::vector<int64_t>& dims() const { return dims_; }
  std::vector<int64_t>& dims() { return dims_; }
  auto begin() const { return dims_.begin(); }
  auto end() const { return dims_.end(); }
  // Row-major strides in elements.
  std::vector<int64_t> strides() const;
  std::string str() const;  // "(2, 3)" ; "()" for a scalar
  bool operator==(const Shape&) const = default;

 private:
  std::vector<int64_t> dims_;
};

std::ostream& operator<<(std::ostream& os, const Shape& s);

// Abstract value: shape and dtype. `weak_type` marks values that come from C++
// scalar literals and may be promoted to the other operand's dtype.
struct AVal {
  Shape shape;
  DType dtype = DType::f32;
  bool weak_type = false;
  bool operator==(const AVal&) const = default;
  std::string str() const;  // jaxpr style: "f32[2,3]"
};

std::ostream& operator<<(std::ostream& os, const AVal& a);

// Normalises a possibly negative axis against `rank`; throws pax::Error naming
// `op` when it is out of range.
int64_t normalize_axis(int64_t axis, int64_t rank, const char* op);
// Same for a list of axes; also rejects duplicates.
std::vector<int64_t> normalize_axes(std::span<const int64_t> axes, int64_t rank, const char* op);

// Formats a list of integers as "(1, 2, 3)".
std::string ints_str(std::span<const int64_t> v);

}  // namespace pax
