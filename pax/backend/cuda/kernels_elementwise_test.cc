// The eager elementwise kernels on CUDA: every elementwise primitive, in
// every dtype its shape rule takes, renders a one-equation kernel that NVRTC
// compiles for sm_80 and sm_90, or is refused by name; on a device, results
// equal the CPU's, those of dtypes the renderer has no loops for (computed
// on the host) too.
#include <gtest/gtest.h>

#include <set>

#include "pax/backend/cuda/cuda_devices.h"
#include "pax/backend/cuda/cuda_kernels.h"
#include "pax/backend/cuda/cuda_kernels_source.h"
#include "pax/backend/cuda/nvrtc_compiler.h"
#include "pax/core/device_put.h"
#include "pax/ops/numpy.h"
#include "pax/prims/registry.h"
#include "pax/testing/testing.h"

namespace pax::cuda {
namespace {

Params params_of(Prim p, DType dtype) {
  switch (p) {
    case Prim::convert_element_type:
      return {{"new_dtype", dtype == DType::f32 ? DType::bf16 : DType::f32}, {"weak_type", false}};
    case Prim::integer_pow: return {{"y", int64_t(3)}};
    case Prim::round: return {{"rounding_method", int64_t(1)}};
    default: return {};
  }
}

TEST(CudaElementwise, EveryPrimitiveRendersAndCompilesOrIsRefusedByName) {
  const Shape shape{37};
  int compiled = 0, refused = 0;
  std::set<std::string> sources;
  for (int k = 0; k < kNumPrims; ++k) {
    const Prim p = Prim(k);
    if (prim_kernel(p).kind == ElementwiseKernel::Kind::none || p == Prim::select_n) continue;
    ASSERT_NE(cuda_kernel(p), nullptr) << prim_name(p);
    for (DType dt : {DType::f32, DType::bf16, DType::i32, DType::bool_}) {
      const Params params = params_of(p, dt);
      const std::vector<AVal> in_avals(size_t(prim_arity(p)), AVal{shape, dt});
      std::vector<AVal> out_avals;
      try {
        out_avals = infer_avals(p, in_avals, params);
      } catch (const Error&) {
        continue;  // the primitive does not take this dtype
      }
      std::vector<TensorView> in, out;
      for (const AVal& a : in_avals) in.push_back(TensorView{nullptr, &a.shape, a.dtype});
      for (const AVal& a : out_avals) out.push_back(TensorView{nullptr, &a.shape, a.dtype});
      try {
        const CudaKernelSource src = elementwise_kernel_source(p, params, in, out);
        if (!sources.insert(src.source).second) continue;
        for (int arch : {80, 90}) EXPECT_FALSE(compile_cubin(src.source, arch)->bytes.empty());
        ++compiled;
      } catch (const Error& e) {
        // Refused: the message names the primitive and what the renderer lacks.
        EXPECT_NE(std::string(e.what()).find(std::string(prim_name(p)) + " on cuda: no CUDA kernel"), std::string::npos)
            << e.what();
        EXPECT_TRUE(dt == DType::bool_ || dt == DType::i32)
            << prim_name(p) << " " << dtype_name(dt) << ": " << e.what();
        ++refused;
      }
    }
  }
  std::printf("elementwise kernels: %d compiled for sm_80 and sm_90, %d dtype cases refused\n", compiled, refused);
  EXPECT_GT(compiled, 80);
}

TEST(CudaElementwise, ResultsEqualTheCpu) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Device gpu{DeviceKind::cuda, 0};
  const Array x = testing::random_array(Shape{1001}, DType::f32, 1, -3, 3);
  const Array y = testing::random_array(Shape{1001}, DType::f32, 2, -3, 3);
  const Array xs = device_put(x, gpu), ys = device_put(y, gpu);
  EXPECT_TRUE(testing::all_close(xs * ys + xs, x * y + x, 0, 0));
  EXPECT_TRUE(testing::all_close(maximum(xs, ys), maximum(x, y), 0, 0));
  EXPECT_TRUE(testing::all_close(exp(xs), exp(x), 4e-7, 0));
  EXPECT_TRUE(testing::all_close(tanh(xs.astype(DType::bf16)), tanh(x.astype(DType::bf16)), 8e-3, 0));
  EXPECT_EQ((xs < ys).to_vector<bool>(), (x < y).to_vector<bool>());
}

// f64, f16, i64, u8 and u32 operands have no generated loops: the CPU's
// kernels compute them on host copies, so the results are the CPU's bits.
TEST(CudaElementwise, DtypesWithoutLoopsRunOnTheHostWithTheCpusBits) {
  if (device_count() == 0) GTEST_SKIP() << "no CUDA device";
  const Device gpu{DeviceKind::cuda, 0};
  for (DType dt : {DType::f64, DType::f16, DType::i64, DType::u8, DType::u32}) {
    SCOPED_TRACE(dtype_name(dt));
    const Array x = testing::random_array(Shape{257}, dt, 3, 1, 9);
    const Array y = testing::random_array(Shape{257}, dt, 4, 1, 9);
    const Array xs = device_put(x, gpu), ys = device_put(y, gpu);
    const Array got = xs * ys + maximum(xs, ys);
    EXPECT_EQ(got.device(), gpu);
    EXPECT_EQ(testing::host_bytes(device_get(got)), testing::host_bytes(x * y + maximum(x, y)));
    EXPECT_EQ((xs < ys).to_vector<bool>(), (x < y).to_vector<bool>());
  }
}

}  // namespace
}  // namespace pax::cuda
