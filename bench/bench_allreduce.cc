// All-reduce bandwidth of the process group beside memcpy bandwidth, for f32
// buffers of 1 MiB to 256 MiB. Run it under mpirun:
//
//   OMP_NUM_THREADS=1 mpirun -np 2 build-bench/bench/bench_allreduce [--reps N]
//
// For every size the processes meet at a barrier, run `reps` sum all-reduces
// of the same array (each returning a new one, as a step's gradient
// reduction does) and rank 0 prints the median time and the bus bandwidth,
// NCCL's figure for comparing collectives across process counts:
// 2 (n - 1) / n * bytes / time (on 2 processes, bytes / time). memcpy is one
// process copying the same number of bytes between two warm buffers while the
// others wait. A plain program rather than Google Benchmark: the processes
// must run the same number of iterations.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "pax/dist/process_group.h"
#include "pax/ops/numpy.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

}  // namespace

int main(int argc, char** argv) {
  int reps = 10;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--reps") reps = std::max(1, std::atoi(argv[i + 1]));
  pax::dist::ProcessGroup& group = pax::dist::process_group();
  const int n = group.process_count(), me = group.process_index();
  if (me == 0) {
    std::printf("processes %d, %d reps per size (medians)\n", n, reps);
    std::printf("%10s %14s %16s %14s %16s\n", "MiB", "all_reduce ms", "bus GB/s", "memcpy ms", "memcpy GB/s");
  }
  for (int64_t mib : {1, 4, 16, 64, 256}) {
    const int64_t bytes = mib << 20, elements = bytes / 4;
    const pax::Array x = pax::full({elements}, double(me + 1), pax::DType::f32);
    group.all_reduce(x);  // warm-up: buffers allocated, pages touched
    std::vector<double> times;
    for (int r = 0; r < reps; ++r) {
      group.barrier();
      const auto t0 = Clock::now();
      const pax::Array y = group.all_reduce(x);
      times.push_back(seconds(t0, Clock::now()));
    }
    const double t_reduce = median(times);
    // Check the result once: the sum of 1..n everywhere.
    const float want = float(n * (n + 1) / 2);
    const float got = group.all_reduce(x).to_vector<float>()[size_t(elements - 1)];
    if (got != want) {
      std::fprintf(stderr, "bench_allreduce: wrong sum %g, expected %g\n", double(got), double(want));
      return 1;
    }
    group.barrier();
    double t_copy = 0;
    if (me == 0) {
      std::vector<char> src(size_t(bytes), 1), dst(size_t(bytes), 0);
      std::memcpy(dst.data(), src.data(), size_t(bytes));
      std::vector<double> copies;
      for (int r = 0; r < reps; ++r) {
        const auto t0 = Clock::now();
        std::memcpy(dst.data(), src.data(), size_t(bytes));
        copies.push_back(seconds(t0, Clock::now()));
        src[size_t(r) % src.size()] = char(dst[size_t(bytes - 1)] + r);  // keeps the copy observable
      }
      t_copy = median(copies);
      const double bus = 2.0 * (n - 1) / n * double(bytes) / t_reduce / 1e9;
      std::printf("%10lld %14.2f %16.2f %14.2f %16.2f\n", static_cast<long long>(mib), t_reduce * 1e3, bus,
                  t_copy * 1e3, double(bytes) / t_copy / 1e9);
      std::fflush(stdout);
    }
    group.barrier();
  }
  return 0;
}
