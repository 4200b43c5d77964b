// /proc/cpuinfo, /sys topology and cpufreq, and the timed clock (see
// cpu_info.h).
#include "pax/backend/cpu/cpu_info.h"

#include <sched.h>
#include <sys/prctl.h>
#include <sys/utsname.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <iterator>
#include <set>
#include <tuple>
#include <sstream>
#include <utility>

#include "pax/backend/cpu/isa.h"

namespace pax::cpu {
namespace {

std::string trim(const std::string& s) {
  const size_t a = s.find_first_not_of(" \t"), b = s.find_last_not_of(" \t");
  return a == std::string::npos ? "" : s.substr(a, b - a + 1);
}

int parse_int(const std::string& s) {
  try {
    return std::stoi(s, nullptr, 0);  // decimal or 0x hex
  } catch (...) {
    return 0;
  }
}

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return trim(line);
}

// The fields of the first processor in /proc/cpuinfo.
void read_proc_cpuinfo(CpuInfo& c) {
  std::ifstream in("/proc/cpuinfo");
  std::string line, flags;
  while (std::getline(in, line)) {
    if (line.empty() && !c.model_name.empty()) break;  // the first processor only
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = trim(line.substr(0, colon)), value = trim(line.substr(colon + 1));
    if (key == "model name") c.model_name = value;
    else if (key == "vendor_id") c.vendor = value;
    else if (key == "cpu family") c.family = parse_int(value);
    else if (key == "model") c.model = parse_int(value);
    else if (key == "CPU implementer") c.vendor = value;
    else if (key == "CPU part") c.part = parse_int(value);
    else if (key == "flags" || key == "Features") flags = value;
  }
  c.identity = c.model_name + " | " + c.vendor + " " + std::to_string(c.family) + " " + std::to_string(c.model) + " " +
               std::to_string(c.part) + " | " + flags;
  std::set<std::string> f;
  std::istringstream words(flags);
  for (std::string w; words >> w;) f.insert(w);
    // Only the flags of the architecture this library runs on (an emulator
    // may show its host's /proc/cpuinfo).
#if defined(__x86_64__) || defined(__i386__)
  c.avx = f.count("avx");
  c.avx2 = f.count("avx2");
  c.fma = f.count("fma");
  c.avx512f = f.count("avx512f");
  c.avx512_bf16 = f.count("avx512_bf16");
  c.amx_bf16 = f.count("amx_bf16");
#elif defined(__aarch64__)
  c.neon = f.count("asimd");
  c.sve = f.count("sve");
  c.arm_bf16 = f.count("bf16");
#endif
  if (c.model_name.empty() && c.part) c.model_name = "arm part " + std::to_string(c.part);
}

// Distinct (package, core) pairs among the CPUs in this process's affinity mask.
std::pair<int, int> count_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return {1, 1};
  std::set<std::pair<std::string, std::string>> cores;
  int logical = 0;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    ++logical;
    const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::string package = read_line(dir + "physical_package_id"), core = read_line(dir + "core_id");
    if (core.empty()) core = "cpu" + std::to_string(cpu);  // no topology: each CPU a core
    cores.insert({package, core});
  }
  return {std::max<int>(1, int(cores.size())), std::max(1, logical)};
}

CpuInfo read_cpu_info() {
  CpuInfo c;
  struct utsname u;
  if (uname(&u) == 0) c.arch = u.machine;
  read_proc_cpuinfo(c);
  const std::string cap = isa_cap();
  if (cap == "avx2") c.avx512f = c.avx512_bf16 = c.amx_bf16 = false;
  if (cap == "avx512") c.avx512_bf16 = c.amx_bf16 = false;
  if (cap == "avx512_bf16") c.amx_bf16 = false;
#ifdef PR_SVE_GET_VL
  if (c.sve) {
    const int vl = prctl(PR_SVE_GET_VL);
    if (vl > 0) c.sve_bits = (vl & PR_SVE_VL_LEN_MASK) * 8;
  }
#endif
  std::tie(c.physical_cores, c.logical_cpus) = count_cores();
  const int khz = parse_int(read_line("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"));
  c.max_clock_hz = double(khz) * 1e3;
  return c;
}

}  // namespace

const CpuInfo& cpu_info() {
  static const CpuInfo info = read_cpu_info();
  return info;
}

CoreRate core_flops_per_cycle(const CpuInfo& c) {
  if (c.arch == "x86_64" || c.arch == "i686") {
    const bool amd = c.vendor == "AuthenticAMD";
    CoreRate r;
    if (c.avx512f) {
      const bool half_width = amd && c.family == 0x19;  // Zen 4
      r = half_width ? CoreRate{32, 32, "AVX-512 on two 256-bit FMA pipes"}
                     : CoreRate{64, 64, "AVX-512, two 512-bit FMA pipes"};
      if (c.avx512_bf16) r = {r.f32, 2 * r.f32, r.unit + ", AVX512_BF16"};
      if (c.amx_bf16) r = {r.f32, 1024, "AMX-BF16 tiles, " + r.unit};
      return r;
    }
    if (c.avx2 && c.fma) {
      if (amd && c.family == 0x17 && c.model < 0x30) return {16, 16, "AVX2 + FMA on two 128-bit pipes (Zen 1)"};
      return {32, 32, "AVX2 + FMA, two 256-bit pipes"};
    }
    if (c.avx) return {16, 16, "AVX, a multiply and an add pipe"};
    return {8, 8, "SSE"};
  }
  if (c.arch == "aarch64") {
    // Arm Ltd cores with two 128-bit FMA pipes: Cortex-A72 to A78, A710, Neoverse N1 / N2.
    const int two_pipes[] = {0xd08, 0xd09, 0xd0a, 0xd0b, 0xd0c, 0xd0d, 0xd41, 0xd47, 0xd49};
    const bool narrow = c.vendor == "0x41" &&
                        std::find(std::begin(two_pipes), std::end(two_pipes), c.part) != std::end(two_pipes);
    CoreRate r = narrow ? CoreRate{16, 16, "NEON, two 128-bit FMA pipes"}
                        : CoreRate{32, 32, "NEON, four 128-bit FMA pipes"};
    const int sve = 4 * c.sve_bits / 32;  // two pipes of the SVE vector length
    if (c.sve && sve > r.f32) r = {sve, sve, "SVE, two " + std::to_string(c.sve_bits) + "-bit FMA pipes"};
    if (c.arm_bf16) r = {r.f32, 2 * r.f32, r.unit + ", BF16"};
    return r;
  }
  return {32, 32, "an unknown CPU, counted as two 256-bit FMA pipes"};
}

double measure_clock_hz() {
  // Many short trials (about 0.6 ms each) and the fastest of them: on a busy
  // machine a long trial is likely to be preempted and read a low clock,
  // while some short one runs undisturbed.
  constexpr int kIterations = 1 << 17, kAddsPerIteration = 16, kTrials = 40;
  volatile uint64_t one = 1;  // a register operand the core cannot fold into the addition
  double best = 0;
  for (int trial = 0; trial < kTrials; ++trial) {
    uint64_t x = 0, y = one;
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kIterations; ++i) {
      // Each addition waits for the previous one: one a cycle. The empty asm
      // statements (no instructions) keep the compiler from merging them.
#define PAX_DEPENDENT_ADD              \
  asm volatile("" : "+r"(x), "+r"(y)); \
  x += y;
      PAX_DEPENDENT_ADD PAX_DEPENDENT_ADD PAX_DEPENDENT_ADD PAX_DEPENDENT_ADD PAX_DEPENDENT_ADD PAX_DEPENDENT_ADD
          PAX_DEPENDENT_ADD PAX_DEPENDENT_ADD PAX_DEPENDENT_ADD PAX_DEPENDENT_ADD PAX_DEPENDENT_ADD PAX_DEPENDENT_ADD
              PAX_DEPENDENT_ADD PAX_DEPENDENT_ADD PAX_DEPENDENT_ADD PAX_DEPENDENT_ADD
#undef PAX_DEPENDENT_ADD
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (x == 0) return 0;  // keeps x alive
    if (s > 0) best = std::max(best, double(kIterations) * kAddsPerIteration / s);
  }
  return best;
}

}  // namespace pax::cpu
