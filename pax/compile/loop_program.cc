// Coalescing the views of fused loops (see loop_program.h).
#include "pax/compile/loop_program.h"

#include <utility>

namespace pax {

void coalesce_view(std::vector<int64_t>& dims, std::vector<int64_t>& strides) {
  std::vector<int64_t> d_out, s_out;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == 1) continue;
    if (!d_out.empty() && s_out.back() == strides[d] * dims[d]) {
      d_out.back() *= dims[d];
      s_out.back() = strides[d];
      continue;
    }
    d_out.push_back(dims[d]);
    s_out.push_back(strides[d]);
  }
  if (d_out.empty()) {
    d_out = {1};
    s_out = {0};
  }
  dims = std::move(d_out);
  strides = std::move(s_out);
}

}  // namespace pax
