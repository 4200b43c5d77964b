// cuDNN behind dlopen: the function table, per-device handles, and the cache
// of descriptors and chosen algorithms that runs a ConvPlan with no
// heuristic query after its first call.
#include "pax/backend/cuda/cudnn_conv.h"

#include <cudnn.h>

#include <climits>
#include <map>
#include <mutex>
#include <tuple>

#include "pax/backend/cuda/cuda_check.h"
#include "pax/backend/cuda/cuda_devices.h"
#include "pax/core/error.h"

namespace pax::cuda {
namespace {

// The cuDNN functions the convolutions call.
#define PAX_CUDNN_FUNCTIONS(X)              \
  X(cudnnCreate)                            \
  X(cudnnGetVersion)                        \
  X(cudnnGetErrorString)                    \
  X(cudnnSetStream)                         \
  X(cudnnCreateTensorDescriptor)            \
  X(cudnnSetTensor4dDescriptor)             \
  X(cudnnCreateFilterDescriptor)            \
  X(cudnnSetFilter4dDescriptor)             \
  X(cudnnCreateConvolutionDescriptor)       \
  X(cudnnSetConvolution2dDescriptor)        \
  X(cudnnSetConvolutionGroupCount)          \
  X(cudnnSetConvolutionMathType)            \
  X(cudnnGetConvolutionForwardAlgorithm_v7) \
  X(cudnnConvolutionForward)

// The table of functions, typed from cudnn.h (decltype only: the library is
// not linked).
struct Api {
#define PAX_CUDNN_MEMBER(name) decltype(&::name) name = nullptr;
  PAX_CUDNN_FUNCTIONS(PAX_CUDNN_MEMBER)
#undef PAX_CUDNN_MEMBER
  CudnnLibrary library;
};

const std::string kLibrary = "libcudnn.so." + std::to_string(CUDNN_MAJOR);

const Api& api() {
  static const Api table = [] {
    Api a;
    std::vector<std::string> names;
#define PAX_CUDNN_NAME(name) names.push_back(#name);
    PAX_CUDNN_FUNCTIONS(PAX_CUDNN_NAME)
#undef PAX_CUDNN_NAME
    const std::vector<void*> fns = load_symbols(kLibrary, names, &a.library.path, "convolutions");
    size_t i = 0;
#define PAX_CUDNN_ASSIGN(name) a.name = reinterpret_cast<decltype(a.name)>(fns[i++]);
    PAX_CUDNN_FUNCTIONS(PAX_CUDNN_ASSIGN)
#undef PAX_CUDNN_ASSIGN
    a.library.version = a.cudnnGetVersion();
    a.library.symbols = names;
    return a;
  }();
  return table;
}

void check_status(cudnnStatus_t status, const char* call) {
  if (status == CUDNN_STATUS_SUCCESS) return;
  PAX_FAIL("cuDNN call ", call, " failed: ", api().cudnnGetErrorString(status));
}
#define PAX_CUDNN_CHECK(call) check_status((call), #call)

// One cuDNN handle per device, created on first use and kept for the
// process; `mu` serialises the calls that set its stream and run on it.
struct DeviceHandle {
  cudnnHandle_t handle = nullptr;
  std::mutex mu;
};

DeviceHandle& handle(int device) {
  static std::mutex mu;
  static std::map<int, DeviceHandle> handles;
  std::lock_guard<std::mutex> lock(mu);
  const int count = device_count();
  PAX_CHECK(device >= 0 && device < count, "cuDNN: cuda:", device, " is not present; CUDA devices: ", count);
  DeviceHandle& h = handles[device];
  if (!h.handle) {
    DeviceGuard guard(device);
    PAX_CUDNN_CHECK(api().cudnnCreate(&h.handle));
  }
  return h;
}

cudnnDataType_t data_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return CUDNN_DATA_FLOAT;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    case DType::f16: return CUDNN_DATA_HALF;
    case DType::f64: return CUDNN_DATA_DOUBLE;
    default: PAX_FAIL("cuDNN: no data type for ", dtype_short_name(dtype), " (f32, bf16, f16 or f64)");
  }
}

int as_int(int64_t v, const ConvPlan& plan) {
  PAX_CHECK(v <= INT_MAX, "conv_general_dilated on cuDNN: a size of ", v, " exceeds cuDNN's int sizes in ", plan.str());
  return int(v);
}

// The descriptors of one plan and the algorithm chosen for it (or none).
// Cached for the process: host objects, read-only once built.
struct CallDesc {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  bool found = false;
  cudnnConvolutionFwdAlgo_t algo{};
  size_t workspace_bytes = 0;
};

// The most workspace an algorithm may ask for.
constexpr size_t kConvWorkspaceBytes = size_t(256) << 20;

const CallDesc& call_desc(const ConvPlan& p, int device, cudnnHandle_t h) {
  static std::mutex mu;
  static std::map<std::tuple<int, std::string>, CallDesc> cache;
  std::lock_guard<std::mutex> lock(mu);
  const auto key = std::make_tuple(device, p.str());
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  const Api& a = api();
  CallDesc d;
  const cudnnDataType_t type = data_type(p.compute_dtype);
  PAX_CUDNN_CHECK(a.cudnnCreateTensorDescriptor(&d.x));
  PAX_CUDNN_CHECK(a.cudnnSetTensor4dDescriptor(d.x, CUDNN_TENSOR_NHWC, type, as_int(p.x_dims[0], p),
                                               as_int(p.x_dims[3], p), as_int(p.x_dims[1], p), as_int(p.x_dims[2], p)));
  PAX_CUDNN_CHECK(a.cudnnCreateTensorDescriptor(&d.y));
  PAX_CUDNN_CHECK(a.cudnnSetTensor4dDescriptor(d.y, CUDNN_TENSOR_NHWC, type, as_int(p.y_dims[0], p),
                                               as_int(p.y_dims[3], p), as_int(p.y_dims[1], p), as_int(p.y_dims[2], p)));
  PAX_CUDNN_CHECK(a.cudnnCreateFilterDescriptor(&d.w));
  PAX_CUDNN_CHECK(a.cudnnSetFilter4dDescriptor(d.w, type, CUDNN_TENSOR_NHWC, as_int(p.w_dims[0], p),
                                               as_int(p.w_dims[3], p), as_int(p.w_dims[1], p), as_int(p.w_dims[2], p)));
  PAX_CUDNN_CHECK(a.cudnnCreateConvolutionDescriptor(&d.conv));
  // 16-bit operands accumulate in f32, as the products do.
  const cudnnDataType_t accumulate = p.compute_dtype == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  PAX_CUDNN_CHECK(a.cudnnSetConvolution2dDescriptor(
      d.conv, as_int(p.pad[0], p), as_int(p.pad[1], p), as_int(p.stride[0], p), as_int(p.stride[1], p),
      as_int(p.dilation[0], p), as_int(p.dilation[1], p), CUDNN_CROSS_CORRELATION, accumulate));
  PAX_CUDNN_CHECK(a.cudnnSetConvolutionGroupCount(d.conv, as_int(p.groups, p)));
  // f32 stays f32 (FMA kernels only: cuDNN's default would allow TF32)
  // unless TF32 was asked for; 16-bit operands use the tensor cores.
  const bool strict_f32 = p.compute_dtype == DType::f32 && p.f32 == F32Matmul::f32;
  const bool sixteen_bit = p.compute_dtype == DType::bf16 || p.compute_dtype == DType::f16;
  const cudnnMathType_t math = strict_f32 ? CUDNN_FMA_MATH : sixteen_bit ? CUDNN_TENSOR_OP_MATH : CUDNN_DEFAULT_MATH;
  PAX_CUDNN_CHECK(a.cudnnSetConvolutionMathType(d.conv, math));

  cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int returned = 0;
  PAX_CUDNN_CHECK(a.cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                           &returned, perf));
  // The heuristic's order is its estimate of speed: the first usable one,
  // deterministic (results must not change from run to run).
  for (int i = 0; i < returned; ++i) {
    const cudnnConvolutionFwdAlgoPerf_t& r = perf[i];
    if (r.status != CUDNN_STATUS_SUCCESS || r.determinism != CUDNN_DETERMINISTIC) continue;
    if (r.memory > kConvWorkspaceBytes) continue;
    d.found = true;
    d.algo = r.algo;
    d.workspace_bytes = r.memory;
    if (!strict_f32) PAX_CUDNN_CHECK(a.cudnnSetConvolutionMathType(d.conv, r.mathType));
    break;
  }
  return cache.emplace(key, d).first->second;
}

}  // namespace

const CudnnLibrary& cudnn_library() { return api().library; }

bool run_cudnn_convolution(const ConvPlan& plan, int device, void* stream, const void* x, const void* w, void* y,
                           const GemmWorkspace& workspace) {
  PAX_CHECK(plan.kind == ConvPlan::Kind::conv, "run_cudnn_convolution: ", plan.str(), " has no convolution");
  DeviceHandle& h = handle(device);
  DeviceGuard guard(device);
  const CallDesc& d = call_desc(plan, device, h.handle);
  if (!d.found) {
    PAX_CHECK(plan.compute_dtype == DType::bf16 || plan.compute_dtype == DType::f16,
              "conv_general_dilated: cuDNN has no deterministic algorithm for ", plan.str());
    return false;
  }
  void* ws = d.workspace_bytes > 0 ? workspace(d.workspace_bytes) : nullptr;
  PAX_CHECK(d.workspace_bytes == 0 || ws, "conv_general_dilated on cuDNN: no workspace of ", d.workspace_bytes,
            " bytes for ", plan.str());
  const float alpha32 = 1.0f, beta32 = 0.0f;
  const double alpha64 = 1.0, beta64 = 0.0;
  const bool f64 = plan.compute_dtype == DType::f64;
  const void* alpha = f64 ? static_cast<const void*>(&alpha64) : &alpha32;
  const void* beta = f64 ? static_cast<const void*>(&beta64) : &beta32;
  std::lock_guard<std::mutex> lock(h.mu);
  PAX_CUDNN_CHECK(api().cudnnSetStream(h.handle, static_cast<cudaStream_t>(stream)));
  PAX_CUDNN_CHECK(api().cudnnConvolutionForward(h.handle, alpha, d.x, x, d.w, w, d.conv, d.algo, ws, d.workspace_bytes,
                                                beta, d.y, y));
  return true;
}

}  // namespace pax::cuda
