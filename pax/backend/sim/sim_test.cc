// Devices and the sim platform: listing, device_put / device_get, committed
// placement, per-device jit, host reads that stage through the backend (and
// one that does not, which crashes), device-side control flow, checkpoints
// of device arrays.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <sstream>
#include <string>

#include "pax/api/control_flow.h"
#include "pax/api/transforms.h"
#include "pax/backend/backend.h"
#include "pax/backend/sim/sim_backend.h"
#include "pax/core/device.h"
#include "pax/core/device_put.h"
#include "pax/ops/lax.h"
#include "pax/ops/numpy.h"
#include "pax/testing/testing.h"
#include "pax/train/checkpoint.h"

namespace pax {
namespace {

using testing::all_close;

const Device kSim{DeviceKind::sim, 0};
const Device kCpu{DeviceKind::cpu, 0};

TEST(Devices, ListsEveryPlatformPresent) {
  std::vector<Device> all = devices();
  const bool gpu = platform_present(DeviceKind::cuda);
  if (gpu) {
    EXPECT_EQ(all.front().kind, DeviceKind::cuda);  // a GPU comes first
    std::erase_if(all, [](const Device& d) { return d.kind == DeviceKind::cuda; });
  }
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0], kSim);  // accelerators first, as JAX lists them
  EXPECT_EQ(all[1], kCpu);
  EXPECT_EQ(devices("cpu"), std::vector<Device>{kCpu});
  EXPECT_EQ(kSim.str(), "sim:0");
  EXPECT_PAX_ERROR(devices("tpu"), "'tpu' is not a platform; valid: cpu, sim, cuda");
  if (!gpu) {
    EXPECT_PAX_ERROR(devices("cuda"), "no 'cuda' device is present; present: sim, cpu");
    EXPECT_PAX_ERROR(set_default_platform("cuda"), "names no platform present here; present: sim, cpu");
  }
}

TEST(Devices, ReportHasALinePerDeviceAndPerPlatformWithout) {
  const std::string report = device_report();
  EXPECT_NE(report.find("cpu:0    "), std::string::npos) << report;
  EXPECT_NE(report.find("sim:0    a test device"), std::string::npos) << report;
  // cuda: its devices, or why there are none (no driver, no GPU, not built).
  const bool cuda_line = report.find("\ncuda:0 ") != std::string::npos ||
                         report.find("\ncuda     no CUDA device") != std::string::npos ||
                         report.find("\ncuda     not built in") != std::string::npos;
  EXPECT_TRUE(cuda_line) << report;
}

TEST(Devices, PlacementCopiesOnlyWhatMoves) {
  const Array a = array({1.0f}), b = array({2.0f});
  std::vector<Array> moved;
  const std::vector<Array> together{a, b};
  Placement p = place_operands(together, moved, "add");
  EXPECT_TRUE(moved.empty());  // both on the default device: used as they are
  EXPECT_EQ(p.device, default_device());
  EXPECT_FALSE(p.committed);
  const std::vector<Array> apart{device_put(a, kSim), b};
  p = place_operands(apart, moved, "add");
  EXPECT_EQ(p.device, kSim);
  EXPECT_TRUE(p.committed);
  ASSERT_EQ(moved.size(), 2u);
  EXPECT_EQ(moved[1].device(), kSim);  // the uncommitted operand followed
  EXPECT_FALSE(moved[1].committed());
  EXPECT_EQ(apart[1].device(), kCpu);  // the inputs themselves are untouched
}

TEST(Devices, DevicePutAndGetRoundTrip) {
  const Array x = array({1.5f, -2.0f, 3.25f});
  EXPECT_FALSE(x.committed());
  const Array on_sim = device_put(x, kSim);
  EXPECT_EQ(on_sim.device(), kSim);
  EXPECT_TRUE(on_sim.committed());
  EXPECT_EQ(on_sim.to_vector<float>(), (std::vector<float>{1.5f, -2.0f, 3.25f}));
  EXPECT_EQ(on_sim.to_vector<double>(), (std::vector<double>{1.5, -2.0, 3.25}));  // converted on the host
  const Tree back = device_get(Tree::dict({{"x", on_sim}}));
  EXPECT_EQ(back["x"].leaf().device(), kCpu);
  EXPECT_EQ(back["x"].leaf().to_vector<float>(), (std::vector<float>{1.5f, -2.0f, 3.25f}));
  // Printing stages through the backend too.
  std::ostringstream os;
  os << on_sim;
  EXPECT_EQ(os.str(), "Array([ 1.5 , -2.  ,  3.25], dtype=float32)");
}

TEST(Devices, ResultsLiveWhereTheirOperandsLive) {
  const Array a = device_put(array({1.0f, 2.0f}), kSim);
  const Array y = a * 3.0 + array({10.0f, 20.0f});  // uncommitted operands follow `a`
  EXPECT_EQ(y.device(), kSim);
  EXPECT_TRUE(y.committed());
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{13.0f, 26.0f}));
  const Array c = device_put(array({1.0f, 2.0f}), kCpu);
  EXPECT_PAX_ERROR(a + c, "operands live on two devices, sim:0 and cpu:0; bring them together with device_put");
  EXPECT_EQ((a + device_put(c, kSim)).to_vector<float>(), (std::vector<float>{2.0f, 4.0f}));
}

TEST(Devices, DefaultDeviceScopePlacesNewArrays) {
  const Device outside = default_device();
  {
    const DefaultDeviceScope scope(kSim);
    const Array x = array({1, 2, 3});
    EXPECT_EQ(x.device(), kSim);
    EXPECT_FALSE(x.committed());
    EXPECT_EQ(sum(x).item<int32_t>(), 6);
  }
  EXPECT_EQ(default_device(), outside);
  EXPECT_EQ(array({1}).device(), outside);
}

TEST(Devices, HostPointerReadsOfDeviceMemoryAreRefused) {
  const Array x = device_put(array({1.0f, 2.0f}), kSim);
  EXPECT_PAX_ERROR(x.data(), "the host read the memory of an array f32[2] on sim:0 through a pointer");
}

// The guard itself: memory of the sim device is inaccessible to host code
// outside the stream's work, so a read through a raw pointer crashes (and
// says why), as it would on a GPU.
TEST(DevicesDeathTest, RawHostReadOfSimMemoryCrashes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const Array x = device_put(array({1.0f, 2.0f}), kSim);
  const float* raw = static_cast<const float*>(x.buffer()->data());
  backend_for(kSim).synchronize(0);
  EXPECT_DEATH(
      {
        volatile float v = raw[0];
        (void)v;
      },
      "host code touched sim device memory through a pointer");
}

TEST(Devices, JitCompilesPerDeviceAndRunsWhereItsArgumentsLive) {
  auto f = jit([](const Array& x) { return exp(x) * 2.0 + 1.0; });
  const Array host = array({0.0f, 1.0f, -1.0f});
  const Array sim = device_put(host, kSim);
  const Array on_cpu = f(device_put(host, kCpu));
  const Array on_sim = f(sim);
  EXPECT_EQ(on_cpu.device(), kCpu);
  EXPECT_EQ(on_sim.device(), kSim);
  EXPECT_EQ(f.cache_size(), 2u);  // one executable per device
  EXPECT_EQ(on_sim.to_vector<float>(), on_cpu.to_vector<float>());
  // An executable of one device refuses an argument committed to another.
  auto compiled = f.lower(sim).compile();
  EXPECT_PAX_ERROR(compiled(device_put(host, kCpu)),
                   "compiled for arguments (* with leaves [f32[3]]) on sim:0 but "
                   "called with (* with leaves [f32[3]]) on cpu:0");
  const auto plain = jit([](const Array& x) { return exp(x); }).lower(sim).compile();
  EXPECT_PAX_ERROR(plain.executable().run({device_put(host, kCpu)}),
                   "argument 0 is committed to cpu:0 but the program runs on sim:0");
}

TEST(Devices, DonatedDeviceBuffersAreReused) {
  auto step = jit([](const Array& p, const Array& g) { return p - 0.5 * g; }, {.donate_argnums = {0}});
  Array p = device_put(testing::random_array({64, 32}, DType::f32, 1), kSim);
  const Array g = device_put(testing::random_array({64, 32}, DType::f32, 2), kSim);
  const Array want = device_get(p) - 0.5 * device_get(g);
  const void* before = testing::memory_address(p);
  const Array out = step(std::move(p), g);
  EXPECT_EQ(testing::memory_address(out), before);
  EXPECT_TRUE(all_close(device_get(out), want, 0, 0));
}

// A 1,000-iteration loop on the device reads its predicate there: the host
// waits once, for the result, not once per iteration.
TEST(Devices, WhileLoopPredicatesStayOnTheDevice) {
  const Array init = device_put(scalar(0.0f), kSim);
  const uint64_t before = sim::host_synchronizations();
  const Array out = while_loop([](const Array& c) { return c < 1000.0; }, [](const Array& c) { return c + 1.0; }, init);
  EXPECT_EQ(out.device(), kSim);
  EXPECT_EQ(out.item<float>(), 1000.0f);
  EXPECT_LE(sim::host_synchronizations() - before, 2u);
  // The same loop under jit, and cond choosing on the device.
  auto jitted = jit([](const Array& x) {
    return while_loop([](const Array& c) { return c < 50.0; }, [](const Array& c) { return c * 2.0; }, x);
  });
  EXPECT_EQ(jitted(device_put(scalar(3.0f), kSim)).item<float>(), 96.0f);
  const uint64_t at_cond = sim::host_synchronizations();
  const Array picked = cond(
      device_put(scalar(2.0f), kSim) > 1.0, [](const Array& v) { return v * 10.0; },
      [](const Array& v) { return v - 10.0; }, device_put(array({4.0f}), kSim));
  EXPECT_EQ(sim::host_synchronizations(), at_cond);  // nothing read yet
  EXPECT_EQ(picked.to_vector<float>(), std::vector<float>{40.0f});
}

TEST(Devices, CheckpointsOfDeviceArraysStageThroughTheHost) {
  const std::string dir = ::testing::TempDir() + "/sim_checkpoint_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  const Tree state = Tree::dict(
      {{"w", device_put(testing::random_array({5, 3}, DType::f32, 3), kSim)}, {"step", device_put(array({7}), kSim)}});
  train::save_checkpoint(dir, state, 1);
  const Tree restored = train::restore_checkpoint(dir, state);
  EXPECT_TRUE(all_close(restored["w"].leaf(), device_get(state["w"].leaf()), 0, 0));
  EXPECT_EQ(restored["step"].leaf().item<int32_t>(), 7);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pax
