// The GPU peak table: datasheet parts and the per-architecture rate.
#include "pax/backend/cuda/cuda_peak.h"

#include <gtest/gtest.h>

#include "pax/testing/testing.h"

namespace pax::cuda {
namespace {

TEST(CudaPeak, DatasheetParts) {
  EXPECT_DOUBLE_EQ(device_peak("NVIDIA H100 80GB HBM3", 90, 132, 1980000, DType::bf16).flops, 989.4e12);
  EXPECT_DOUBLE_EQ(device_peak("NVIDIA H200", 90, 132, 1980000, DType::bf16).flops, 989.4e12);
  EXPECT_DOUBLE_EQ(device_peak("NVIDIA H100 NVL", 90, 132, 1785000, DType::bf16).flops, 835e12);
  EXPECT_DOUBLE_EQ(device_peak("NVIDIA H100 PCIe", 90, 114, 1755000, DType::f16).flops, 756e12);
  EXPECT_DOUBLE_EQ(device_peak("NVIDIA A100-SXM4-80GB", 80, 108, 1410000, DType::f32).flops, 19.5e12);
  EXPECT_DOUBLE_EQ(device_peak("NVIDIA A100-SXM4-80GB", 80, 108, 1410000, DType::f32, F32Matmul::tf32).flops, 156e12);
  EXPECT_EQ(device_peak("NVIDIA H100 80GB HBM3", 90, 132, 1980000, DType::bf16).how,
            "989.4 TFLOP/s bf16 dense (H100 SXM / H200 datasheet)");
}

TEST(CudaPeak, OtherPartsFromTheirArchitectureRate) {
  // An A30: 56 SMs at 1.44 GHz x 2048 bf16 FLOP/clock (its datasheet: 165 TFLOP/s).
  const DevicePeak a30 = device_peak("NVIDIA A30", 80, 56, 1440000, DType::bf16);
  EXPECT_NEAR(a30.flops, 56 * 1.44e9 * 2048, 1);
  EXPECT_EQ(a30.how, "165.2 TFLOP/s bf16 dense (56 SMs x 1.44 GHz x 2048 FLOP/clock, sm_80)");
  // An L40S (sm_89): 142 SMs at 2.52 GHz x 1024 (datasheet 362).
  EXPECT_NEAR(device_peak("NVIDIA L40S", 89, 142, 2520000, DType::bf16).flops, 142 * 2.52e9 * 1024, 1);
  EXPECT_NEAR(device_peak("NVIDIA L40S", 89, 142, 2520000, DType::f32, F32Matmul::tf32).flops, 142 * 2.52e9 * 512, 1);
  // A part newer than the table gets the highest known rate.
  EXPECT_NEAR(device_peak("future", 130, 100, 2000000, DType::bf16).flops, 100 * 2e9 * 8192, 1);
}

TEST(CudaPeak, RefusesWhatItCannotRate) {
  EXPECT_PAX_ERROR(device_peak("NVIDIA H100", 90, 132, 1980000, DType::i32), "no matmul peak for int32");
  EXPECT_PAX_ERROR(device_peak("odd", 87, 0, 0, DType::bf16), "reports 0 SMs at 0 kHz");
}

}  // namespace
}  // namespace pax::cuda
