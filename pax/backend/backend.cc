// The registry of backends, one per platform, and the placement of an
// operation's operands.
#include "pax/backend/backend.h"

#include <array>
#include <atomic>

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

const Backend& default_backend() { return backend_for(default_device()); }

Device place_operands(std::vector<Array>& inputs, const char* what) {
  const Array* committed = nullptr;
  for (const Array& a : inputs) {
    if (!a.is_concrete() || !a.committed()) continue;
    if (!committed) {
      committed = &a;
    } else {
      PAX_CHECK(a.device() == committed->device(), what, ": operands live on two devices, ", committed->device(),
                " and ", a.device(), "; bring them together with device_put");
    }
  }
  const Device device = committed ? committed->device() : default_device();
  for (Array& a : inputs) {
    if (a.is_concrete() && !a.committed() && a.device() != device) {
      a = move_uncommitted(a, device);
    }
  }
  return device;
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
