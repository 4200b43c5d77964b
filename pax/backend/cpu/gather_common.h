// Pieces shared by the gather and scatter-add kernels: decoding a start-index
// vector into an operand offset (clamped for gather "clip", rejected for gather
// "fill" and scatter's drop), and an odometer walking an index space with two
// strided offsets.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "pax/core/dtype.h"
#include "pax/core/error.h"

namespace pax::cpu {

// Calls f(I{}) with the C++ type of an integer index dtype.
template <class F>
decltype(auto) visit_index_dtype(DType d, F&& f) {
  switch (d) {
    case DType::u8: return f(uint8_t{});
    case DType::u32: return f(uint32_t{});
    case DType::i32: return f(int32_t{});
    case DType::i64: return f(int64_t{});
    default: break;
  }
  PAX_FAIL("index dtype must be an integer dtype, got ", dtype_name(d));
}

// One entry per index-vector component.
struct StartIndexMap {
  std::vector<int64_t> max_start;  // operand dim - window size along the mapped axis
  std::vector<int64_t> stride;     // operand stride (elements) of the mapped axis
  bool clip = true;                // clamp into range; otherwise out-of-range gives -1
};

// Offset of the window whose index vector is iv[0..K), or -1 when an index is
// out of range and the map does not clip. `*coord` receives the start along
// component `coord_k` when coord_k >= 0. kK > 0 fixes K at compile time.
template <int kK = 0, class I>
inline int64_t start_offset(const I* iv, const StartIndexMap& m, int64_t coord_k = -1, int64_t* coord = nullptr) {
  int64_t off = 0;
  const size_t k_count = kK > 0 ? size_t(kK) : m.stride.size();
  for (size_t k = 0; k < k_count; ++k) {
    int64_t s = int64_t(iv[k]);
    if (s < 0 || s > m.max_start[k]) {
      if (!m.clip) return -1;
      s = std::clamp<int64_t>(s, 0, m.max_start[k]);
    }
    if (int64_t(k) == coord_k) *coord = s;
    off += s * m.stride[k];
  }
  return off;
}

// A dimension of an index space with the strides of two layouts.
struct Dim2 {
  int64_t size;
  int64_t a;
  int64_t b;
};

// Drops size-1 dimensions and merges neighbours contiguous in both strides.
inline std::vector<Dim2> simplify_dims(std::span<const Dim2> dims) {
  std::vector<Dim2> out;
  for (const Dim2& d : dims) {
    if (d.size == 1) continue;
    if (!out.empty() && out.back().a == d.a * d.size && out.back().b == d.b * d.size) {
      out.back() = Dim2{out.back().size * d.size, d.a, d.b};
      continue;
    }
    out.push_back(d);
  }
  return out;
}

// Row-major walk over `dims`, tracking the offsets a and b.
class Odometer2 {
 public:
  explicit Odometer2(std::span<const Dim2> dims) : dims_(dims), idx_(dims.size(), 0) {}
  void reset(int64_t flat) {
    a = b = 0;
    for (size_t k = dims_.size(); k-- > 0;) {
      idx_[k] = flat % dims_[k].size;
      flat /= dims_[k].size;
      a += idx_[k] * dims_[k].a;
      b += idx_[k] * dims_[k].b;
    }
  }
  void next() {
    for (size_t k = dims_.size(); k-- > 0;) {
      a += dims_[k].a;
      b += dims_[k].b;
      if (++idx_[k] < dims_[k].size) return;
      a -= dims_[k].a * dims_[k].size;
      b -= dims_[k].b * dims_[k].size;
      idx_[k] = 0;
    }
  }
  int64_t a = 0, b = 0;

 private:
  std::span<const Dim2> dims_;
  std::vector<int64_t> idx_;
};

}  // namespace pax::cpu
