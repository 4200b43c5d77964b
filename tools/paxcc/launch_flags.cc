// Pax launch flags that paxcc accepts and ignores.
#include "launch_flags.h"

#include <algorithm>
#include <array>
#include <string_view>

namespace paxcc {
namespace {

// paxml main.py's flags for what paxcc does otherwise or not at all.
constexpr std::array<std::string_view, 9> kPaxmlFlags = {
    "pmap_use_tensorstore",     "globally_use_hardware_rng", "maybe_use_persistence_checkpointing",
    "enable_checkpoint_saving", "enable_auto_sharding",      "jax_fully_async_checkpoint",
    "host_profiler_port",       "enable_jax_profiler",       "tfds_data_dir"};
constexpr std::array<std::string_view, 3> kForeignPrefixes = {"jax_", "xla_", "tpu_"};
// Flags of those prefixes that paxcc takes itself.
constexpr std::array<std::string_view, 1> kOwnFlags = {"jax_default_matmul_precision"};

bool foreign(std::string_view name) {
  if (std::find(kOwnFlags.begin(), kOwnFlags.end(), name) != kOwnFlags.end()) return false;
  if (std::find(kPaxmlFlags.begin(), kPaxmlFlags.end(), name) != kPaxmlFlags.end()) return true;
  return std::any_of(kForeignPrefixes.begin(), kForeignPrefixes.end(),
                     [&](std::string_view prefix) { return name.starts_with(prefix); });
}

}  // namespace

std::vector<std::string> drop_foreign_launch_flags(std::vector<std::string>& args) {
  std::vector<std::string> ignored, kept;
  bool flags_end = false;
  for (const std::string& arg : args) {
    if (arg == "--") flags_end = true;
    std::string_view name = arg;
    const bool flag = !flags_end && name.starts_with("--") && name.size() > 2;
    if (flag) {
      name.remove_prefix(2);
      name = name.substr(0, name.find('='));
      // absl's negated boolean: --nopmap_use_tensorstore.
      const std::string_view positive = name.starts_with("no") ? name.substr(2) : name;
      if (foreign(name) || (positive != name && foreign(positive))) {
        ignored.push_back(arg.substr(0, arg.find('=')));
        continue;
      }
    }
    kept.push_back(arg);
  }
  args = std::move(kept);
  return ignored;
}

std::string foreign_flags_warning(const std::vector<std::string>& ignored) {
  if (ignored.empty()) return "";
  std::string list;
  for (const std::string& flag : ignored) list += (list.empty() ? "" : ", ") + flag;
  return "paxcc: warning: ignoring launch flags that do not apply to paxcc (JAX, XLA, TPU and paxml runtime "
         "settings): " +
         list + "\n";
}

}  // namespace paxcc
