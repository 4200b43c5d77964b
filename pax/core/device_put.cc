// device_put / device_get: copies between devices through the backends'
// memory functions, staged in host memory when neither side is the host.
#include "pax/core/device_put.h"

#include <vector>

#include "pax/core/error.h"

namespace pax {
namespace {

bool host_readable(Device d) { return d.kind == DeviceKind::cpu || device_memory(d.kind).host_accessible; }

Array copy_to_device(const Array& x, Device to, bool committed) {
  const std::shared_ptr<Buffer>& src = x.buffer();
  const Device from = src->device();
  const size_t n = x.nbytes();
  std::shared_ptr<Buffer> dst = Buffer::allocate_on(to, n);
  if (n > 0) {
    if (from.kind == to.kind && to.kind != DeviceKind::cpu) {
      device_memory(to.kind).copy(dst, 0, src, 0, n);
    } else if (host_readable(to) && to.kind == DeviceKind::cpu) {
      device_memory(from.kind).to_host(*src, 0, dst->data(), n);
    } else if (host_readable(from)) {
      synchronize_device(from);
      device_memory(to.kind).from_host(dst, 0, src->data(), n);
    } else {
      std::vector<unsigned char> staged(n);
      device_memory(from.kind).to_host(*src, 0, staged.data(), n);
      device_memory(to.kind).from_host(dst, 0, staged.data(), n);
    }
  }
  return Array(x.aval(), std::move(dst), committed);
}

}  // namespace

Array device_put(const Array& x, Device device) {
  PAX_CHECK(x.defined(), "device_put: an empty Array");
  if (x.is_tracer()) return x;
  PAX_CHECK(
      platform_present(device.kind) && device.index >= 0 && device.index < device_memory(device.kind).device_count(),
      "device_put: device ", device, " is not present");
  if (x.device() == device) return Array(x.aval(), x.buffer(), /*committed=*/true);
  return copy_to_device(x, device, /*committed=*/true);
}

Tree device_put(const Tree& tree, Device device) {
  return tree_map([device](const Array& x) { return device_put(x, device); }, tree);
}

Array device_get(const Array& x) {
  PAX_CHECK(x.defined() && !x.is_tracer(), "device_get: needs a concrete array");
  return device_put(x, Device{DeviceKind::cpu, 0});
}

Tree device_get(const Tree& tree) {
  return tree_map([](const Array& x) { return device_get(x); }, tree);
}

Array move_uncommitted(const Array& x, Device device) {
  if (x.device() == device) return x;
  return copy_to_device(x, device, /*committed=*/false);
}

}  // namespace pax
