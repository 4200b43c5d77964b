// cuBLASLt behind dlopen: the function table, per-device handles, and the
// cache of descriptors and chosen algorithms that runs a GemmPlan with no
// heuristic query after its first call.
#include "pax/backend/cuda/cublaslt_gemm.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <array>
#include <map>
#include <mutex>

#include "pax/backend/cuda/cuda_check.h"
#include "pax/backend/cuda/cuda_devices.h"
#include "pax/core/error.h"

namespace pax::cuda {
namespace {

// The cuBLASLt functions the products call.
#define PAX_CUBLASLT_FUNCTIONS(X)         \
  X(cublasLtCreate)                       \
  X(cublasLtGetVersion)                   \
  X(cublasLtGetStatusName)                \
  X(cublasLtGetStatusString)              \
  X(cublasLtMatmul)                       \
  X(cublasLtMatmulDescCreate)             \
  X(cublasLtMatmulDescDestroy)            \
  X(cublasLtMatmulDescSetAttribute)       \
  X(cublasLtMatrixLayoutCreate)           \
  X(cublasLtMatrixLayoutDestroy)          \
  X(cublasLtMatrixLayoutSetAttribute)     \
  X(cublasLtMatmulPreferenceCreate)       \
  X(cublasLtMatmulPreferenceDestroy)      \
  X(cublasLtMatmulPreferenceSetAttribute) \
  X(cublasLtMatmulAlgoGetHeuristic)

// The table of functions, typed from cublasLt.h (decltype only: nothing
// here refers to the library's symbols, so it is not linked).
struct Api {
#define PAX_CUBLASLT_MEMBER(name) decltype(&::name) name = nullptr;
  PAX_CUBLASLT_FUNCTIONS(PAX_CUBLASLT_MEMBER)
#undef PAX_CUBLASLT_MEMBER
  CublasLtLibrary library;
};

const std::string kLibrary = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);

const Api& api() {
  static const Api table = [] {
    Api a;
    std::vector<std::string> names;
#define PAX_CUBLASLT_NAME(name) names.push_back(#name);
    PAX_CUBLASLT_FUNCTIONS(PAX_CUBLASLT_NAME)
#undef PAX_CUBLASLT_NAME
    const std::vector<void*> fns = load_symbols(kLibrary, names, &a.library.path);
    size_t i = 0;
#define PAX_CUBLASLT_ASSIGN(name) a.name = reinterpret_cast<decltype(a.name)>(fns[i++]);
    PAX_CUBLASLT_FUNCTIONS(PAX_CUBLASLT_ASSIGN)
#undef PAX_CUBLASLT_ASSIGN
    a.library.version = a.cublasLtGetVersion();
    a.library.symbols = names;
    return a;
  }();
  return table;
}

void check_status(cublasStatus_t status, const char* call) {
  if (status == CUBLAS_STATUS_SUCCESS) return;
  PAX_FAIL("cuBLASLt call ", call, " failed: ", api().cublasLtGetStatusName(status), " (",
           api().cublasLtGetStatusString(status), ")");
}
#define PAX_CUBLASLT_CHECK(call) check_status((call), #call)

// One cuBLASLt handle per device, created on first use and kept for the
// process (destroying it at exit would race the driver's own teardown).
cublasLtHandle_t handle(int device) {
  static std::mutex mu;
  static std::vector<cublasLtHandle_t> handles;
  std::lock_guard<std::mutex> lock(mu);
  const int count = device_count();
  PAX_CHECK(device >= 0 && device < count, "cuBLASLt: cuda:", device, " is not present; CUDA devices: ", count);
  if (handles.size() < size_t(count)) handles.resize(size_t(count), nullptr);
  if (!handles[size_t(device)]) {
    DeviceGuard guard(device);
    PAX_CUBLASLT_CHECK(api().cublasLtCreate(&handles[size_t(device)]));
  }
  return handles[size_t(device)];
}

cudaDataType_t data_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return CUDA_R_32F;
    case DType::bf16: return CUDA_R_16BF;
    case DType::f16: return CUDA_R_16F;
    case DType::f64: return CUDA_R_64F;
    default: PAX_FAIL("cuBLASLt: no data type for ", dtype_short_name(dtype), " (f32, bf16, f16 or f64)");
  }
}

cublasComputeType_t compute_type(GemmCompute c) {
  switch (c) {
    case GemmCompute::f32: return CUBLAS_COMPUTE_32F;
    case GemmCompute::tf32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case GemmCompute::f64: return CUBLAS_COMPUTE_64F;
  }
  return CUBLAS_COMPUTE_32F;
}

// The largest power of two (up to 256, cuBLASLt's default requirement) that
// divides every address a matrix is read or written at.
uint32_t alignment(const void* base, int64_t stride, int64_t outer_stride, size_t item) {
  uint64_t bits = uint64_t(reinterpret_cast<uintptr_t>(base)) | uint64_t(stride) * item | uint64_t(outer_stride) * item;
  uint32_t a = 1;
  while (a < 256 && (bits & a) == 0) a <<= 1;
  return a;
}

// The descriptors of one call layout and the algorithm chosen for it.
// Cached for the process: they are host objects, read-only once built.
struct CallDesc {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace_bytes = 0;
};

using CallKey = std::array<int64_t, 19>;

cublasLtMatrixLayout_t layout(DType dtype, int64_t rows, int64_t cols, int64_t ld, int64_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  PAX_CUBLASLT_CHECK(api().cublasLtMatrixLayoutCreate(&l, data_type(dtype), uint64_t(rows), uint64_t(cols), ld));
  const int32_t count = int32_t(batch);
  PAX_CUBLASLT_CHECK(
      api().cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
  PAX_CUBLASLT_CHECK(
      api().cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  return l;
}

struct CallCache {
  std::mutex mu;
  std::map<CallKey, CallDesc> calls;
};
CallCache& call_cache() {
  static CallCache* cache = new CallCache;  // never destroyed: its descriptors live for the process
  return *cache;
}

const CallDesc& call_desc(const GemmPlan& p, int device, cublasLtHandle_t h, const std::array<uint32_t, 3>& align) {
  std::mutex& mu = call_cache().mu;
  std::map<CallKey, CallDesc>& cache = call_cache().calls;
  const CallKey key{device,
                    int64_t(p.in_dtype),
                    int64_t(p.out_dtype),
                    int64_t(p.compute),
                    p.trans_a,
                    p.trans_b,
                    p.m,
                    p.n,
                    p.k,
                    p.lda,
                    p.ldb,
                    p.ldc,
                    p.batch,
                    p.stride_a,
                    p.stride_b,
                    p.stride_c,
                    align[0],
                    align[1],
                    align[2]};
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = cache.find(key); it != cache.end()) return it->second;

  CallDesc d;
  const bool f64 = p.compute == GemmCompute::f64;
  PAX_CUBLASLT_CHECK(api().cublasLtMatmulDescCreate(&d.op, compute_type(p.compute), f64 ? CUDA_R_64F : CUDA_R_32F));
  const int32_t ta = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  PAX_CUBLASLT_CHECK(api().cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  PAX_CUBLASLT_CHECK(api().cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  // The matrices as stored (column-major): op(A) is m x k, op(B) k x n.
  d.a = p.trans_a ? layout(p.in_dtype, p.k, p.m, p.lda, p.batch, p.stride_a)
                  : layout(p.in_dtype, p.m, p.k, p.lda, p.batch, p.stride_a);
  d.b = p.trans_b ? layout(p.in_dtype, p.n, p.k, p.ldb, p.batch, p.stride_b)
                  : layout(p.in_dtype, p.k, p.n, p.ldb, p.batch, p.stride_b);
  d.c = layout(p.out_dtype, p.m, p.n, p.ldc, p.batch, p.stride_c);

  cublasLtMatmulPreference_t pref = nullptr;
  PAX_CUBLASLT_CHECK(api().cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t max_workspace = kGemmWorkspaceBytes;
  api().cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
                                             sizeof(max_workspace));
  const std::array<cublasLtMatmulPreferenceAttributes_t, 4> align_attrs = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  const std::array<uint32_t, 4> aligns = {align[0], align[1], align[2], align[2]};
  for (size_t i = 0; i < 4; ++i) {
    api().cublasLtMatmulPreferenceSetAttribute(pref, align_attrs[i], &aligns[i], sizeof(uint32_t));
  }
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  const cublasStatus_t status =
      api().cublasLtMatmulAlgoGetHeuristic(h, d.op, d.a, d.b, d.c, d.c, pref, 1, &result, &found);
  api().cublasLtMatmulPreferenceDestroy(pref);
  if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
    api().cublasLtMatmulDescDestroy(d.op);
    for (cublasLtMatrixLayout_t l : {d.a, d.b, d.c}) api().cublasLtMatrixLayoutDestroy(l);
  }
  check_status(status, "cublasLtMatmulAlgoGetHeuristic");
  PAX_CHECK(found > 0, "cuBLASLt has no algorithm for ", p.str(), " (operand alignment ", align[0], ", ", align[1],
            ", ", align[2], " bytes)");
  d.algo = result.algo;
  d.workspace_bytes = result.workspaceSize;
  return cache.emplace(key, d).first->second;
}

}  // namespace

std::vector<void*> load_symbols(const std::string& library, const std::vector<std::string>& names,
                                std::string* loaded_path, const char* needed_for) {
  std::string path = library;
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::string why = lib ? "" : dlerror();
  if (!lib) {
    // Beside the CUDA runtime this process uses (the toolkit's directory
    // where the loader's search path does not name it).
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&cudaGetDeviceCount), &info) && info.dli_fname) {
      const std::string runtime = info.dli_fname;
      const size_t slash = runtime.rfind('/');
      if (slash != std::string::npos) {
        path = runtime.substr(0, slash + 1) + library;
        lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!lib) why += "; " + std::string(dlerror());
      }
    }
  }
  PAX_CHECK(lib, "cannot load ", library, " (", why, "); the CUDA backend's ", needed_for,
            " need it: install it from CUDA ", CUBLAS_VER_MAJOR, " or put its directory on LD_LIBRARY_PATH");
  std::vector<void*> out;
  for (const std::string& name : names) {
    dlerror();
    void* fn = dlsym(lib, name.c_str());
    PAX_CHECK(fn, "cannot load ", library, " (", path, "): it has no symbol ", name, "; the one of CUDA ",
              CUBLAS_VER_MAJOR, " is needed");
    out.push_back(fn);
  }
  if (loaded_path) *loaded_path = path;
  return out;
}

const CublasLtLibrary& cublaslt_library() { return api().library; }

void run_gemm_plan(const GemmPlan& plan, int device, void* stream, const void* lhs, const void* rhs, void* out,
                   const GemmWorkspace& workspace) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  switch (plan.kind) {
    case GemmPlan::Kind::empty: return;
    case GemmPlan::Kind::zeros: {
      DeviceGuard guard(device);
      PAX_CUDA_CHECK(cudaMemsetAsync(out, 0, size_t(plan.out_extent) * itemsize(plan.out_dtype), s));
      return;
    }
    case GemmPlan::Kind::unsupported: PAX_FAIL("dot_general on cuBLASLt: ", plan.str());
    case GemmPlan::Kind::gemm: break;
  }
  const cublasLtHandle_t h = handle(device);
  DeviceGuard guard(device);
  const void* a = plan.swap ? rhs : lhs;
  const void* b = plan.swap ? lhs : rhs;
  const size_t in_item = itemsize(plan.in_dtype), out_item = itemsize(plan.out_dtype);
  const std::array<uint32_t, 3> align = {alignment(a, plan.stride_a, plan.outer_stride_a, in_item),
                                         alignment(b, plan.stride_b, plan.outer_stride_b, in_item),
                                         alignment(out, plan.stride_c, plan.outer_stride_c, out_item)};
  const CallDesc& d = call_desc(plan, device, h, align);
  void* ws = d.workspace_bytes > 0 ? workspace(d.workspace_bytes) : nullptr;
  PAX_CHECK(d.workspace_bytes == 0 || ws, "dot_general on cuBLASLt: no workspace of ", d.workspace_bytes, " bytes for ",
            plan.str());
  const float alpha32 = 1.0f, beta32 = 0.0f;
  const double alpha64 = 1.0, beta64 = 0.0;
  const bool f64 = plan.compute == GemmCompute::f64;
  const void* alpha = f64 ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = f64 ? static_cast<const void*>(&beta64) : &beta32;
  for (int64_t i = 0; i < plan.outer; ++i) {
    const char* ai = static_cast<const char*>(a) + size_t(i * plan.outer_stride_a) * in_item;
    const char* bi = static_cast<const char*>(b) + size_t(i * plan.outer_stride_b) * in_item;
    char* ci = static_cast<char*>(out) + size_t(i * plan.outer_stride_c) * out_item;
    // beta = 0: C is not read; D is written in place of it.
    PAX_CUBLASLT_CHECK(api().cublasLtMatmul(h, d.op, alpha, ai, d.a, bi, d.b, beta, ci, d.c, ci, d.c, &d.algo, ws,
                                            d.workspace_bytes, s));
  }
}

GemmWorkspace context_workspace(const KernelContext& ctx, std::vector<std::shared_ptr<Buffer>>& keep) {
  return [&ctx, &keep](size_t nbytes) -> void* {
    PAX_CHECK(nbytes <= kGemmWorkspaceBytes, "cuBLASLt asked for a workspace of ", nbytes, " bytes, more than the ",
              kGemmWorkspaceBytes, " allowed");
    keep.push_back(ctx.allocate_scratch(nbytes));
    return keep.back()->data();
  };
}

size_t gemm_algorithms_cached() {
  std::lock_guard<std::mutex> lock(call_cache().mu);
  return call_cache().calls.size();
}

}  // namespace pax::cuda
