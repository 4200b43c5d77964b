// dot_general against a slow f64 reference loop: transposed operands, batch
// axes in any position, vectors and scalars, zero sizes, every dtype, the
// transformer shapes, and every error of the shape rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <cstdint>
#include <thread>
#include <vector>

#include "pax/interp/interpreter.h"
#include "pax/ops/lax.h"
#include "pax/testing/testing.h"

namespace pax {
namespace {

using testing::all_close;
using testing::random_array;
using testing::ravel;
using testing::unravel;

// Output axes: batch, lhs free, rhs free; sums over the contracting axes in f64.
std::vector<double> reference_dot(const Array& lhs, const Array& rhs, const lax::DotDimensionNumbers& dn) {
  const std::vector<double> l = lhs.to_vector<double>(), r = rhs.to_vector<double>();
  auto free_of = [](int64_t rank, const Ints& c, const Ints& b) {
    Ints f;
    for (int64_t a = 0; a < rank; ++a)
      if (std::find(c.begin(), c.end(), a) == c.end() && std::find(b.begin(), b.end(), a) == b.end()) f.push_back(a);
    return f;
  };
  const Ints lf = free_of(lhs.ndim(), dn.lhs_contracting, dn.lhs_batch);
  const Ints rf = free_of(rhs.ndim(), dn.rhs_contracting, dn.rhs_batch);
  std::vector<int64_t> out_dims, k_dims;
  for (int64_t a : dn.lhs_batch) out_dims.push_back(lhs.dim(a));
  for (int64_t a : lf) out_dims.push_back(lhs.dim(a));
  for (int64_t a : rf) out_dims.push_back(rhs.dim(a));
  for (int64_t a : dn.lhs_contracting) k_dims.push_back(lhs.dim(a));
  int64_t out_n = 1, k_n = 1;
  for (int64_t d : out_dims) out_n *= d;
  for (int64_t d : k_dims) k_n *= d;
  std::vector<double> out(size_t(out_n), 0.0);
  for (int64_t o = 0; o < out_n; ++o) {
    const std::vector<int64_t> oi = unravel(o, Shape(out_dims));
    std::vector<int64_t> li(size_t(lhs.ndim())), ri(size_t(rhs.ndim()));
    size_t pos = 0;
    for (size_t i = 0; i < dn.lhs_batch.size(); ++i, ++pos) {
      li[size_t(dn.lhs_batch[i])] = oi[pos];
      ri[size_t(dn.rhs_batch[i])] = oi[pos];
    }
    for (int64_t a : lf) li[size_t(a)] = oi[pos++];
    for (int64_t a : rf) ri[size_t(a)] = oi[pos++];
    double acc = 0.0;
    for (int64_t k = 0; k < k_n; ++k) {
      const std::vector<int64_t> ki = unravel(k, Shape(k_dims));
      for (size_t i = 0; i < ki.size(); ++i) {
        li[size_t(dn.lhs_contracting[i])] = ki[i];
        ri[size_t(dn.rhs_contracting[i])] = ki[i];
      }
      acc += l[size_t(ravel(li, lhs.shape()))] * r[size_t(ravel(ri, rhs.shape()))];
    }
    out[size_t(o)] = acc;
  }
  return out;
}

// Runs dot_general on random operands and compares with the reference.
void check_dot(const Shape& ls, const Shape& rs, const lax::DotDimensionNumbers& dn, const Shape& want_shape,
               DType dtype = DType::f32, double tol = 1e-5) {
  Array lhs = random_array(ls, dtype, 1), rhs = random_array(rs, dtype, 2);
  Array out = lax::dot_general(lhs, rhs, dn);
  EXPECT_EQ(out.shape(), want_shape);
  EXPECT_EQ(out.dtype(), dtype);
  EXPECT_TRUE(all_close(out, reference_dot(lhs, rhs, dn), tol, tol)) << ls << " x " << rs;
}

TEST(DotGeneral, PlainMatmul) {
  check_dot({5, 7}, {7, 3}, {{1}, {0}, {}, {}}, {5, 3});
  check_dot({33, 70}, {70, 45}, {{1}, {0}, {}, {}}, {33, 45});
  // Hand-computed.
  Array a = array<float>({1, 2, 3, 4}, {2, 2}), b = array<float>({5, 6, 7, 8}, {2, 2});
  EXPECT_TRUE(all_close(lax::dot_general(a, b, {{1}, {0}, {}, {}}), {19, 22, 43, 50}));
}

TEST(DotGeneral, TransposedOperands) {
  check_dot({7, 5}, {7, 3}, {{0}, {0}, {}, {}}, {5, 3});  // A^T B
  check_dot({5, 7}, {3, 7}, {{1}, {1}, {}, {}}, {5, 3});  // A B^T
  check_dot({7, 5}, {3, 7}, {{0}, {1}, {}, {}}, {5, 3});  // A^T B^T
  check_dot({64, 40}, {64, 48}, {{0}, {0}, {}, {}}, {40, 48});
}

TEST(DotGeneral, MultipleContractingAxes) {
  check_dot({3, 4, 5}, {4, 5, 2}, {{1, 2}, {0, 1}, {}, {}}, {3, 2});
  // Pairs in an order that merges in neither operand: an operand is copied.
  check_dot({3, 4, 5}, {5, 4, 2}, {{1, 2}, {1, 0}, {}, {}}, {3, 2});
  check_dot({4, 3, 5}, {5, 2, 4}, {{2, 0}, {0, 2}, {}, {}}, {3, 2});
}

TEST(DotGeneral, BatchedFirst) {
  check_dot({4, 5, 7}, {4, 7, 3}, {{2}, {1}, {0}, {0}}, {4, 5, 3});
  // Attention scores: [B,H,T,D] x [B,H,S,D] contracting D.
  check_dot({2, 3, 6, 8}, {2, 3, 5, 8}, {{3}, {3}, {0, 1}, {0, 1}}, {2, 3, 6, 5});
  // Attention output: [B,H,T,S] x [B,H,S,D] contracting S.
  check_dot({2, 3, 6, 5}, {2, 3, 5, 8}, {{3}, {2}, {0, 1}, {0, 1}}, {2, 3, 6, 8});
}

TEST(DotGeneral, BatchInTheMiddleAndLast) {
  check_dot({5, 4, 7}, {7, 4, 3}, {{2}, {0}, {1}, {1}}, {4, 5, 3});
  check_dot({6, 2, 8, 3}, {3, 8, 5}, {{2}, {1}, {3}, {0}}, {3, 6, 2, 5});
  check_dot({5, 7, 4}, {4, 7, 3}, {{1}, {1}, {2}, {0}}, {4, 5, 3});  // batch innermost in lhs
  // Batch axes given in another order than the layout.
  check_dot({2, 3, 4, 5}, {3, 2, 5, 6}, {{3}, {2}, {1, 0}, {0, 1}}, {3, 2, 4, 6});
}

// Attention over (batch, seq, heads, dim) arrays: the batch axes (batch,
// heads) have the sequence axis between them, so they are two strided batch
// dimensions of one product (or copied, when an operand's other axes do not
// merge). f32, and bf16 with f32 and bf16 results.
TEST(DotGeneral, BatchAxesApartInTheLayout) {
  const lax::DotDimensionNumbers scores{{3}, {3}, {0, 2}, {0, 2}};      // [B,S,H,D] x [B,T,H,D] -> [B,H,S,T]
  const lax::DotDimensionNumbers values{{3}, {1}, {0, 1}, {0, 2}};      // [B,H,S,T] x [B,T,H,D] -> [B,H,S,D]
  const lax::DotDimensionNumbers grad_v{{2}, {1}, {0, 1}, {0, 2}};      // [B,H,S,T] x [B,S,H,D] -> [B,H,T,D]
  const lax::DotDimensionNumbers grad_p{{3}, {3}, {0, 1}, {0, 2}};      // [B,H,S,D] x [B,T,H,D] -> [B,H,S,T]
  const lax::DotDimensionNumbers heads_last{{1}, {1}, {0, 3}, {3, 0}};  // batch pairs out of layout order
  check_dot({2, 6, 3, 8}, {2, 5, 3, 8}, scores, {2, 3, 6, 5});
  check_dot({2, 3, 6, 5}, {2, 5, 3, 8}, values, {2, 3, 6, 8});
  check_dot({2, 3, 6, 5}, {2, 6, 3, 8}, grad_v, {2, 3, 5, 8});
  check_dot({2, 3, 6, 8}, {2, 5, 3, 8}, grad_p, {2, 3, 6, 5});
  check_dot({2, 7, 4, 3}, {3, 7, 5, 2}, heads_last, {2, 3, 4, 5});
  check_dot({3, 40, 4, 16}, {3, 33, 4, 16}, scores, {3, 4, 40, 33});
  for (DType out : {DType::f32, DType::bf16}) {
    const double tol = out == DType::f32 ? 1e-5 : 1e-2;  // f32 sums of bf16 products, rounded once for bf16
    Array q = random_array({2, 33, 4, 16}, DType::bf16, 21), k = random_array({2, 20, 4, 16}, DType::bf16, 22);
    EXPECT_TRUE(all_close(lax::dot_general(q, k, scores, out), reference_dot(q, k, scores), tol, tol));
    Array p = random_array({2, 4, 33, 20}, DType::bf16, 23);
    EXPECT_TRUE(all_close(lax::dot_general(p, k, values, out), reference_dot(p, k, values), tol, tol));
    EXPECT_TRUE(all_close(lax::dot_general(p, q, grad_v, out), reference_dot(p, q, grad_v), tol, tol));
  }
}

TEST(DotGeneral, SizeOneAxes) {
  check_dot({1, 5, 1, 7}, {7, 1, 3}, {{3, 0}, {0, 1}, {}, {}}, {5, 1, 3});
  check_dot({1, 5, 1, 7}, {1, 7, 1, 3}, {{3}, {1}, {0, 2}, {2, 0}}, {1, 1, 5, 3});
  check_dot({5, 1}, {1, 4}, {{1}, {0}, {}, {}}, {5, 4});
  check_dot({1, 6, 1}, {6, 1}, {{1}, {0}, {}, {}}, {1, 1, 1});
}

TEST(DotGeneral, VectorsAndScalars) {
  check_dot({9}, {9}, {{0}, {0}, {}, {}}, {});           // vector dot
  check_dot({6, 9}, {9}, {{1}, {0}, {}, {}}, {6});       // matrix-vector
  check_dot({9}, {9, 6}, {{0}, {0}, {}, {}}, {6});       // vector-matrix
  check_dot({6, 9}, {6}, {{0}, {0}, {}, {}}, {9});       // transposed matrix-vector
  check_dot({4}, {5}, {{}, {}, {}, {}}, {4, 5});         // outer product
  check_dot({}, {3, 2}, {{}, {}, {}, {}}, {3, 2});       // scalar times matrix
  check_dot({}, {}, {{}, {}, {}, {}}, {});               // scalar product
  check_dot({3, 7}, {3, 7}, {{1}, {1}, {0}, {0}}, {3});  // batched dot products
  EXPECT_TRUE(all_close(lax::dot_general(array<float>({1, 2, 3}), array<float>({4, 5, 6}), {{0}, {0}, {}, {}}), {32}));
}

TEST(DotGeneral, ZeroSizes) {
  Array k0 =
      lax::dot_general(random_array({3, 0}, DType::f32, 1), random_array({0, 4}, DType::f32, 2), {{1}, {0}, {}, {}});
  EXPECT_EQ(k0.shape(), (Shape{3, 4}));
  EXPECT_TRUE(all_close(k0, std::vector<double>(12, 0.0)));
  Array k0i =
      lax::dot_general(random_array({2, 0}, DType::i32, 1), random_array({0, 2}, DType::i32, 2), {{1}, {0}, {}, {}});
  EXPECT_TRUE(all_close(k0i, {0, 0, 0, 0}));
  Array m0 =
      lax::dot_general(random_array({0, 5}, DType::f32, 1), random_array({5, 4}, DType::f32, 2), {{1}, {0}, {}, {}});
  EXPECT_EQ(m0.shape(), (Shape{0, 4}));
  Array b0 = lax::dot_general(random_array({0, 2, 5}, DType::bf16, 1), random_array({0, 5, 3}, DType::bf16, 2),
                              {{2}, {1}, {0}, {0}});
  EXPECT_EQ(b0.shape(), (Shape{0, 2, 3}));
}

TEST(DotGeneral, BFloat16) {
  const lax::DotDimensionNumbers dn{{1}, {0}, {}, {}};
  Array a = random_array({17, 40}, DType::bf16, 3), b = random_array({40, 23}, DType::bf16, 4);
  const std::vector<double> want = reference_dot(a, b, dn);  // of the bf16 values, in f64
  Array out = lax::dot_general(a, b, dn);
  EXPECT_EQ(out.dtype(), DType::bf16);
  EXPECT_TRUE(all_close(out, want, 1e-2, 1e-2));  // one bf16 rounding of an f32 sum
  Array f = lax::dot_general(a, b, dn, DType::f32);
  EXPECT_EQ(f.dtype(), DType::f32);
  EXPECT_TRUE(all_close(f, want, 1e-5, 1e-5));  // accumulated in f32
  // Transposed and batched bf16 operands.
  Array at = random_array({40, 17}, DType::bf16, 5);
  EXPECT_TRUE(all_close(lax::dot_general(at, b, {{0}, {0}, {}, {}}, DType::f32),
                        reference_dot(at, b, {{0}, {0}, {}, {}}), 1e-5, 1e-5));
  Array q = random_array({2, 3, 6, 8}, DType::bf16, 6), k = random_array({2, 3, 5, 8}, DType::bf16, 7);
  const lax::DotDimensionNumbers attn{{3}, {3}, {0, 1}, {0, 1}};
  EXPECT_TRUE(all_close(lax::dot_general(q, k, attn, DType::f32), reference_dot(q, k, attn), 1e-5, 1e-5));
  Array bm = random_array({5, 4, 7}, DType::bf16, 8), bn = random_array({7, 4, 3}, DType::bf16, 9);
  EXPECT_TRUE(all_close(lax::dot_general(bm, bn, {{2}, {0}, {1}, {1}}), reference_dot(bm, bn, {{2}, {0}, {1}, {1}}),
                        1e-2, 1e-2));
  // bf16 inputs asking for f16 or f64 results.
  EXPECT_TRUE(all_close(lax::dot_general(a, b, dn, DType::f16), want, 2e-3, 2e-3));
  EXPECT_TRUE(all_close(lax::dot_general(a, b, dn, DType::f64), want, 1e-12, 1e-12));
}

TEST(DotGeneral, Float16) {
  const lax::DotDimensionNumbers dn{{0}, {1}, {}, {}};
  Array a = random_array({30, 9}, DType::f16, 3), b = random_array({11, 30}, DType::f16, 4);
  const std::vector<double> want = reference_dot(a, b, dn);
  Array out = lax::dot_general(a, b, dn);
  EXPECT_EQ(out.dtype(), DType::f16);
  EXPECT_TRUE(all_close(out, want, 2e-3, 2e-3));
  Array f = lax::dot_general(a, b, dn, DType::f32);
  EXPECT_EQ(f.dtype(), DType::f32);
  EXPECT_TRUE(all_close(f, want, 1e-5, 1e-5));
}

TEST(DotGeneral, Float64) {
  check_dot({13, 29}, {29, 7}, {{1}, {0}, {}, {}}, {13, 7}, DType::f64, 1e-12);
  check_dot({29, 13}, {7, 29}, {{0}, {1}, {}, {}}, {13, 7}, DType::f64, 1e-12);
  check_dot({3, 40, 33}, {3, 33, 300}, {{2}, {1}, {0}, {0}}, {3, 40, 300}, DType::f64, 1e-12);
  check_dot({5, 4, 7}, {7, 4, 3}, {{2}, {0}, {1}, {1}}, {4, 5, 3}, DType::f64, 1e-12);
  // f32 inputs asking for f64.
  Array a = random_array({6, 5}, DType::f32, 1), b = random_array({5, 4}, DType::f32, 2);
  Array out = lax::dot_general(a, b, {{1}, {0}, {}, {}}, DType::f64);
  EXPECT_EQ(out.dtype(), DType::f64);
  EXPECT_TRUE(all_close(out, reference_dot(a, b, {{1}, {0}, {}, {}}), 1e-12, 1e-12));
}

TEST(DotGeneral, Integers) {
  Array a = random_array({9, 37}, DType::i32, 1, -50, 50), b = random_array({37, 6}, DType::i32, 2, -50, 50);
  const lax::DotDimensionNumbers dn{{1}, {0}, {}, {}};
  Array out = lax::dot_general(a, b, dn);
  EXPECT_EQ(out.dtype(), DType::i32);
  EXPECT_TRUE(all_close(out, reference_dot(a, b, dn), 0, 0));
  Array wide = lax::dot_general(a, b, dn, DType::i64);
  EXPECT_EQ(wide.dtype(), DType::i64);
  EXPECT_TRUE(all_close(wide, reference_dot(a, b, dn), 0, 0));
  Array as_float = lax::dot_general(a, b, dn, DType::f32);
  EXPECT_EQ(as_float.dtype(), DType::f32);
  EXPECT_TRUE(all_close(as_float, reference_dot(a, b, dn), 0, 0));
  check_dot({4, 3, 70}, {3, 70, 300}, {{2}, {1}, {1}, {0}}, {3, 4, 300}, DType::i64, 0);
  // u8 wraps around modulo 256 like XLA's; widening to u32 does not.
  Array u = array<uint8_t>({200, 100}), v = array<uint8_t>({2, 1});
  EXPECT_EQ(lax::dot_general(u, v, {{0}, {0}, {}, {}}).item<int64_t>(), (400 + 100) % 256);
  EXPECT_EQ(lax::dot_general(u, v, {{0}, {0}, {}, {}}, DType::u32).item<int64_t>(), 500);
  // i32 wraps too (two's complement).
  Array big = array<int32_t>({1 << 30, 1 << 30, 1 << 30, 1 << 30});
  Array one = array<int32_t>({1, 1, 1, 1});
  EXPECT_EQ(lax::dot_general(big, one, {{0}, {0}, {}, {}}).item<int64_t>(), 0);
}

TEST(DotGeneral, SpecialValues) {
  const float inf = INFINITY, nan = NAN;
  Array a = array<float>({1, inf, 0, 1, nan, 2}, {3, 2});
  Array b = array<float>({1, 2, 1, 0}, {2, 2});
  Array out = lax::dot_general(a, b, {{1}, {0}, {}, {}});
  std::vector<double> got = out.to_vector<double>();
  EXPECT_EQ(got[0], inf);
  EXPECT_TRUE(std::isnan(got[1]));  // inf * 0
  EXPECT_EQ(got[2], 1);
  EXPECT_EQ(got[3], 0);
  EXPECT_TRUE(std::isnan(got[4]));
  EXPECT_TRUE(std::isnan(got[5]));
}

// Plain [m,k] x [k,n] reference with an f64 row accumulator (fast enough for
// the transformer shapes).
std::vector<double> reference_matmul(const std::vector<double>& a, const std::vector<double>& b, int64_t batch,
                                     int64_t m, int64_t k, int64_t n) {
  std::vector<double> c(size_t(batch * m * n), 0.0);
  for (int64_t bi = 0; bi < batch; ++bi)
    for (int64_t i = 0; i < m; ++i) {
      double* row = &c[size_t((bi * m + i) * n)];
      for (int64_t kk = 0; kk < k; ++kk) {
        const double av = a[size_t((bi * m + i) * k + kk)];
        const double* brow = &b[size_t((bi * k + kk) * n)];
        for (int64_t j = 0; j < n; ++j) row[j] += av * brow[j];
      }
    }
  return c;
}

void check_transformer_shape(int64_t batch, int64_t m, int64_t k, int64_t n) {
  const Shape as = batch > 1 ? Shape{batch, m, k} : Shape{m, k};
  const Shape bs = batch > 1 ? Shape{batch, k, n} : Shape{k, n};
  const lax::DotDimensionNumbers dn = batch > 1 ? lax::DotDimensionNumbers{{2}, {1}, {0}, {0}}
                                                : lax::DotDimensionNumbers{{1}, {0}, {}, {}};
  for (DType dtype : {DType::f32, DType::bf16}) {
    Array a = random_array(as, dtype, 11), b = random_array(bs, dtype, 12);
    const std::vector<double> want = reference_matmul(a.to_vector<double>(), b.to_vector<double>(), batch, m, k, n);
    Array out = lax::dot_general(a, b, dn, DType::f32);
    EXPECT_TRUE(all_close(out, want, 1e-4, 1e-3))
        << dtype_name(dtype) << " " << batch << "x" << m << "x" << k << "x" << n;
  }
}

TEST(DotGeneral, TransformerShapes) {
  check_transformer_shape(1, 2048, 256, 768);
  check_transformer_shape(1, 2048, 1024, 256);
  check_transformer_shape(32, 256, 64, 256);
}

// (k, n) values of a (k, batch, n) array at batch index bi, row-major.
std::vector<double> batch_slice(const std::vector<double>& v, int64_t k, int64_t batch, int64_t n, int64_t bi) {
  std::vector<double> out;
  for (int64_t kk = 0; kk < k; ++kk)
    for (int64_t j = 0; j < n; ++j) out.push_back(v[size_t((kk * batch + bi) * n + j)]);
  return out;
}

// The layouts that AVX2's f32 GEMM reads slowly in place and that are
// repacked first (gemm_dnnl.cc; PAX_MAX_ISA=avx2 takes that path, which
// test.sh runs): rows of B 2 KiB and 4 KiB apart, A read across its rows, bf16
// operands widened into padded rows, and a batched B whose batch axis lies
// between its rows and columns.
TEST(DotGeneral, RepackedOperands) {
  const int64_t m = 128, k = 128;
  for (int64_t n : {int64_t(512), int64_t(1024)}) {
    for (DType dtype : {DType::f32, DType::bf16}) {
      Array a = random_array({m, k}, dtype, 21), b = random_array({k, n}, dtype, 22);
      const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
      const std::vector<double> want = reference_matmul(av, bv, 1, m, k, n);
      EXPECT_TRUE(all_close(lax::dot_general(a, b, {{1}, {0}, {}, {}}, DType::f32), want, 1e-4, 1e-4))
          << dtype_name(dtype) << " n=" << n;
      // A stored transposed: (k, m), contracted on its first axis.
      Array at = lax::transpose(a, {1, 0});
      EXPECT_TRUE(all_close(lax::dot_general(at, b, {{0}, {0}, {}, {}}, DType::f32), want, 1e-4, 1e-4))
          << dtype_name(dtype) << " n=" << n << ", A transposed";
    }
  }
  const int64_t batch = 2, n = 512;
  Array a = random_array({batch, m, k}, DType::f32, 23), b = random_array({k, batch, n}, DType::f32, 24);
  Array out = lax::dot_general(a, b, {{2}, {0}, {0}, {1}});
  ASSERT_EQ(out.shape(), Shape({batch, m, n}));
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  const std::vector<double> got = out.to_vector<double>();
  for (int64_t bi = 0; bi < batch; ++bi) {
    const std::vector<double> a_b(av.begin() + bi * m * k, av.begin() + (bi + 1) * m * k);
    const std::vector<double> want = reference_matmul(a_b, batch_slice(bv, k, batch, n, bi), 1, m, k, n);
    for (size_t i = 0; i < want.size(); ++i) {
      ASSERT_NEAR(got[size_t(bi * m * n) + i], want[i], 1e-4 * (1 + std::abs(want[i]))) << "batch " << bi << " i " << i;
    }
  }
}

TEST(DotGeneral, RepeatedCallsReuseThePrimitive) {
  Array a = random_array({8, 16}, DType::f32, 1), b = random_array({16, 4}, DType::f32, 2);
  const std::vector<double> want = reference_dot(a, b, {{1}, {0}, {}, {}});
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(all_close(lax::dot_general(a, b, {{1}, {0}, {}, {}}), want, 1e-5, 1e-5));
}

TEST(DotGeneral, ConcurrentCalls) {
  // Eager calls from several threads share the primitive cache.
  Array a = random_array({40, 30}, DType::f32, 1), b = random_array({30, 20}, DType::f32, 2);
  Array q = random_array({3, 16, 8}, DType::bf16, 3), k = random_array({3, 12, 8}, DType::bf16, 4);
  const lax::DotDimensionNumbers mm{{1}, {0}, {}, {}}, attn{{2}, {2}, {0}, {0}};
  const std::vector<double> want_mm = reference_dot(a, b, mm), want_attn = reference_dot(q, k, attn);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        const bool ok = t % 2 ? bool(all_close(lax::dot_general(a, b, mm), want_mm, 1e-5, 1e-5))
                              : bool(all_close(lax::dot_general(q, k, attn, DType::f32), want_attn, 1e-5, 1e-5));
        if (!ok) ++failures;
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
}

// dot_general with a bias operand (what the compiler folds a bias add into):
// the product plus the bias broadcast along the leading dims, against the
// reference loop. oneDNN adds it in its kernel (f32, bf16; a bias shorter
// than the rhs's free dims repeated; batched; transposed operands); f64 and
// strided results add it afterwards.
Array dot_with_bias(const Array& lhs, const Array& rhs, const Array& bias, const lax::DotDimensionNumbers& dn) {
  const Params p{{"lhs_contracting_dims", dn.lhs_contracting},
                 {"rhs_contracting_dims", dn.rhs_contracting},
                 {"lhs_batch_dims", dn.lhs_batch},
                 {"rhs_batch_dims", dn.rhs_batch},
                 {"has_bias", true}};
  const std::vector<Array> operands{lhs, rhs, bias};
  return bind(Prim::dot_general, operands, p)[0];
}

void check_dot_with_bias(const Shape& ls, const Shape& rs, const Shape& bias_shape, const lax::DotDimensionNumbers& dn,
                         DType dtype, double tol) {
  SCOPED_TRACE(::testing::Message() << ls << " x " << rs << " + " << bias_shape << " " << dtype_name(dtype));
  const Array lhs = random_array(ls, dtype, 1), rhs = random_array(rs, dtype, 2),
              bias = random_array(bias_shape, dtype, 3);
  const Array got = dot_with_bias(lhs, rhs, bias, dn);
  std::vector<double> want = reference_dot(lhs, rhs, dn);
  const std::vector<double> b = bias.to_vector<double>();
  for (size_t i = 0; i < want.size(); ++i) want[i] += b[i % b.size()];
  EXPECT_EQ(got.shape(), lax::dot_general(lhs, rhs, dn).shape());
  EXPECT_TRUE(all_close(got, want, tol, tol));
}

TEST(DotGeneral, WithABiasOperand) {
  for (const auto& [dtype, tol] : {std::pair{DType::f32, 1e-5}, std::pair{DType::bf16, 3e-2}}) {
    check_dot_with_bias({33, 70}, {70, 45}, {45}, {{1}, {0}, {}, {}}, dtype, tol);
    check_dot_with_bias({8, 6, 16}, {16, 4, 8}, {4, 8}, {{2}, {0}, {}, {}}, dtype, tol);  // a projection to heads
    check_dot_with_bias({8, 6, 16}, {16, 4, 8}, {8}, {{2}, {0}, {}, {}}, dtype, tol);     // repeated over heads
    check_dot_with_bias({3, 5, 7}, {3, 7, 9}, {9}, {{2}, {1}, {0}, {0}}, dtype, tol);     // batched
    check_dot_with_bias({7, 5}, {3, 7}, {3}, {{0}, {1}, {}, {}}, dtype, tol);             // A^T B^T
  }
  check_dot_with_bias({9, 6}, {6, 5}, {5}, {{1}, {0}, {}, {}}, DType::f64, 1e-12);
  check_dot_with_bias({4, 0}, {0, 3}, {3}, {{1}, {0}, {}, {}}, DType::f32, 0);  // an empty sum: the bias alone
}

// dot_general(lhs, rhs[, bias], multiplier) with has_multiplier, as the
// compiler's fold_multipliers_into_products writes it.
Array dot_with_multiplier(const Array& lhs, const Array& rhs, const Array* bias, const Array& multiplier,
                          const lax::DotDimensionNumbers& dn) {
  Params p{{"lhs_contracting_dims", dn.lhs_contracting},
           {"rhs_contracting_dims", dn.rhs_contracting},
           {"lhs_batch_dims", dn.lhs_batch},
           {"rhs_batch_dims", dn.rhs_batch},
           {"has_multiplier", true}};
  std::vector<Array> operands{lhs, rhs};
  if (bias) {
    p.set("has_bias", true);
    operands.push_back(*bias);
  }
  operands.push_back(multiplier);
  return bind(Prim::dot_general, operands, p)[0];
}

// (lhs . rhs [+ bias]) * multiplier against the f64 reference loop, with and
// without a bias, for products oneDNN runs (f32, the multiply inside its
// kernel) and those it does not (f64; bf16, whose result the kernel
// multiplies afterwards).
void check_dot_with_multiplier(const Shape& ls, const Shape& rs, const Shape& bias_shape,
                               const lax::DotDimensionNumbers& dn, DType dtype, double tol) {
  SCOPED_TRACE(::testing::Message() << ls << " x " << rs << " * multiplier " << dtype_name(dtype));
  const Array lhs = random_array(ls, dtype, 1), rhs = random_array(rs, dtype, 2),
              bias = random_array(bias_shape, dtype, 3);
  const Shape out = lax::dot_general(lhs, rhs, dn).shape();
  const Array m = random_array(out, dtype, 4, -2.0, 2.0);
  const std::vector<double> product = reference_dot(lhs, rhs, dn), mv = m.to_vector<double>(),
                            b = bias.to_vector<double>();
  for (const bool with_bias : {false, true}) {
    const Array got = dot_with_multiplier(lhs, rhs, with_bias ? &bias : nullptr, m, dn);
    std::vector<double> want = product;
    for (size_t i = 0; i < want.size(); ++i) want[i] = (want[i] + (with_bias ? b[i % b.size()] : 0.0)) * mv[i];
    EXPECT_EQ(got.shape(), out);
    EXPECT_TRUE(all_close(got, want, tol, tol)) << "with_bias " << with_bias;
  }
}

TEST(DotGeneral, WithAMultiplierOperand) {
  for (const auto& [dtype, tol] : {std::pair{DType::f32, 1e-5}, std::pair{DType::bf16, 5e-2}}) {
    check_dot_with_multiplier({33, 70}, {70, 45}, {45}, {{1}, {0}, {}, {}}, dtype, tol);
    check_dot_with_multiplier({8, 6, 16}, {16, 4, 8}, {4, 8}, {{2}, {0}, {}, {}}, dtype, tol);
    check_dot_with_multiplier({3, 5, 7}, {3, 7, 9}, {9}, {{2}, {1}, {0}, {0}}, dtype, tol);  // batched
    check_dot_with_multiplier({7, 5}, {3, 7}, {3}, {{0}, {1}, {}, {}}, dtype, tol);          // A^T B^T
  }
  check_dot_with_multiplier({9, 6}, {6, 5}, {5}, {{1}, {0}, {}, {}}, DType::f64, 1e-12);
  check_dot_with_multiplier({4, 0}, {0, 3}, {3}, {{1}, {0}, {}, {}}, DType::f32, 1e-6);  // an empty sum
  // Not a multiplier: another shape or dtype.
  const Array a = random_array({2, 3}, DType::f32, 1), b = random_array({3, 4}, DType::f32, 2);
  EXPECT_PAX_ERROR(dot_with_multiplier(a, b, nullptr, random_array({4}, DType::f32, 3), {{1}, {0}, {}, {}}),
                   "must have the result's dtype and shape");
  EXPECT_PAX_ERROR(dot_with_multiplier(a, b, nullptr, random_array({2, 4}, DType::f64, 3), {{1}, {0}, {}, {}}),
                   "must have the result's dtype and shape");
}

// dot_general(lhs, rhs[, bias]) with has_relu, as the compiler's
// fold_relus_into_products writes it.
Array dot_with_relu(const Array& lhs, const Array& rhs, const Array* bias, const lax::DotDimensionNumbers& dn) {
  Params p{{"lhs_contracting_dims", dn.lhs_contracting},
           {"rhs_contracting_dims", dn.rhs_contracting},
           {"lhs_batch_dims", dn.lhs_batch},
           {"rhs_batch_dims", dn.rhs_batch},
           {"has_relu", true}};
  std::vector<Array> operands{lhs, rhs};
  if (bias) {
    p.set("has_bias", true);
    operands.push_back(*bias);
  }
  return bind(Prim::dot_general, operands, p)[0];
}

// max(lhs . rhs [+ bias], 0) against the f64 reference loop, with and
// without a bias, for products oneDNN runs (f32, the ReLU inside its kernel;
// bf16) and those it does not (f64, the ReLU afterwards). Half the results
// are negative; a NaN in the lhs stays a NaN in its rows.
void check_dot_with_relu(const Shape& ls, const Shape& rs, const Shape& bias_shape, const lax::DotDimensionNumbers& dn,
                         DType dtype, double tol) {
  SCOPED_TRACE(::testing::Message() << ls << " x " << rs << " relu " << dtype_name(dtype));
  const Array lhs = random_array(ls, dtype, 1), rhs = random_array(rs, dtype, 2),
              bias = random_array(bias_shape, dtype, 3);
  const std::vector<double> product = reference_dot(lhs, rhs, dn), b = bias.to_vector<double>();
  for (const bool with_bias : {false, true}) {
    const Array got = dot_with_relu(lhs, rhs, with_bias ? &bias : nullptr, dn);
    std::vector<double> want = product;
    int negative = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      want[i] += with_bias ? b[i % b.size()] : 0.0;
      negative += want[i] < 0;
      want[i] = want[i] <= 0 ? 0.0 : want[i];
    }
    EXPECT_GT(negative, int(want.size()) / 4);  // the ReLU has work to do
    EXPECT_EQ(got.shape(), lax::dot_general(lhs, rhs, dn).shape());
    EXPECT_TRUE(all_close(got, want, tol, tol)) << "with_bias " << with_bias;
    for (double v : got.to_vector<double>()) EXPECT_GE(v, 0.0);
  }
}

TEST(DotGeneral, WithAReLU) {
  for (const auto& [dtype, tol] : {std::pair{DType::f32, 1e-5}, std::pair{DType::bf16, 3e-2}}) {
    check_dot_with_relu({33, 70}, {70, 45}, {45}, {{1}, {0}, {}, {}}, dtype, tol);
    check_dot_with_relu({8, 6, 16}, {16, 4, 8}, {4, 8}, {{2}, {0}, {}, {}}, dtype, tol);
    check_dot_with_relu({3, 5, 7}, {3, 7, 9}, {9}, {{2}, {1}, {0}, {0}}, dtype, tol);  // batched
    check_dot_with_relu({7, 5}, {3, 7}, {3}, {{0}, {1}, {}, {}}, dtype, tol);          // A^T B^T
  }
  check_dot_with_relu({9, 6}, {6, 5}, {5}, {{1}, {0}, {}, {}}, DType::f64, 1e-12);
  // Special values of every float dtype, as products with 1: NaNs (of both
  // signs) stay NaNs, infinities and zeros of both signs and negatives give
  // +0.0, positives and +inf stay.
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> special{std::nan(""), -std::nan(""), -inf, inf, -0.0, 0.0, -2.5, 3.25};
  for (const DType dtype : {DType::f32, DType::f64, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const Array lhs = array(special, {int64_t(special.size()), 1}).astype(dtype);
    const Array one = array(std::vector<double>{1.0}, {1, 1}).astype(dtype);
    const std::vector<double> got = dot_with_relu(lhs, one, nullptr, {{1}, {0}, {}, {}}).to_vector<double>();
    ASSERT_EQ(got.size(), special.size());
    for (size_t i = 0; i < got.size(); ++i) {
      if (std::isnan(special[i])) {
        EXPECT_TRUE(std::isnan(got[i])) << i;
      } else {
        const double want = special[i] <= 0 ? 0.0 : special[i];
        EXPECT_EQ(got[i], want) << i;
        EXPECT_FALSE(std::signbit(got[i])) << i;
      }
    }
  }
  // A NaN stays a NaN (the ReLU of a NaN is a NaN), inside oneDNN's kernel or not.
  for (const DType dtype : {DType::f32, DType::f64}) {
    std::vector<double> a(12, 1.0);
    a[4] = std::nan("");
    const Array lhs = array(a, {3, 4}).astype(dtype), rhs = array(std::vector<double>(20, -1.0), {4, 5}).astype(dtype);
    const std::vector<double> got = dot_with_relu(lhs, rhs, nullptr, {{1}, {0}, {}, {}}).to_vector<double>();
    for (size_t i = 0; i < got.size(); ++i) {
      if (i / 5 == 1) EXPECT_TRUE(std::isnan(got[i])) << i;
      else EXPECT_EQ(got[i], 0.0) << i;
    }
  }
}

TEST(DotGeneral, ABiasMustCoverTrailingFreeDimsOfTheResult) {
  const Array a = random_array({2, 3}, DType::f32, 1), b = random_array({3, 4}, DType::f32, 2);
  EXPECT_PAX_ERROR(dot_with_bias(a, b, random_array({2, 4}, DType::f32, 3), {{1}, {0}, {}, {}}),
                   "trailing dims among the rhs free dims");
  EXPECT_PAX_ERROR(dot_with_bias(a, b, random_array({3}, DType::f32, 3), {{1}, {0}, {}, {}}),
                   "trailing dims among the rhs free dims");
  EXPECT_PAX_ERROR(dot_with_bias(a, b, random_array({4}, DType::f64, 3), {{1}, {0}, {}, {}}), "result's dtype");
}

TEST(DotGeneral, Errors) {
  Array a = random_array({2, 3}, DType::f32, 1), b = random_array({3, 4}, DType::f32, 2);
  EXPECT_PAX_ERROR(lax::dot_general(a, lax::convert_element_type(b, DType::bf16), {{1}, {0}, {}, {}}),
                   "must have the same dtype");
  EXPECT_PAX_ERROR(lax::dot_general(lax::convert_element_type(a, DType::bool_),
                                    lax::convert_element_type(b, DType::bool_), {{1}, {0}, {}, {}}),
                   "are bool");
  EXPECT_PAX_ERROR(lax::dot_general(a, b, {{2}, {0}, {}, {}}),
                   "lhs_contracting_dims (2,) out of range for lhs f32[2,3]");
  EXPECT_PAX_ERROR(lax::dot_general(a, b, {{1}, {-1}, {}, {}}), "rhs_contracting_dims (-1,) out of range");
  EXPECT_PAX_ERROR(lax::dot_general(a, b, {{1, 1}, {0, 0}, {}, {}}), "repeats axis 1");
  EXPECT_PAX_ERROR(lax::dot_general(a, b, {{0}, {0}, {}, {}}), "contracting dimension sizes differ");
  EXPECT_PAX_ERROR(lax::dot_general(a, b, {{1}, {}, {}, {}}), "must have the same length");
  EXPECT_PAX_ERROR(lax::dot_general(a, b, {{1}, {0}, {0}, {}}), "lhs_batch_dims (0,) and rhs_batch_dims () must have");
  Array c = random_array({2, 3, 4}, DType::f32, 3), d = random_array({3, 3, 5}, DType::f32, 4);
  EXPECT_PAX_ERROR(lax::dot_general(c, d, {{1}, {1}, {0}, {0}}), "batch dimension sizes differ");
  EXPECT_PAX_ERROR(lax::dot_general(c, c, {{1}, {1}, {1}, {1}}), "both a contracting and a batch dimension");
  EXPECT_PAX_ERROR(lax::dot_general(c, c, {{}, {}, {0, 0}, {0, 1}}), "repeats axis 0");
  EXPECT_PAX_ERROR(lax::dot_general(a, b, {{1}, {0}, {}, {}}, DType::bf16), "preferred_element_type bfloat16");
  EXPECT_PAX_ERROR(lax::dot_general(a, b, {{1}, {0}, {}, {}}, DType::i32), "is not valid for operands f32[2,3]");
  Array ai = lax::convert_element_type(a, DType::i32), bi = lax::convert_element_type(b, DType::i32);
  EXPECT_PAX_ERROR(lax::dot_general(ai, bi, {{1}, {0}, {}, {}}, DType::u32), "same signedness");
  EXPECT_PAX_ERROR(lax::dot_general(ai, bi, {{1}, {0}, {}, {}}, DType::u8), "preferred_element_type uint8");
  EXPECT_PAX_ERROR(lax::dot_general(ai, bi, {{1}, {0}, {}, {}}, DType::bool_), "preferred_element_type bool");
  EXPECT_PAX_ERROR(lax::dot_general(Array(), b, {{1}, {0}, {}, {}}), "empty Array");
}

}  // namespace
}  // namespace pax
