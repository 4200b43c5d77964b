// The sim device's stream: one thread that runs the device's work in the
// order it was queued (kernels, copies, executables, device-side loops),
// with the device memory open only while a task runs. Host calls return once
// their work is queued; host reads wait for it (wait / synchronize), and each
// such wait is counted, so that a test can see how often the host waited.
//
// Work queued from the stream thread itself (an executable's own eager
// operations, a loop's body) runs at once, in place.
#pragma once

#include <cstdint>
#include <functional>

namespace pax::sim {

// Queues `task` on device `index`'s stream (runs it now when called on that
// stream). A task that throws is reported by the next wait or synchronize;
// the tasks queued after it are skipped until then.
void enqueue(int index, std::function<void()> task);
// The number of tasks queued on the stream so far (an event).
uint64_t record(int index);
// Waits until the tasks up to `event` have run; rethrows a task's failure.
void wait(int index, uint64_t event);
void synchronize(int index);
// Whether the calling thread is a sim stream.
bool on_stream();
// How many times host threads have waited for a sim stream.
uint64_t host_waits();

}  // namespace pax::sim
