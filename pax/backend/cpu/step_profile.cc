// PAX_PROFILE's table of step times (step_profile.h).
#include "pax/backend/cpu/step_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>
#include <vector>

#include "pax/core/env_switch.h"
#include "pax/interp/collective_thread.h"

namespace pax::cpu {

StepProfile* StepProfile::get() {
  static StepProfile* profile = env_switch("PAX_PROFILE", false) ? new StepProfile : nullptr;
  return profile;
}

StepProfile::StepProfile() {
  std::atexit([] { get()->print(); });
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

void StepProfile::print() {
  std::lock_guard<std::mutex> lock(mu_);
  if (entries_.empty()) return;
  std::vector<std::pair<std::string, Entry>> rows(entries_.begin(), entries_.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.seconds > b.second.seconds; });
  double total = 0;
  for (const auto& [label, e] : rows) total += e.seconds;
  std::fprintf(stderr, "PAX_PROFILE: %.3f s in executable steps\n%10s %6s %8s  %s\n", total, "ms", "%", "calls",
               "step");
  for (const auto& [label, e] : rows) {
    std::fprintf(stderr, "%10.2f %6.2f %8lld  %s\n", e.seconds * 1e3, 100.0 * e.seconds / total, (long long)e.calls,
                 label.c_str());
  }
  entries_.clear();
  const CommunicationTimes comm = communication_times();
  if (comm.collectives > 0) {
    std::fprintf(stderr,
                 "PAX_PROFILE: communication: %lld jobs, %.3f s communicating, %.3f s waited for (%.1f%% of "
                 "the communication)\n",
                 (long long)comm.collectives, comm.communication_seconds, comm.waiting_seconds,
                 100.0 * comm.waiting_seconds / std::max(comm.communication_seconds, 1e-12));
  }
}

void reset_step_profile() {
  if (StepProfile* profile = StepProfile::get()) {
    profile->reset();
    reset_communication_times();
  }
}

}  // namespace pax::cpu
