// dot_general's GEMM plans (gemm_plan.h) run by cuBLASLt on a CUDA stream.
//
// libcublasLt is opened with dlopen when the first product runs, not
// linked: linked, its loading would add tens of milliseconds to the start of
// every program, GPU or not. The few functions used are resolved into a
// table once. Each device has its cuBLASLt handle; descriptors and the
// algorithm cuBLASLt's heuristic picks are cached per call layout, dtypes
// and operand alignment. Products accumulate in f32 (f64 for f64), in TF32
// only where the plan says so.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pax/backend/cuda/gemm_plan.h"
#include "pax/backend/kernel.h"
#include "pax/core/buffer.h"

namespace pax::cuda {

// Device memory of at least `nbytes` for cuBLASLt's workspace, valid until
// the work queued on the stream has run.
using GemmWorkspace = std::function<void*(size_t nbytes)>;

// The most workspace an algorithm may ask for.
inline constexpr size_t kGemmWorkspaceBytes = size_t(32) << 20;

struct CublasLtLibrary {
  std::string path;                  // as dlopen found it: "libcublasLt.so.13" or a full path
  size_t version = 0;                // cublasLtGetVersion(): 130100 for 13.1.0
  std::vector<std::string> symbols;  // the functions resolved
};

// libcublasLt of the CUDA major version paxcc is built with, loaded once
// (thread-safe) with every function the products call. Throws pax::Error
// naming the library and what dlopen said, or the missing symbol.
const CublasLtLibrary& cublaslt_library();

// dlopen of `library` (by the loader's search, then from the directory of
// the CUDA runtime in use) and dlsym of each of `names`, in order. The
// library stays loaded. Throws pax::Error naming the library, what needs it
// (`needed_for`: "matmuls") and, for a missing function, the symbol.
std::vector<void*> load_symbols(const std::string& library, const std::vector<std::string>& names,
                                std::string* loaded_path = nullptr, const char* needed_for = "matmuls");

// Runs `plan` on `stream` (a cudaStream_t; null: the default stream) of
// CUDA device `device`: the product for a gemm plan, zeros over the output
// for a zeros plan, nothing for an empty one; an unsupported plan throws.
// `lhs` and `rhs` are the operands as the plan reads them (after its copies:
// transpose(x, perm) contiguous), `out` the output or, where the plan has an
// out_perm, its contiguous temporary. `workspace` is asked for at most
// kGemmWorkspaceBytes, and only where the chosen algorithm needs some.
void run_gemm_plan(const GemmPlan& plan, int device, void* stream, const void* lhs, const void* rhs, void* out,
                   const GemmWorkspace& workspace);

// A workspace from a kernel context's scratch; the buffers it hands out go
// into `keep`, which the caller holds until the product has run.
GemmWorkspace context_workspace(const KernelContext& ctx, std::vector<std::shared_ptr<Buffer>>& keep);

// The number of call layouts whose algorithm has been chosen (heuristic
// queries made) in this process.
size_t gemm_algorithms_cached();

}  // namespace pax::cuda
