// Devices, as JAX has them: every buffer lives on a device (a platform and an
// index); `devices()` lists those present; the default device (where arrays
// made from host values go) comes from PAX_PLATFORMS ("cuda,cpu": the first
// platform present), from set_default_platform (paxcc's --platform) or from a
// DefaultDeviceScope on this thread (jax.default_device).
//
// The array core reaches a device's memory only through the DeviceMemory
// functions its backend installs (pax/backend/backend.cc does so for every
// registered backend): allocation, and copies to and from the host. Memory of
// a device that is not host-accessible is never read through a pointer here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace pax {

// The platforms paxcc knows. `sim` is a test device: host memory that host
// code may not touch, run on a stream thread of its own (pax/backend/sim).
enum class DeviceKind : uint8_t { cpu, sim, cuda };
inline constexpr int kNumDeviceKinds = int(DeviceKind::cuda) + 1;

// "cpu", "sim", "cuda".
const char* platform_name(DeviceKind kind);
// The platform named `name`, or nullopt.
std::optional<DeviceKind> parse_platform(std::string_view name);

struct Device {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
  bool operator==(const Device&) const = default;
  const char* platform() const { return platform_name(kind); }
  std::string str() const;  // "cpu:0"
};
std::ostream& operator<<(std::ostream& os, const Device& device);

class Buffer;

// What the array core needs of a platform's memory. `to_host` waits for the
// work queued before it and for the copy; `from_host` may return before the
// copy lands on the device but has read `src` by then.
struct DeviceMemory {
  int (*device_count)() = nullptr;
  bool host_accessible = true;  // host code may read its buffers' memory
  std::shared_ptr<Buffer> (*allocate)(size_t nbytes, int index) = nullptr;
  void (*to_host)(const Buffer& src, size_t offset, void* dst, size_t nbytes) = nullptr;
  void (*from_host)(const std::shared_ptr<Buffer>& dst, size_t offset, const void* src, size_t nbytes) = nullptr;
  // A copy of `nbytes` between two buffers of this platform, in order with
  // the device's other work.
  void (*copy)(const std::shared_ptr<Buffer>& dst, size_t dst_offset, const std::shared_ptr<Buffer>& src,
               size_t src_offset, size_t nbytes) = nullptr;
  // Waits until the work queued on device `index` has run (before the host
  // reads memory it may read directly); nullptr where work runs in the
  // caller's thread (the CPU).
  void (*synchronize)(int index) = nullptr;
};

// Waits for the work queued on `device` (see DeviceMemory::synchronize).
void synchronize_device(Device device);

// Installs the memory functions of `kind` (a backend does so when it registers).
void set_device_memory(DeviceKind kind, const DeviceMemory* memory);
// The memory functions of the platform `kind`; throws pax::Error when no
// backend of that platform is linked.
const DeviceMemory& device_memory(DeviceKind kind);
bool platform_present(DeviceKind kind);

// Every device present, platform by platform (cpu last); `platform` limits
// the list to one ("cpu", "sim", "cuda"); naming a platform that is not
// present is a pax::Error listing those that are.
std::vector<Device> devices(std::string_view platform = "");

// Where arrays made from host values (and operations without operands) go.
Device default_device();
// Sets the default platform for the process ("cpu", "sim", "cuda", or a
// comma list where the first present wins, as PAX_PLATFORMS); throws
// pax::Error naming the platforms present when none of the list is.
void set_default_platform(std::string_view platforms);

// Makes `device` the default on this thread while it lives (scopes nest).
class DefaultDeviceScope {
 public:
  explicit DefaultDeviceScope(Device device);
  ~DefaultDeviceScope();
  DefaultDeviceScope(const DefaultDeviceScope&) = delete;
  DefaultDeviceScope& operator=(const DefaultDeviceScope&) = delete;

 private:
  std::optional<Device> outer_;
};

}  // namespace pax
