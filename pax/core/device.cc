// The platform table of the array core: names, the memory functions each
// backend installs, the devices present and the default device.
#include "pax/core/device.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <mutex>
#include <ostream>

#include "pax/core/error.h"

namespace pax {
namespace {

constexpr std::array<const char*, kNumDeviceKinds> kPlatformNames = {"cpu", "sim", "cuda"};

std::array<std::atomic<const DeviceMemory*>, kNumDeviceKinds> g_memory{};

// The process's default platform: set by set_default_platform, else read
// from PAX_PLATFORMS on first use, else the first platform present in
// devices() order.
std::mutex g_default_mu;
std::optional<DeviceKind> g_default_kind;
// g_default_kind once resolved (-1 before), read without the lock: every
// array made from a host value asks for it.
std::atomic<int> g_default_resolved{-1};
// Read on every eager operation: the initial-exec model avoids a call to
// resolve it (libpax is loaded with the program, never opened later).
thread_local std::optional<Device> t_scoped_default __attribute__((tls_model("initial-exec")));

// The order devices() lists platforms in: accelerators first, as JAX does.
constexpr std::array<DeviceKind, kNumDeviceKinds> kListOrder = {DeviceKind::cuda, DeviceKind::sim, DeviceKind::cpu};

std::string present_platforms() {
  std::string out;
  for (DeviceKind k : kListOrder)
    if (platform_present(k)) out += (out.empty() ? "" : ", ") + std::string(platform_name(k));
  return out.empty() ? "none" : out;
}

DeviceKind first_present_of(std::string_view list, const char* source) {
  std::string_view rest = list;
  while (true) {
    const size_t comma = rest.find(',');
    std::string_view name = rest.substr(0, comma);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    const std::optional<DeviceKind> kind = parse_platform(name);
    PAX_CHECK(kind.has_value() || name.empty(), source, ": '", name, "' is not a platform; valid: cpu, sim, cuda");
    if (kind && platform_present(*kind)) return *kind;
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  PAX_FAIL(source, " '", list, "' names no platform present here; present: ", present_platforms());
}

}  // namespace

const char* platform_name(DeviceKind kind) { return kPlatformNames[size_t(kind)]; }

std::optional<DeviceKind> parse_platform(std::string_view name) {
  for (int k = 0; k < kNumDeviceKinds; ++k)
    if (name == kPlatformNames[size_t(k)]) return DeviceKind(k);
  // JAX's names for the NVIDIA platform.
  if (name == "gpu" || name == "cuda") return DeviceKind::cuda;
  return std::nullopt;
}

std::string Device::str() const { return std::string(platform()) + ":" + std::to_string(index); }

std::ostream& operator<<(std::ostream& os, const Device& device) { return os << device.str(); }

void set_device_memory(DeviceKind kind, const DeviceMemory* memory) {
  g_memory[size_t(kind)].store(memory, std::memory_order_release);
}

const DeviceMemory& device_memory(DeviceKind kind) {
  const DeviceMemory* m = g_memory[size_t(kind)].load(std::memory_order_acquire);
  PAX_CHECK(m, "no backend of the platform '", platform_name(kind), "' is linked; present: ", present_platforms());
  return *m;
}

void synchronize_device(Device device) {
  if (device.kind == DeviceKind::cpu) return;
  if (const auto sync = device_memory(device.kind).synchronize) sync(device.index);
}

bool platform_present(DeviceKind kind) {
  const DeviceMemory* m = g_memory[size_t(kind)].load(std::memory_order_acquire);
  return m && m->device_count && m->device_count() > 0;
}

std::vector<Device> devices(std::string_view platform) {
  std::vector<Device> out;
  if (!platform.empty()) {
    const std::optional<DeviceKind> kind = parse_platform(platform);
    PAX_CHECK(kind.has_value(), "devices: '", platform, "' is not a platform; valid: cpu, sim, cuda");
    PAX_CHECK(platform_present(*kind), "devices: no '", platform,
              "' device is present; present: ", present_platforms());
    for (int i = 0; i < device_memory(*kind).device_count(); ++i) out.push_back(Device{*kind, i});
    return out;
  }
  for (DeviceKind k : kListOrder) {
    if (!platform_present(k)) continue;
    for (int i = 0; i < device_memory(k).device_count(); ++i) out.push_back(Device{k, i});
  }
  return out;
}

Device default_device() {
  if (t_scoped_default) return *t_scoped_default;
  if (const int k = g_default_resolved.load(std::memory_order_acquire); k >= 0) return Device{DeviceKind(k), 0};
  std::lock_guard<std::mutex> lock(g_default_mu);
  if (!g_default_kind) {
    const char* env = std::getenv("PAX_PLATFORMS");
    if (env && *env) {
      g_default_kind = first_present_of(env, "PAX_PLATFORMS");
    } else {
      // The CPU unless only another platform is linked.
      g_default_kind = platform_present(DeviceKind::cpu) ? DeviceKind::cpu : devices().at(0).kind;
    }
  }
  g_default_resolved.store(int(*g_default_kind), std::memory_order_release);
  return Device{*g_default_kind, 0};
}

void set_default_platform(std::string_view platforms) {
  const DeviceKind kind = first_present_of(platforms, "platform");
  std::lock_guard<std::mutex> lock(g_default_mu);
  g_default_kind = kind;
  g_default_resolved.store(int(kind), std::memory_order_release);
}

DefaultDeviceScope::DefaultDeviceScope(Device device) : outer_(t_scoped_default) {
  PAX_CHECK(
      platform_present(device.kind) && device.index >= 0 && device.index < device_memory(device.kind).device_count(),
      "default device ", device, " is not present; present: ", present_platforms());
  t_scoped_default = device;
}

DefaultDeviceScope::~DefaultDeviceScope() { t_scoped_default = outer_; }

}  // namespace pax
