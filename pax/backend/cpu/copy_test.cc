// The strided copy engine's transposes against a reference loop: every
// element width (1, 2 and 4 bytes go through oneDNN's reorder when large, 8
// through the tiled loop), several permutations of 2 to 4 axes, small and
// large, with NaN bit patterns kept.
#include "pax/backend/cpu/copy.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <vector>

namespace pax::cpu {
namespace {

template <class T>
void expect_transpose(const std::vector<int64_t>& dims, const std::vector<size_t>& perm) {
  const size_t rank = dims.size();
  std::vector<int64_t> src_strides(rank), out_dims(rank), out_strides(rank), dst_strides(rank);
  int64_t n = 1;
  for (size_t d = rank; d-- > 0;) {
    src_strides[d] = n;
    n *= dims[d];
  }
  for (size_t d = 0; d < rank; ++d) out_dims[d] = dims[perm[d]];
  int64_t m = 1;
  for (size_t d = rank; d-- > 0;) {
    out_strides[d] = m;
    m *= out_dims[d];
  }
  for (size_t d = 0; d < rank; ++d) dst_strides[perm[d]] = out_strides[d];  // source axis -> its place in the output
  std::vector<T> src(static_cast<size_t>(n)), dst(static_cast<size_t>(n)), want(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const uint64_t bits = uint64_t(i) * 0x9e3779b97f4a7c15ull;
    std::memcpy(&src[size_t(i)], &bits, sizeof(T));  // any bit pattern, NaNs included
  }
  std::vector<int64_t> idx(rank, 0);
  for (int64_t i = 0; i < n; ++i) {
    int64_t so = 0, dof = 0;
    for (size_t d = 0; d < rank; ++d) {
      so += idx[d] * src_strides[d];
      dof += idx[d] * dst_strides[d];
    }
    want[size_t(dof)] = src[size_t(so)];
    for (size_t d = rank; d-- > 0;) {
      if (++idx[d] < dims[d]) break;
      idx[d] = 0;
    }
  }
  strided_copy(sizeof(T), dims, src.data(), src_strides, dst.data(), dst_strides);
  EXPECT_EQ(std::memcmp(dst.data(), want.data(), size_t(n) * sizeof(T)), 0)
      << "width " << sizeof(T) << ", " << dims.size() << " axes, " << n << " elements";
}

template <class T>
void all_cases() {
  expect_transpose<T>({37, 53}, {1, 0});
  expect_transpose<T>({512, 300}, {1, 0});
  expect_transpose<T>({8, 4, 256, 64}, {0, 2, 1, 3});  // attention heads: (B, N, T, H) -> (B, T, N, H)
  expect_transpose<T>({8, 4, 64, 256}, {0, 3, 1, 2});
  expect_transpose<T>({3, 200, 130}, {2, 1, 0});
  expect_transpose<T>({16, 9, 11, 33}, {3, 2, 0, 1});
}

TEST(StridedCopy, TransposesMoveEveryBitOfEveryWidth) {
  all_cases<uint8_t>();
  all_cases<uint16_t>();
  all_cases<uint32_t>();
  all_cases<uint64_t>();
}

}  // namespace
}  // namespace pax::cpu
