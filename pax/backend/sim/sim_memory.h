// The sim device's memory: one reserved range of host address space that
// host code may not touch. Its pages are inaccessible (PROT_NONE) except
// while the sim stream runs a task (a kernel, a copy, an executable), so a
// host read of device memory is a crash (named as such on stderr) rather than
// a silent success, on any machine.
#pragma once

#include <cstddef>
#include <memory>

#include "pax/core/buffer.h"

namespace pax::sim {

// `nbytes` of sim memory on device `index` (a size-class cache: freed blocks
// are reused; a block is freed only after the stream work that holds its
// buffer has run).
std::shared_ptr<Buffer> allocate(size_t nbytes, int index);

// Opens (read/write) or closes (no access) every page handed out so far;
// the stream calls it around each task.
void set_accessible(bool open);

// Bytes of sim memory held by live buffers / reserved address space.
size_t bytes_in_use();
size_t bytes_reserved();

}  // namespace pax::sim
