// The registry of backends, one per platform, and the placement of an
// operation's operands.
#include "pax/backend/backend.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <optional>

#include "pax/core/device_put.h"
#include "pax/core/error.h"

namespace pax {
namespace {

std::array<std::atomic<const Backend*>, kNumDeviceKinds> g_backends{};

std::shared_ptr<Buffer> host_scratch(size_t nbytes, int /*index*/) { return Buffer::allocate(nbytes); }

}  // namespace

const KernelContext& host_kernel_context() {
  static const KernelContext context{Device{DeviceKind::cpu, 0}, nullptr, nullptr, host_scratch};
  return context;
}

void register_backend(const Backend& backend) {
  g_backends[size_t(backend.kind)].store(&backend, std::memory_order_release);
  set_device_memory(backend.kind, &backend.memory);
}

const Backend& backend_for(DeviceKind kind) {
  const Backend* b = g_backends[size_t(kind)].load(std::memory_order_acquire);
  PAX_CHECK(b, "no backend of the platform '", platform_name(kind),
            "' is linked: link pax::pax (or a backend library such as pax_backend_cpu)");
  return *b;
}

const Backend& backend_for(Device device) { return backend_for(device.kind); }

const Backend* find_backend(DeviceKind kind) { return g_backends[size_t(kind)].load(std::memory_order_acquire); }

std::string device_report() {
  std::string out;
  const auto line = [&out](std::string label, const std::string& text) {
    label.resize(std::max<size_t>(label.size() + 2, 9), ' ');
    out += label + text + "\n";
  };
  for (int k = 0; k < kNumDeviceKinds; ++k) {
    const DeviceKind kind = DeviceKind(k);
    const Backend* b = find_backend(kind);
    const std::string name = platform_name(kind);
    if (!b) {
      line(name, "not built in (this build has no " + name + " backend)");
      continue;
    }
    const int n = b->memory.device_count();
    if (n == 0) line(name, b->absence_reason ? b->absence_reason() : "no device");
    for (int i = 0; i < n; ++i) line(Device{kind, i}.str(), b->describe(i));
  }
  return out;
}

const Backend& default_backend() { return backend_for(default_device()); }

Placement place_operands(std::span<const Array> inputs, std::vector<Array>& moved, const char* what) {
  const Array* committed = nullptr;
  bool elsewhere = false;  // an input's device differs from the first one's
  std::optional<Device> first;
  for (const Array& a : inputs) {
    if (!a.is_concrete()) continue;
    const Device d = a.device();
    if (first && d != *first) elsewhere = true;
    if (!first) first = d;
    if (!a.committed()) continue;
    if (!committed) {
      committed = &a;
    } else {
      PAX_CHECK(d == committed->device(), what, ": operands live on two devices, ", committed->device(), " and ", d,
                "; bring them together with device_put");
    }
  }
  const Placement placement{committed ? committed->device() : default_device(), committed != nullptr};
  moved.clear();
  if (!first || (!elsewhere && *first == placement.device)) return placement;
  moved.assign(inputs.begin(), inputs.end());
  for (Array& a : moved) {
    if (a.is_concrete() && !a.committed() && a.device() != placement.device) a = move_uncommitted(a, placement.device);
  }
  return placement;
}

Device place_operands(std::vector<Array>& inputs, const char* what) {
  std::vector<Array> moved;
  const Placement placement = place_operands(inputs, moved, what);
  if (!moved.empty()) inputs = std::move(moved);
  return placement.device;
}

void bring_arguments(std::vector<Array>& args, Device device, const char* what) {
  for (size_t i = 0; i < args.size(); ++i) {
    Array& a = args[i];
    if (!a.is_concrete() || a.device() == device) continue;
    PAX_CHECK(!a.committed(), what, ": argument ", i, " is committed to ", a.device(), " but the program runs on ",
              device, "; move it with device_put");
    a = move_uncommitted(a, device);
  }
}

std::shared_ptr<Executable> compile(JaxprPtr jaxpr, const CompileOptions& options, Device device) {
  PAX_CHECK(jaxpr, "compile: no jaxpr");
  return backend_for(device).compile(std::move(jaxpr), options, device);
}

std::shared_ptr<Executable> compile(JaxprPtr jaxpr, const CompileOptions& options) {
  return compile(std::move(jaxpr), options, default_device());
}

}  // namespace pax
