// PAX_PROFILE's table of step times (step_profile.h).
#include "pax/backend/cpu/step_profile.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "pax/core/env_switch.h"
#include "pax/interp/collective_thread.h"

namespace pax::cpu {

StepProfile* StepProfile::get() {
  static StepProfile* profile = [] {
    if (!env_switch("PAX_PROFILE", false)) return static_cast<StepProfile*>(nullptr);
    std::atexit([] {
      const std::string table = get()->table();
      if (table.empty()) return;
      std::fputs(table.c_str(), stderr);
      const CommunicationTimes comm = communication_times();
      if (comm.collectives > 0) {
        std::fprintf(stderr,
                     "PAX_PROFILE: communication: %lld jobs, %.3f s communicating, %.3f s waited for (%.1f%% of "
                     "the communication)\n",
                     (long long)comm.collectives, comm.communication_seconds, comm.waiting_seconds,
                     100.0 * comm.waiting_seconds / std::max(comm.communication_seconds, 1e-12));
      }
    });
    return new StepProfile;
  }();
  return profile;
}

void StepProfile::add(const std::string& label, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  Entry& e = entries_[label];
  e.seconds += seconds;
  ++e.calls;
}

void StepProfile::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  entries_.clear();
}

std::string StepProfile::table() {
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_.empty()) return "";
  std::vector<std::pair<std::string, Entry>> rows(entries_.begin(), entries_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double total = 0;
  for (const auto& [label, e] : rows) total += e.seconds;
  std::string out =
      fmt::format("PAX_PROFILE: {:.3f} s in executable steps\n{:>10} {:>6} {:>8}  step\n", total, "ms", "%", "calls");
  for (const auto& [label, e] : rows)
    out += fmt::format("{:10.2f} {:6.2f} {:8d}  {}\n", e.seconds * 1e3, 100.0 * e.seconds / total, e.calls, label);
  return out;
}

void reset_step_profile() {
  if (StepProfile* profile = StepProfile::get()) {
    profile->reset();
    reset_communication_times();
  }
}

}  // namespace pax::cpu
