// PAX_MAX_ISA: parsing, applying the cap to Highway and oneDNN when the
// library loads, and the code generator's flags (see isa.h).
#include "pax/backend/cpu/isa.h"

#include <hwy/targets.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <oneapi/dnnl/dnnl.hpp>
#include <optional>

#include "pax/backend/cpu/cpu_info.h"
#include "pax/core/error.h"

namespace pax::cpu {

int64_t hwy_dispatched_target();  // isa_hwy.cc

namespace {

enum class Cap { native, avx2, avx512, avx512_bf16, amx };

struct CapName {
  Cap cap;
  const char* name;
};
constexpr CapName kCaps[] = {{Cap::native, "native"},
                             {Cap::avx2, "avx2"},
                             {Cap::avx512, "avx512"},
                             {Cap::avx512_bf16, "avx512_bf16"},
                             {Cap::amx, "amx"}};

std::string valid_names() {
  std::string s;
  for (const CapName& c : kCaps) s += (s.empty() ? "" : ", ") + std::string(c.name);
  return s;
}

// The cap PAX_MAX_ISA names; nullopt when it names none.
std::optional<Cap> parse_cap() {
  const char* env = std::getenv("PAX_MAX_ISA");
  if (!env || !*env) return Cap::native;
  for (const CapName& c : kCaps) {
    if (std::string(env) == c.name) return c.cap;
  }
  return std::nullopt;
}

void apply(Cap cap) {
  if (cap == Cap::native) return;
#if HWY_ARCH_X86
  // Every Highway target better than the cap's (lower bits are better).
  hwy::DisableTargets(cap == Cap::avx2 ? HWY_AVX2 - 1 : HWY_AVX3 - 1);
  const dnnl::cpu_isa isa = cap == Cap::avx2          ? dnnl::cpu_isa::avx2
                            : cap == Cap::avx512      ? dnnl::cpu_isa::avx512_core
                            : cap == Cap::avx512_bf16 ? dnnl::cpu_isa::avx512_core_bf16
                                                      : dnnl::cpu_isa::avx512_core_amx;
  // Fails only once oneDNN has generated code, which the load-time call precedes.
  (void)dnnl::set_max_cpu_isa(isa);
#endif
}

// Applies a valid cap when the library loads, before any kernel can run.
// An invalid one is reported by isa_cap(), from where it is first needed.
const bool kApplied = [] {
  if (std::optional<Cap> cap = parse_cap()) apply(*cap);
  return true;
}();

}  // namespace

std::string isa_cap() {
  (void)kApplied;
  const std::optional<Cap> cap = parse_cap();
  PAX_CHECK(cap.has_value(), "PAX_MAX_ISA='", std::getenv("PAX_MAX_ISA"), "' is not an ISA cap; valid: ", valid_names(),
            " (or unset)");
  for (const CapName& c : kCaps) {
    if (c.cap == *cap) return c.name;
  }
  return "native";
}

int64_t hwy_target() { return hwy_dispatched_target(); }

std::string hwy_target_name() { return hwy::TargetName(hwy_target()); }

std::string dnnl_isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    case dnnl::cpu_isa::all: return "all";
    default: break;
  }
  return "other";
}

std::vector<std::string> codegen_isa_flags() {
  const char* march = std::getenv("PAX_CODEGEN_MARCH");
  const bool native = !(march && *march);
  std::vector<std::string> flags{std::string("-march=") + (native ? "native" : march)};
  if (native) {
    // What "native" means differs from CPU to CPU: naming this one keeps a
    // cache shared between machines (an NFS home) from handing code built
    // for another CPU's instructions to this one.
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : cpu_info().identity) h = (h ^ c) * 1099511628211ull;
    char id[17];
    std::snprintf(id, sizeof(id), "%016llx", (unsigned long long)h);
    flags.push_back(std::string("-DPAX_HOST_CPU=0x") + id);
  }
  if (isa_cap() == "avx2") flags.push_back("-mno-avx512f");
  // Highway's static target is the best one the flags allow; disabling every
  // better one makes it the dispatcher's (lower bits are better targets).
  flags.push_back("-DHWY_DISABLED_TARGETS=" + std::to_string(hwy_target() - 1));
  return flags;
}

std::string isa_summary() {
#if HWY_ARCH_X86_64
  const char* arch = "x86-64";
#elif HWY_ARCH_ARM_A64
  const char* arch = "aarch64";
#else
  const char* arch = "cpu";
#endif
  const std::string cap = isa_cap();
  return std::string(arch) + ": Highway " + hwy_target_name() + ", oneDNN " + dnnl_isa_name() +
         (cap == "native" ? "" : " (PAX_MAX_ISA=" + cap + ")");
}

}  // namespace pax::cpu
