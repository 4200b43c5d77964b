// The kernel calling convention shared by every backend: raw views of the
// operands and of the preallocated results, plus the primitive's Params.
// Kernels never allocate their results and never see Arrays, so that eager
// execution and compiled executables (with planned buffers) call them alike.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "pax/core/shape.h"
#include "pax/ir/params.h"

namespace pax {

struct TensorView {
  void* data = nullptr;  // inputs are read-only; outputs are written
  const Shape* shape = nullptr;
  DType dtype = DType::f32;
  // An output's element strides when it is to be written in another layout
  // than row-major (the compiler folds a transpose of a matmul's result into
  // the matmul this way); null: row-major. Only dot_general's kernel is
  // given them.
  const std::vector<int64_t>* strides = nullptr;

  int64_t numel() const { return shape->numel(); }
  int64_t rank() const { return shape->rank(); }
  int64_t dim(int64_t i) const { return (*shape)[i]; }
  size_t nbytes() const { return size_t(numel()) * itemsize(dtype); }
  template <class T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

using KernelFn = void (*)(const Params& params, std::span<const TensorView> in, std::span<const TensorView> out);

}  // namespace pax
