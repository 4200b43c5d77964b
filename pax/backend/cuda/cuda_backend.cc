// The CUDA backend's table: memory and copies through the caching allocator
// and pinned staging, one stream and events per device, kernels launched on
// that stream. Registered when the library loads; a machine without a
// driver or a GPU simply has no cuda devices.
#include "pax/backend/cuda/cuda_backend.h"

#include <array>
#include <cstdio>
#include <map>
#include <memory>
#include <mutex>

#include "pax/backend/cpu/cpu_backend.h"
#include "pax/backend/cuda/cuda_check.h"
#include "pax/backend/cuda/cuda_devices.h"
#include "pax/backend/cuda/cuda_executable.h"
#include "pax/backend/cuda/cuda_kernels.h"
#include "pax/backend/cuda/cuda_lowering_target.h"
#include "pax/backend/cuda/cuda_peak.h"
#include "pax/backend/matmul_precision.h"
#include "pax/core/array.h"
#include "pax/core/error.h"
#include "pax/core/trace.h"

namespace pax::cuda {
namespace {

std::shared_ptr<Buffer> scratch(size_t nbytes, int index);

cudaStream_t stream_of(int index) { return device_state(index).stream; }
StreamId stream_id(cudaStream_t s) { return StreamId(reinterpret_cast<uintptr_t>(s)); }

void release(void* data, size_t /*capacity*/, Device device) { device_state(device.index).allocator.free(data); }

std::shared_ptr<Buffer> allocate(size_t nbytes, int index) {
  DeviceState& d = device_state(index);
  const CachingAllocator::Allocation a =
      d.allocator.allocate(nbytes, stream_id(d.stream), AllocationPurpose::describe_current());
  if (!a.ptr) return Buffer::wrap(nullptr, 0, 0, Device{DeviceKind::cuda, index}, nullptr);
  return Buffer::wrap(a.ptr, nbytes, a.size, Device{DeviceKind::cuda, index}, release);
}

std::shared_ptr<Buffer> scratch(size_t nbytes, int index) { return allocate(nbytes, index); }

char* device_bytes(const Buffer& b) { return static_cast<char*>(const_cast<void*>(b.data())); }

void to_host(const Buffer& src, size_t offset, void* dst, size_t nbytes) {
  const trace::Span span("copy", trace::active() ? "device to host " + std::to_string(nbytes) + " B" : std::string());
  const int index = src.device().index;
  const DeviceGuard on(index);
  const cudaStream_t s = stream_of(index);
  if (nbytes) PAX_CUDA_CHECK(cudaMemcpyAsync(dst, device_bytes(src) + offset, nbytes, cudaMemcpyDeviceToHost, s));
  PAX_CUDA_CHECK(cudaStreamSynchronize(s));
}

void from_host(const std::shared_ptr<Buffer>& dst, size_t offset, const void* src, size_t nbytes) {
  if (!nbytes) return;
  const trace::Span span("copy", trace::active() ? "host to device " + std::to_string(nbytes) + " B" : std::string());
  const int index = dst->device().index;
  const DeviceGuard on(index);
  DeviceState& d = device_state(index);
  // The bytes are copied into pinned buffers before this returns, so the
  // caller's memory may change at once; the copies run in stream order.
  d.staging.stage_to_device(
      device_bytes(*dst) + offset, src, nbytes, stream_id(d.stream),
      [](void* to, const void* from, size_t n, StreamId stream) {
        PAX_CUDA_CHECK(cudaMemcpyAsync(to, from, n, cudaMemcpyHostToDevice, reinterpret_cast<cudaStream_t>(stream)));
      });
}

void copy(const std::shared_ptr<Buffer>& dst, size_t dst_offset, const std::shared_ptr<Buffer>& src, size_t src_offset,
          size_t nbytes) {
  if (!nbytes) return;
  const int index = dst->device().index;
  const DeviceGuard on(index);
  PAX_CUDA_CHECK(cudaMemcpyAsync(device_bytes(*dst) + dst_offset, device_bytes(*src) + src_offset, nbytes,
                                 cudaMemcpyDeviceToDevice, stream_of(index)));
}

void synchronize(int index) {
  const DeviceGuard on(index);
  PAX_CUDA_CHECK(cudaStreamSynchronize(stream_of(index)));
}

// Events by number: record_event returns the count of events recorded on
// the device so far; waiting for one waits for it and forgets it and every
// earlier one (later work on the stream ran after them).
struct Events {
  std::mutex mu;
  uint64_t recorded = 0;
  std::map<uint64_t, cudaEvent_t> live;
};
Events& events_of(int index) {
  static std::array<Events, 64> all;
  PAX_CHECK(index >= 0 && index < int(all.size()), "cuda:", index, ": at most ", all.size(), " devices");
  return all[size_t(index)];
}

uint64_t record_event(int index) {
  const DeviceGuard on(index);
  Events& e = events_of(index);
  cudaEvent_t ev = nullptr;
  PAX_CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  PAX_CUDA_CHECK(cudaEventRecord(ev, stream_of(index)));
  const std::lock_guard<std::mutex> lock(e.mu);
  e.live[++e.recorded] = ev;
  return e.recorded;
}

void wait_event(int index, uint64_t event) {
  const DeviceGuard on(index);
  Events& e = events_of(index);
  cudaEvent_t ev = nullptr;
  {
    const std::lock_guard<std::mutex> lock(e.mu);
    const auto it = e.live.find(event);
    if (it == e.live.end()) return;  // waited for already (or an earlier one was)
    ev = it->second;
  }
  PAX_CUDA_CHECK(cudaEventSynchronize(ev));
  const std::lock_guard<std::mutex> lock(e.mu);
  for (auto it = e.live.begin(); it != e.live.end() && it->first <= event;) {
    cudaEventDestroy(it->second);
    it = e.live.erase(it);
  }
}

void launch(int index, KernelFn kernel, const Params& params, std::vector<Array> inputs, std::vector<Array> outputs) {
  const DeviceGuard on(index);
  std::vector<TensorView> in(inputs.size()), out(outputs.size());
  for (size_t i = 0; i < inputs.size(); ++i)
    in[i] = TensorView{device_bytes(*inputs[i].buffer()), &inputs[i].shape(), inputs[i].dtype()};
  for (size_t i = 0; i < outputs.size(); ++i)
    out[i] = TensorView{device_bytes(*outputs[i].buffer()), &outputs[i].shape(), outputs[i].dtype()};
  // The kernel queues its work on the stream and returns; the arrays may go
  // at once, since their memory is reused only by later work on the stream.
  kernel(device_state(index).kernel_context, params, in, out);
}

std::string describe(int index) {
  const DeviceInfo& info = device_info(index);
  char buf[200];
  std::snprintf(buf, sizeof buf, "%s, %s, %d SMs at %.2f GHz, %.1f GiB", info.name.c_str(),
                arch_name(info.arch).c_str(), info.multiprocessors, info.clock_khz / 1e6,
                double(info.memory_bytes) / double(1 << 30));
  return buf;
}

std::string absence() { return absence_reason(); }

double peak(int index, DType compute_dtype, std::string* how) {
  const DeviceInfo& info = device_info(index);
  const DevicePeak p = device_peak(info.name, info.arch, info.multiprocessors, info.clock_khz, compute_dtype,
                                   f32_products_in_tf32() ? F32Matmul::tf32 : F32Matmul::f32);
  if (how) *how = p.how + " of " + info.name;
  return p.flops;
}

}  // namespace

DeviceState::DeviceState(int device)
    : index(device),
      memory_provider(device),
      allocator(memory_provider, device),
      pinned_provider(device),
      staging(pinned_provider, {}) {
  const DeviceGuard on(device);
  PAX_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  kernel_context = KernelContext{Device{DeviceKind::cuda, device}, stream, nullptr, scratch};
  register_allocator_stats(allocator);
}

DeviceState& device_state(int index) {
  PAX_CHECK(index >= 0 && index < device_count(), "cuda:", index, " is not present; CUDA devices: ", device_count(),
            device_count() ? "" : " (" + absence_reason() + ")");
  static std::mutex mu;
  // Never destroyed: buffers released at exit still return to their allocator.
  static auto* states = new std::vector<std::unique_ptr<DeviceState>>(size_t(device_count()));
  const std::lock_guard<std::mutex> lock(mu);
  std::unique_ptr<DeviceState>& s = (*states)[size_t(index)];
  if (!s) s = std::make_unique<DeviceState>(index);
  return *s;
}

const Backend& cuda_backend() {
  static const Backend backend{
      .name = "cuda",
      .kind = DeviceKind::cuda,
      .describe = describe,
      .absence_reason = absence,
      .peak_flops = peak,
      .memory = DeviceMemory{.device_count = device_count,
                             .host_accessible = false,
                             .allocate = allocate,
                             .to_host = to_host,
                             .from_host = from_host,
                             .copy = copy,
                             .synchronize = synchronize},
      .record_event = record_event,
      .wait_event = wait_event,
      .synchronize = synchronize,
      .num_threads = cpu::cpu_backend().num_threads,
      .set_num_threads = cpu::cpu_backend().set_num_threads,
      .kernel = cuda_kernel,
      .launch = launch,
      .run_while = nullptr,
      .run_cond = nullptr,
      .supports_op = cuda_lowering_target().supports_op,
      .compile = compile_for_cuda,
  };
  return backend;
}

namespace {
// Loading the library registers the cuda platform; it has devices only where
// a driver and a GPU are present.
[[maybe_unused]] const bool kRegistered = (register_backend(cuda_backend()), true);
}  // namespace

}  // namespace pax::cuda
