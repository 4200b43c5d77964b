// The cuDNN convolution of a ConvPlan (conv_plan.h) on a CUDA stream.
//
// libcudnn is opened with dlopen at the first convolution, as cuBLASLt is
// (cublaslt_gemm.h): linked, its loading would slow the start of every
// program. It runs cuDNN's convolution API on NHWC tensors; the descriptors
// and the algorithm cuDNN's heuristic picks (deterministic ones only) are
// cached per plan, so a convolution asks the heuristic once.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "pax/backend/cuda/conv_plan.h"
#include "pax/backend/cuda/cublaslt_gemm.h"

namespace pax::cuda {

struct CudnnLibrary {
  std::string path;                  // as dlopen found it: "libcudnn.so.9" or a full path
  size_t version = 0;                // cudnnGetVersion(): 91900 for 9.19.0
  std::vector<std::string> symbols;  // the functions resolved
};

// libcudnn of the major version paxcc is built with, loaded once
// (thread-safe) with every function the convolutions call. Throws pax::Error
// naming the library and what dlopen said, or the missing symbol.
const CudnnLibrary& cudnn_library();

// Runs the convolution of `plan` (kind conv) on `stream` (a cudaStream_t) of
// CUDA device `device`: y (plan.y_dims, NHWC) = conv(x (x_dims, NHWC),
// w (w_dims, OHWI)), all contiguous in plan.compute_dtype. `workspace` is
// asked for what the chosen algorithm needs. Returns false, writing
// nothing, when cuDNN has no deterministic algorithm for these 16-bit
// operands (the caller computes in f32 then); pax::Error for f32 and f64.
bool run_cudnn_convolution(const ConvPlan& plan, int device, void* stream, const void* x, const void* w, void* y,
                           const GemmWorkspace& workspace);

}  // namespace pax::cuda
