// The memory check before a run (see memory_check.h).
#include "pax/experiments/memory_check.h"

#include "pax/api/transforms.h"
#include "pax/ops/numpy.h"
#include "pax/ops/random.h"

namespace pax::experiments {

double MemoryNeeds::total() const {
  double sum = 0;
  for (const auto& [what, bytes] : parts) sum += bytes;
  return sum;
}

void refuse_if_short(const MemoryNeeds& needs, const cpu::AvailableMemory& available) {
  if (needs.total() <= available.bytes) return;
  std::string parts;
  for (const auto& [what, bytes] : needs.parts) parts += (parts.empty() ? "" : ", ") + what + " " + format_bytes(bytes);
  PAX_FAIL("the run needs at least ", format_bytes(needs.total()), " (", parts, ") and ", format_bytes(available.bytes),
           " is available (", available.source, "); ", needs.advice);
}

double tree_bytes(const Tree& tree) {
  double bytes = 0;
  for (const Array& leaf : tree_leaves(tree)) bytes += double(leaf.shape().numel()) * double(itemsize(leaf.dtype()));
  return bytes;
}

Tree abstract_batch(const Tree& one_example, int64_t batch_size) {
  return eval_shape([&](const Array&) {
    return tree_map(
        [&](const Array& leaf) {
          std::vector<int64_t> dims = leaf.shape().dims();
          if (!dims.empty()) dims[0] = batch_size;
          return zeros(Shape(dims), leaf.dtype());
        },
        one_example);
  })(random::key(0));
}

}  // namespace pax::experiments
