// machine_rows: the CPU from cpu_info (pax/backend/cpu), the ISA line of
// isa.h, the devices from the backend table, the version from CMake.
#include "pax/train/machine_info.h"

#include <fmt/format.h>
#include <omp.h>
#include <unistd.h>

#include "pax/backend/backend.h"
#include "pax/backend/cpu/cpu_info.h"
#include "pax/backend/cpu/isa.h"
#include "pax/core/device.h"
#include "pax/core/version.h"

namespace pax::train {

std::vector<std::pair<std::string, std::string>> machine_rows() {
  std::vector<std::pair<std::string, std::string>> rows;
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) == 0 && host[0]) rows.emplace_back("host", host);
  const cpu::CpuInfo& cpu = cpu::cpu_info();
  std::string model = cpu.model_name.empty() ? "unknown model" : cpu.model_name;
  if (cpu.family || cpu.model) model += fmt::format(" (family {}, model {})", cpu.family, cpu.model);
  rows.emplace_back(
      "CPU", fmt::format("{}, {}; {} cores, {} logical CPUs", model, cpu.arch, cpu.physical_cores, cpu.logical_cpus));
  rows.emplace_back("instruction sets", cpu::isa_summary() + " (PAX_MAX_ISA " + cpu::isa_cap() + ")");
  rows.emplace_back("kernel threads", std::to_string(omp_get_max_threads()));
  std::string devices = device_report();
  while (!devices.empty() && devices.back() == '\n') devices.pop_back();
  rows.emplace_back("devices", devices);
  rows.emplace_back("default device", default_device().str());
  rows.emplace_back("paxcc", fmt::format("{}, built with g++ {} ({})", version(), __VERSION__,
#ifdef NDEBUG
                                         "optimised"
#else
                                         "debug, assertions on"
#endif
                                         ));
  return rows;
}

}  // namespace pax::train
