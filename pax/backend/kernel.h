// The kernel calling convention shared by every backend: the execution
// context (device, stream, scratch memory, library handles), raw views of
// the operands and of the preallocated results, plus the primitive's Params.
// Kernels never allocate their results and never see Arrays, so that eager
// execution and compiled executables (with planned buffers) call them alike;
// scratch memory comes from the context.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "pax/core/buffer.h"
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

// What a kernel runs with, besides its operands. On the CPU the stream and
// handles are null and scratch is host memory; a device backend hands its
// stream (cudaStream_t), its library handles (cuBLASLt, cuDNN) and a
// stream-ordered scratch allocator.
struct KernelContext {
  Device device;
  void* stream = nullptr;   // the device's stream, in the device's own type
  void* handles = nullptr;  // the backend's library handles
  // Scratch memory for the kernel's own use, valid until the kernel's work
  // on the stream has run (the buffer is held by the caller of the kernel).
  std::shared_ptr<Buffer> (*scratch)(size_t nbytes, int index) = nullptr;
  std::shared_ptr<Buffer> allocate_scratch(size_t nbytes) const { return scratch(nbytes, device.index); }
};

// The temporaries of one kernel call: scratch buffers from its context, held
// until the holder goes, after the call has queued the work that uses them
// (a device's stream-ordered allocator gives them only to work queued later).
class KernelTemporaries {
 public:
  explicit KernelTemporaries(const KernelContext& ctx) : ctx_(ctx) {}
  void* allocate(size_t nbytes) {
    buffers_.push_back(ctx_.allocate_scratch(nbytes));
    return buffers_.back()->data();
  }
  // n elements of `dtype`.
  void* allocate(int64_t n, DType dtype) { return allocate(size_t(n) * itemsize(dtype)); }
  // The buffers handed out so far (for a library workspace that must live as long).
  std::vector<std::shared_ptr<Buffer>>& buffers() { return buffers_; }

 private:
  const KernelContext& ctx_;
  std::vector<std::shared_ptr<Buffer>> buffers_;
};

// The context of the CPU's kernels (host scratch, no stream).
const KernelContext& host_kernel_context();

using KernelFn = void (*)(const KernelContext& ctx, const Params& params, std::span<const TensorView> in,
                          std::span<const TensorView> out);

}  // namespace pax
