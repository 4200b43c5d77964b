// The replacement of the standard library's operator new (its array and
// nothrow forms call this one): the same loop of malloc, the new handler and
// std::bad_alloc, but a failed request first records its size and the
// caller's purpose (pax::AllocationPurpose), which the new handler is not
// told, for the out-of-memory error. Weak, and in a file of its own: a
// program's own operator new wins over it, also where the static library is
// linked whole.
#include <cstdlib>
#include <new>

#include "pax/core/buffer.h"

__attribute__((weak)) void* operator new(std::size_t bytes) {
  for (;;) {
    if (void* p = std::malloc(bytes == 0 ? 1 : bytes)) return p;
    pax::detail::record_failed_allocation(bytes == 0 ? 1 : bytes);
    const std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) throw std::bad_alloc();
    handler();
  }
}
