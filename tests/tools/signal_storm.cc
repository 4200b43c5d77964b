// signal_storm PID COUNT INTERVAL_US SIGNAL...: sends COUNT signals to PID,
// one every INTERVAL_US microseconds, cycling through the SIGNAL numbers.
// Exits 1 as soon as PID no longer exists (the storm ended the process), 2 on
// bad arguments, 0 once every signal was sent. Used by tests/signal_storm.sh.
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: signal_storm PID COUNT INTERVAL_US SIGNAL...\n");
    return 2;
  }
  const pid_t pid = pid_t(std::atol(argv[1]));
  const long count = std::atol(argv[2]);
  const long interval_us = std::atol(argv[3]);
  std::vector<int> signals;
  for (int i = 4; i < argc; ++i) signals.push_back(std::atoi(argv[i]));
  if (pid <= 0 || count < 0 || interval_us < 0) {
    std::fprintf(stderr, "signal_storm: bad PID, COUNT or INTERVAL_US\n");
    return 2;
  }
  for (long i = 0; i < count; ++i) {
    if (::kill(pid, signals[size_t(i) % signals.size()]) != 0) {
      std::fprintf(stderr, "signal_storm: process %ld is gone after %ld signals (errno %d)\n", long(pid), i, errno);
      return 1;
    }
    ::usleep(useconds_t(interval_us));
  }
  return 0;
}
