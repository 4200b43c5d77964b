// The process axis's registry and the single-process axis (see process_axis.h).
#include "pax/interp/process_axis.h"

#include <atomic>

#include "pax/ops/lax.h"

namespace pax {
namespace {

class SingleProcess final : public ProcessAxis {
 public:
  const std::string& name() override { return name_; }
  int64_t size() override { return 1; }
  int64_t index() override { return 0; }
  Array all_reduce(const Array& x, ReduceOp) override { return x; }
  Array all_gather(const Array& x, int64_t axis, bool tiled) override {
    if (tiled) return x;
    Ints shape = x.shape().dims();
    shape.insert(shape.begin() + axis, 1);
    return lax::reshape(x, shape);
  }
  Array reduce_scatter_sum(const Array& x, int64_t) override { return x; }

 private:
  std::string name_ = "processes";
};

ProcessAxis& single_process() {
  static SingleProcess axis;
  return axis;
}

std::atomic<ProcessAxis& (*)()> g_axis{single_process};

}  // namespace

ProcessAxis& process_axis() { return g_axis.load(std::memory_order_acquire)(); }

void install_process_axis(ProcessAxis& (*axis)()) { g_axis.store(axis, std::memory_order_release); }

}  // namespace pax
