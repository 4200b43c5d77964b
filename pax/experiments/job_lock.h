// One trainer per job directory: an advisory lock on <job_dir>/job.lock.
//
// The lock is flock(2) on an open descriptor, so the kernel releases it when
// the holder exits in any way (kill -9 included) and nothing stale is left to
// clean up. The holder writes who it is (host, PID, start time, experiment)
// into the file, which a refused trainer quotes. Eval and decode only read a
// job directory and take no lock.
#pragma once

#include <string>

namespace pax::experiments {

// Creates `job_dir` when missing (an existing file in its place, or in place
// of one of its parents, is an error naming it and `what` the directory is,
// "--job_log_dir" or "--output_dir").
void make_job_directory(const std::string& job_dir, const std::string& what = "--job_log_dir");

class JobDirectoryLock {
 public:
  // Takes the lock or throws pax::Error naming the holder: "runs/kjv is in
  // use by another trainer (host h, PID 123, started ...)". `experiment`
  // is recorded for the next refused trainer to name.
  JobDirectoryLock(const std::string& job_dir, const std::string& experiment);
  ~JobDirectoryLock();  // closes the descriptor: the kernel releases the lock
  JobDirectoryLock(const JobDirectoryLock&) = delete;
  JobDirectoryLock& operator=(const JobDirectoryLock&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace pax::experiments
