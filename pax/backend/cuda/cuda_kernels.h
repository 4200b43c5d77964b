// The CUDA backend's kernels, by primitive: each queues its work on the
// stream of the KernelContext it is given (pax/backend/kernel.h). The files
// that hold them (*.cu) register them when the library loads:
//
//   [[maybe_unused]] const bool kRegistered =
//       register_cuda_kernels({{Prim::iota, iota_kernel}});
#pragma once

#include <deque>
#include <initializer_list>
#include <memory>
#include <utility>
#include <vector>

#include "pax/backend/kernel.h"
#include "pax/ir/jaxpr.h"
#include "pax/ir/prims.h"

namespace pax::cuda {

// The kernel of `prim` on a CUDA device, or nullptr where there is none yet
// (eager execution then names the primitive and the backend).
KernelFn cuda_kernel(Prim prim);

// Adds kernels to the table (a primitive registered twice is a pax::Error);
// returns true.
bool register_cuda_kernels(std::initializer_list<std::pair<Prim, KernelFn>> kernels);

// out = transpose(in, perm) on ctx's stream (out contiguous, of shape
// in[perm]): the transpose primitive's kernel, for other kernels' copies.
void transpose_into(const KernelContext& ctx, const TensorView& in, const TensorView& out,
                    const std::vector<int64_t>& perm);

// out[offset(i, out_strides)] = in[i] for every row-major index i of `in`
// (contiguous) on ctx's stream: writing a result into a strided layout.
void copy_into_strided(const KernelContext& ctx, const TensorView& in, void* out,
                       const std::vector<int64_t>& out_strides);

// Runs the CPU's kernel of `prim` on host copies of the operands and copies
// its results back, waiting for ctx's stream: for operands of dtypes the
// device's kernels do not cover.
void run_on_host(Prim prim, const KernelContext& ctx, const Params& params, std::span<const TensorView> in,
                 std::span<const TensorView> out);

// Runs `prim`'s kernel on ctx's stream: for kernels made of other kernels.
void run_cuda_kernel(Prim prim, const KernelContext& ctx, const Params& params, std::initializer_list<TensorView> in,
                     std::initializer_list<TensorView> out);

// The temporaries of one kernel call (KernelTemporaries) as contiguous
// arrays with their shapes.
class KernelScratch {
 public:
  explicit KernelScratch(const KernelContext& ctx) : ctx_(ctx), temps_(ctx) {}
  TensorView allocate(const std::vector<int64_t>& dims, DType dtype);
  // `x` transposed by `perm` (shape x[perm]).
  TensorView transposed(const TensorView& x, const std::vector<int64_t>& perm);
  // `x` converted to `dtype` (convert_element_type's kernel).
  TensorView converted(const TensorView& x, DType dtype);
  // The same contiguous elements seen with other dims (no copy).
  TensorView reshaped(const TensorView& x, const std::vector<int64_t>& dims);
  // The buffers handed out so far (for a workspace that must live as long).
  std::vector<std::shared_ptr<Buffer>>& buffers() { return temps_.buffers(); }

 private:
  const Shape* keep_shape(const std::vector<int64_t>& dims);
  const KernelContext& ctx_;
  KernelTemporaries temps_;
  std::deque<Shape> shapes_;  // stable addresses for the views
};

// The generated kernel an elementwise primitive runs eagerly on operands
// like `in` into `out` (kernels_elementwise.cc); pax::Error naming what the
// renderer lacks where it has no kernel for them.
struct CudaKernelSource;  // cuda_kernels_source.h
CudaKernelSource elementwise_kernel_source(Prim prim, const Params& params, std::span<const TensorView> in,
                                           std::span<const TensorView> out);

}  // namespace pax::cuda
