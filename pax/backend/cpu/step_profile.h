// PAX_PROFILE=1: every CPU executable times its steps; the times are summed
// per step label (operation and shapes) and printed to stderr at exit,
// heaviest first, so that the cost of a compiled program can be broken down
// without an external profiler. A benchmark forgets its warm-up calls with
// reset_step_profile(): the first calls also fault in the arena's pages.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace pax::cpu {

class StepProfile {
 public:
  // The process-wide profile, printed at exit, or nullptr when PAX_PROFILE is
  // off (pax::env_switch).
  static StepProfile* get();
  void add(const std::string& label, double seconds);
  void reset();
  // The table printed at exit: the total, then a row per label (time, share,
  // calls), heaviest first; empty when nothing was timed.
  std::string table();

 private:
  struct Entry {
    double seconds = 0;
    int64_t calls = 0;
  };
  std::mutex mu_;
  std::map<std::string, Entry> entries_;
};

// Forgets the step times and communication times gathered so far (no-op when
// PAX_PROFILE is off): the table printed at exit counts only what ran after.
void reset_step_profile();

}  // namespace pax::cpu
