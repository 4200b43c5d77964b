// The CPU backend's function table.
#include <omp.h>

#include "pax/backend/backend.h"
#include "pax/backend/cpu/copy.h"
#include "pax/backend/cpu/kernels.h"
#include "pax/core/error.h"

namespace pax {
namespace {

std::shared_ptr<Buffer> cpu_allocate(size_t nbytes) { return Buffer::allocate(nbytes, Device{DeviceKind::cpu, 0}); }
void cpu_copy(void* dst, const void* src, size_t nbytes) { cpu::copy_bytes(dst, src, nbytes); }
KernelFn cpu_kernel(Prim prim) { return cpu::cpu_kernel(prim); }
void cpu_synchronize() {}
int cpu_num_threads() { return omp_get_max_threads(); }
void cpu_set_num_threads(int n) {
  PAX_CHECK(n >= 1, "set_num_threads: need at least 1 thread, got ", n);
  omp_set_num_threads(n);
}

}  // namespace

const Backend& cpu_backend() {
  static const Backend backend{"cpu",        DeviceKind::cpu, cpu_allocate,       cpu_copy,
                               cpu_kernel,   cpu_synchronize, cpu_num_threads,    cpu_set_num_threads};
  return backend;
}

}  // namespace pax
