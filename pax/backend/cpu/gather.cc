// Gather kernel (see gather.h). The output is walked in row-major order as
// rows of its innermost (merged) dimension. When that dimension is a slice
// axis, a row is one run of a single slice: a memcpy for contiguous slices
// (embedding lookup). When it is a batch axis, every element has its own
// start index (take / take_along_axis): a per-element gather. Either way
// writes are sequential and each output element is written exactly once.
#include "pax/backend/cpu/gather.h"

#include <algorithm>
#include <cstring>

#include "pax/backend/cpu/dispatch.h"
#include "pax/backend/cpu/gather_common.h"
#include "pax/core/parallel.h"

namespace pax::cpu {
namespace {

// Output dims carry a = operand stride (slice axes; 0 for batch axes) and
// b = stride in the flattened batch index (batch axes; 0 for slice axes).
struct Plan {
  std::vector<Dim2> outer;
  Dim2 inner{1, 0, 0};
  int64_t rows = 1;
  int64_t k = 0;  // index vector length
  StartIndexMap map;
};

// Long rows are split so that a few rows (or one) still spread over threads.
constexpr int64_t kBlock = 8192;

// kK > 0: the index vector length, fixed at compile time for the common
// short ones.
template <int kK, class T, class I>
void gather_typed(const Plan& p, const T* src, const I* idx, T* dst, T fill) {
  const Dim2 in = p.inner;
  const int64_t blk = std::min(in.size, kBlock);
  const int64_t nblk = (in.size + blk - 1) / blk;
  const int64_t bytes_per_unit = blk * int64_t(sizeof(T) + (in.b ? p.k * sizeof(I) : 0));
  parallel_for(p.rows * nblk, grain_for(bytes_per_unit), [&](int64_t ub, int64_t ue) {
    Odometer2 od(p.outer);
    int64_t row = ub / nblk, part = ub % nblk;
    od.reset(row);
    for (int64_t u = ub; u < ue; ++u, ++part) {
      if (part == nblk) {
        part = 0;
        ++row;
        od.next();
      }
      const int64_t i0 = part * blk;
      const int64_t i1 = std::min(in.size, i0 + blk);
      T* out = dst + row * in.size;
      if (in.b == 0) {
        // One slice: a run with the operand stride of the inner slice axis.
        const int64_t base = start_offset<kK>(idx + od.b * p.k, p.map);
        if (base < 0) {
          std::fill(out + i0, out + i1, fill);
          continue;
        }
        const T* s = src + base + od.a;
        if (in.a == 1) {
          std::memcpy(out + i0, s + i0, size_t(i1 - i0) * sizeof(T));
        } else {
          for (int64_t i = i0; i < i1; ++i) out[i] = s[i * in.a];
        }
      } else {
        // A new slice per element.
        const I* iv = idx + (od.b + i0 * in.b) * p.k;
        const int64_t iv_step = in.b * p.k;
        const T* s = src + od.a;
        for (int64_t i = i0; i < i1; ++i, iv += iv_step) {
          const int64_t base = start_offset<kK>(iv, p.map);
          out[i] = base < 0 ? fill : s[base];
        }
      }
    }
  });
}

}  // namespace

void gather(const GatherSpec& spec, const TensorView& operand, const TensorView& indices, const TensorView& out) {
  if (out.numel() == 0) return;
  const Shape& os = *operand.shape;
  const std::vector<int64_t> ostr = os.strides();

  Plan p;
  p.k = int64_t(spec.start_index_map.size());
  p.map.clip = !spec.fill;
  for (int64_t d : spec.start_index_map) {
    p.map.max_start.push_back(os[d] - spec.slice_sizes[size_t(d)]);
    p.map.stride.push_back(ostr[size_t(d)]);
  }

  // Slice axes (operand order) and batch strides (row-major over indices[:-1]).
  std::vector<int64_t> slice_axes;
  for (int64_t d = 0; d < os.rank(); ++d) {
    const auto& c = spec.collapsed_slice_dims;
    if (std::find(c.begin(), c.end(), d) == c.end()) slice_axes.push_back(d);
  }
  const int64_t nbatch = indices.rank() - 1;
  std::vector<int64_t> bstr(size_t(nbatch), 1);
  for (int64_t i = nbatch - 1; i > 0; --i) bstr[size_t(i - 1)] = bstr[size_t(i)] * indices.dim(i);

  std::vector<Dim2> dims;
  size_t next_slice = 0, next_batch = 0;
  for (int64_t q = 0; q < out.rank(); ++q) {
    const auto& od = spec.offset_dims;
    if (std::find(od.begin(), od.end(), q) != od.end()) {
      dims.push_back(Dim2{out.dim(q), ostr[size_t(slice_axes[next_slice++])], 0});
    } else {
      dims.push_back(Dim2{out.dim(q), 0, bstr[next_batch++]});
    }
  }
  p.outer = simplify_dims(dims);
  if (!p.outer.empty()) {
    p.inner = p.outer.back();
    p.outer.pop_back();
  }
  for (const Dim2& d : p.outer) p.rows *= d.size;

  visit_width(itemsize(operand.dtype), [&](auto w) {
    using T = decltype(w);
    T fill{};
    convert_host(DType::f64, &spec.fill_value, operand.dtype, &fill, 1);
    visit_index_dtype(indices.dtype, [&](auto i) {
      using I = decltype(i);
      const T* src = static_cast<const T*>(operand.data);
      const I* idx = static_cast<const I*>(indices.data);
      T* dst = static_cast<T*>(out.data);
      if (p.k == 1) gather_typed<1>(p, src, idx, dst, fill);
      else if (p.k == 2) gather_typed<2>(p, src, idx, dst, fill);
      else gather_typed<0>(p, src, idx, dst, fill);
    });
  });
}

}  // namespace pax::cpu
