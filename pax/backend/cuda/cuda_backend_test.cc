// The CUDA backend's table: registered on every machine; where a GPU is
// present, arrays round-trip through its memory, copies and events, and a
// traced call's steps are timed on its stream.
#include "pax/backend/cuda/cuda_backend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "pax/backend/cuda/cuda_devices.h"
#include "pax/backend/cuda/cuda_kernels.h"
#include "pax/core/device_put.h"
#include "pax/core/trace.h"
#include "pax/api/transforms.h"
#include "pax/ops/lax.h"
#include "pax/ops/nn.h"
#include "pax/ops/numpy.h"
#include "pax/testing/testing.h"

namespace pax::cuda {
namespace {

const Device kCuda{DeviceKind::cuda, 0};

TEST(CudaBackend, RegisteredEvenWithoutADevice) {
  const Backend* b = find_backend(DeviceKind::cuda);
  ASSERT_NE(b, nullptr);
  EXPECT_STREQ(b->name, "cuda");
  EXPECT_FALSE(b->memory.host_accessible);
  EXPECT_EQ(b->memory.device_count(), device_count());
  if (device_count() > 0) return;
  EXPECT_EQ(absence_reason().rfind("no CUDA device", 0), 0u) << absence_reason();
  EXPECT_PAX_ERROR(devices("cuda"), "no 'cuda' device is present");
  EXPECT_PAX_ERROR(device_state(0), "cuda:0 is not present; CUDA devices: 0 (no CUDA device");
  EXPECT_NE(device_report().find("cuda     no CUDA device"), std::string::npos) << device_report();
}

TEST(CudaBackend, KernelFilesRegisterTheirKernels) {
  EXPECT_NE(cuda_kernel(Prim::iota), nullptr);
  EXPECT_PAX_ERROR(register_cuda_kernels({{Prim::iota, cuda_kernel(Prim::iota)}}), "a second kernel for iota");
}

TEST(CudaBackend, IotaOnTheDevice) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const DefaultDeviceScope on(kCuda);
  for (DType dt : {DType::f32, DType::bf16, DType::i32}) {
    const Array y = lax::iota(dt, {3, 4}, 1);
    EXPECT_EQ(y.device(), kCuda);
    EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3})) << dtype_name(dt);
  }
}

TEST(CudaBackend, DotGeneralMatchesTheCpu) {
  EXPECT_NE(cuda_kernel(Prim::dot_general), nullptr);
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Array x = testing::random_array(Shape{4, 8, 16}, DType::f32, 1),
              w = testing::random_array(Shape{16, 8}, DType::f32, 2);
  const Array want = matmul(x, w), want_t = matmul(transpose(x, Ints{0, 2, 1}), x);
  const Array xs = device_put(x, kCuda), ws = device_put(w, kCuda);
  EXPECT_TRUE(testing::all_close(matmul(xs, ws), want, 1e-5, 1e-5));
  EXPECT_TRUE(testing::all_close(matmul(transpose(xs, Ints{0, 2, 1}), xs), want_t, 1e-5, 1e-5));
}

TEST(CudaBackend, JitRunsFusedKernelsWithTheCpusResults) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Array x = testing::random_array(Shape{64, 300}, DType::f32, 3),
              w = testing::random_array(Shape{300, 32}, DType::f32, 4);
  auto f = [](const Array& a, const Array& b) { return nn::softmax(tanh(matmul(a, b)) * 2.0 + 1.0, -1); };
  const Array want = jit(f)(x, w);
  const Array got = jit(f)(device_put(x, kCuda), device_put(w, kCuda));
  EXPECT_EQ(got.device(), kCuda);
  EXPECT_TRUE(testing::all_close(got, want, 1e-5, 1e-6));
}

// While a trace is recorded, a jitted call's steps are timed on the stream:
// spans on the track "cuda:0 stream", the product among them, within the
// host's span of the call and not overlapping one another.
TEST(CudaBackend, TracedStepsAreTimedOnTheStream) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Array x = device_put(testing::random_array(Shape{256, 512}, DType::f32, 5), kCuda),
              w = device_put(testing::random_array(Shape{512, 256}, DType::f32, 6), kCuda);
  auto f = [](const Array& a, const Array& b) { return tanh(matmul(a, b)) * 2.0; };
  auto g = jit(f);
  device_get(g(x, w));  // compiled (its generated kernels may still be building: then equation by equation)
  trace::start();
  const double before = trace::now_us();
  device_get(g(x, w));
  const double after = trace::now_us();
  const nlohmann::json doc = nlohmann::json::parse(trace::stop("test"));
  std::map<int, std::string> names;
  for (const auto& e : doc.at("traceEvents"))
    if (e.at("ph") == "M" && e.at("name") == "thread_name")
      names[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
  std::vector<std::pair<double, double>> spans;
  bool product = false;
  for (const auto& e : doc.at("traceEvents")) {
    if (e.at("ph") != "X" || names[e.at("tid").get<int>()] != "cuda:0 stream") continue;
    spans.push_back({e.at("ts").get<double>(), e.at("dur").get<double>()});
    product |= e.at("cat") == "gemm";
  }
  ASSERT_FALSE(spans.empty()) << doc.dump();
  EXPECT_TRUE(product) << doc.dump();
  std::sort(spans.begin(), spans.end());
  for (size_t i = 0; i < spans.size(); ++i) {
    EXPECT_GE(spans[i].first, before - 50.0);
    EXPECT_LE(spans[i].first + spans[i].second, after + 50.0);
    if (i > 0) EXPECT_GE(spans[i].first + 1.0, spans[i - 1].first + spans[i - 1].second);  // one stream: in order
  }
}

TEST(CudaBackend, ArraysRoundTripThroughDeviceMemory) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  std::vector<float> host(3 << 20);  // larger than one staging buffer
  std::iota(host.begin(), host.end(), -5.0f);
  const Array x = from_host(host.data(), Shape{int64_t(host.size())}, DType::f32);
  const Array on_gpu = device_put(x, kCuda);
  EXPECT_EQ(on_gpu.device(), kCuda);
  EXPECT_EQ(on_gpu.to_vector<float>(), host);
  const Array copied = device_put(on_gpu, kCuda);  // a device-to-device copy
  EXPECT_EQ(device_get(Tree(copied)).leaf().to_vector<float>(), host);
  const Backend& b = cuda_backend();
  const uint64_t e = b.record_event(0);
  b.wait_event(0, e);
  b.wait_event(0, e);  // a second wait returns at once
  b.synchronize(0);
  EXPECT_NE(device_report().find("cuda:0   "), std::string::npos);
}

TEST(CudaBackend, OutOfMemoryNamesSizeAndPurpose) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const AllocationPurpose purpose("a test's huge buffer");
  EXPECT_PAX_ERROR(Buffer::allocate_on(kCuda, size_t(1) << 50), "for a test's huge buffer");
}

}  // namespace
}  // namespace pax::cuda
