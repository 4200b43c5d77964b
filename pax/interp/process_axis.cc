// The process axes' registry and the single-process axis (see process_axis.h).
#include "pax/interp/process_axis.h"

#include <atomic>
#include <mutex>

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
  Array permute(const Array& x, const std::vector<std::pair<int64_t, int64_t>>& pairs) override {
    for (const auto& pair : pairs)
      if (pair == std::pair<int64_t, int64_t>{0, 0}) return x;
    return lax::broadcast_in_dim(scalar(0.0, x.dtype()), x.shape().dims(), {});  // zeros, even where x is not finite
  }

 private:
  std::string name_ = "processes";
};

ProcessAxis& single_process() {
  static SingleProcess axis;
  return axis;
}

ProcessAxis* find_single(const std::string& name) {
  return name == single_process().name() ? &single_process() : nullptr;
}

std::vector<std::string> single_names() { return {single_process().name()}; }

constinit ProcessAxes g_single{single_process, find_single, single_names};
std::atomic<const ProcessAxes*> g_axes{&g_single};

}  // namespace

ProcessAxis& process_axis() { return g_axes.load(std::memory_order_acquire)->world(); }

ProcessAxis* find_process_axis(const std::string& name) { return g_axes.load(std::memory_order_acquire)->find(name); }

std::vector<std::string> process_axis_names() { return g_axes.load(std::memory_order_acquire)->names(); }

ProcessAxis& bound_process_axis(const std::string& name, const char* op) {
  if (ProcessAxis* axis = find_process_axis(name)) return *axis;
  const std::vector<std::string> names = process_axis_names();
  std::string bound;
  for (size_t i = 0; i < names.size(); ++i)
    bound += (i == 0 ? "'" : i + 1 == names.size() ? "' or '" : "', '") + names[i];
  PAX_FAIL(op, ": unbound axis name '", name, "'; collectives need an enclosing vmap with axis_name='", name,
           "' or a process axis (now named ", bound, "')");
}

void install_process_axes(const ProcessAxes& axes) {
  // Each installation is published whole and kept (a reader may still hold
  // the one before); installations are few (one per library, and tests).
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  g_axes.store(new ProcessAxes(axes), std::memory_order_release);
}

ProcessAxes current_process_axes() { return *g_axes.load(std::memory_order_acquire); }

}  // namespace pax
