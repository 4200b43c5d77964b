// Conformance of dot_product_attention and its backward on every device and
// mode: grouped-query heads, a causal mask, a bias and padded lengths, in
// every float dtype, against a long double reference of the softmax, the
// output, the row log-sum-exp and the gradients (with a log-sum-exp
// cotangent). 16-bit operands compute in f32 and round once; the tolerance is
// relative to the magnitudes a result sums.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "pax/backend/conformance/conformance.h"
#include "pax/backend/conformance/families.h"
#include "pax/interp/interpreter.h"
#include "pax/ops/lax.h"
#include "pax/prims/attention_params.h"

namespace pax::conformance {
namespace {

PAX_CONFORMANCE_COVERS("dot_product_attention", "dot_product_attention_bwd");

using LD = long double;

constexpr int64_t B = 2, T = 4, S = 5, N = 2, K = 1, H = 3;
constexpr double kScale = 0.6;

struct Reference {
  std::vector<LD> out, lse, dq, dk, dv, dbias;
};

// The reference of a causal attention with a [1, N, T, S] bias, kv lengths
// {S, 3} and q lengths {T, 3}.
Reference reference(const Host& q, const Host& k, const Host& v, const Host& bias, const Host& dout, const Host& dlse) {
  const int64_t q_len[B] = {T, 3}, kv_len[B] = {S, 3};
  Reference r;
  r.out.assign(size_t(B * T * N * H), 0);
  r.lse.assign(size_t(B * N * T), 0);
  r.dq.assign(r.out.size(), 0);
  r.dk.assign(size_t(B * S * K * H), 0);
  r.dv.assign(r.dk.size(), 0);
  r.dbias.assign(size_t(N * T * S), 0);
  auto qi = [](int64_t b, int64_t t, int64_t n, int64_t h) { return size_t(((b * T + t) * N + n) * H + h); };
  auto ki = [](int64_t b, int64_t s, int64_t n, int64_t h) { return size_t(((b * S + s) * K + n / (N / K)) * H + h); };
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t t = 0; t < q_len[b]; ++t) {
        std::vector<LD> x(S);
        std::vector<bool> on(S);
        for (int64_t s = 0; s < S; ++s) {
          LD dot = 0;
          for (int64_t h = 0; h < H; ++h) dot += q.v[qi(b, t, n, h)] * k.v[ki(b, s, n, h)];
          on[size_t(s)] = s <= t && s < kv_len[b];
          x[size_t(s)] = on[size_t(s)] ? LD(kScale) * dot + bias.v[size_t((n * T + t) * S + s)] : 0;
        }
        LD m = -INFINITY, sum = 0;
        for (int64_t s = 0; s < S; ++s)
          if (on[size_t(s)]) m = std::max(m, x[size_t(s)]);
        std::vector<LD> p(S, 0);
        for (int64_t s = 0; s < S; ++s)
          if (on[size_t(s)]) sum += (p[size_t(s)] = std::exp(x[size_t(s)] - m));
        for (LD& e : p) e /= sum;
        r.lse[size_t((b * N + n) * T + t)] = m + std::log(sum);
        LD d = -dlse.v[size_t((b * N + n) * T + t)];
        for (int64_t h = 0; h < H; ++h) {
          LD o = 0;
          for (int64_t s = 0; s < S; ++s) o += p[size_t(s)] * v.v[ki(b, s, n, h)];
          r.out[qi(b, t, n, h)] = o;
          d += dout.v[qi(b, t, n, h)] * o;
        }
        for (int64_t s = 0; s < S; ++s) {
          LD dp = 0;
          for (int64_t h = 0; h < H; ++h) {
            dp += dout.v[qi(b, t, n, h)] * v.v[ki(b, s, n, h)];
            r.dv[ki(b, s, n, h)] += p[size_t(s)] * dout.v[qi(b, t, n, h)];
          }
          if (!on[size_t(s)]) continue;
          const LD ds = p[size_t(s)] * (dp - d);
          r.dbias[size_t((n * T + t) * S + s)] += ds;
          for (int64_t h = 0; h < H; ++h) {
            r.dq[qi(b, t, n, h)] += LD(kScale) * ds * k.v[ki(b, s, n, h)];
            r.dk[ki(b, s, n, h)] += LD(kScale) * ds * q.v[qi(b, t, n, h)];
          }
        }
      }
    }
  }
  return r;
}

// |got - want| <= tol * (1 + |want|) elementwise.
::testing::AssertionResult close(const Host& got, const std::vector<LD>& want, double tol, const char* what) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << what << ": size " << got.size();
  for (size_t i = 0; i < want.size(); ++i) {
    if (!(std::fabs(double(got.v[i] - want[i])) <= tol * (1 + std::fabs(double(want[i]))))) {
      return ::testing::AssertionFailure()
             << what << " element " << i << ": got " << double(got.v[i]) << ", expected " << double(want[i]);
    }
  }
  return ::testing::AssertionSuccess();
}

double tolerance(DType d) {
  switch (d) {
    case DType::f64: return 1e-13;
    case DType::f32: return 2e-6;
    case DType::bf16: return 1e-2;  // one rounding of the result (2^-8) and of its inputs
    default: return 2e-3;           // f16
  }
}

TEST(AttentionConformance, ForwardAndBackwardAgainstALongDoubleReference) {
  for (DType d : kFloatDTypes) {
    SCOPED_TRACE(dtype_name(d));
    const Host q = host(d, Shape{B, T, N, H}, random_values(d, B * T * N * H, 1, -1, 1));
    const Host k = host(d, Shape{B, S, K, H}, random_values(d, B * S * K * H, 2, -1, 1));
    const Host v = host(d, Shape{B, S, K, H}, random_values(d, B * S * K * H, 3, 1, 2));
    const Host bias = host(d, Shape{1, N, T, S}, random_values(d, N * T * S, 4, -0.5, 0.5));
    const Host q_len = host(DType::i32, Shape{B}, {T, 3}), kv_len = host(DType::i32, Shape{B}, {S, 3});
    const Params p{{"scale", kScale},   {"is_causal", true},     {"has_bias", true},
                   {"has_mask", false}, {"has_q_lengths", true}, {"has_kv_lengths", true}};
    const Host dout = host(d, Shape{B, T, N, H}, random_values(d, B * T * N * H, 5, -1, 1));
    const Host dlse = host(DType::f32, Shape{B, N, T}, random_values(DType::f32, B * N * T, 6, -1, 1));
    const Reference r = reference(q, k, v, bias, dout, dlse);
    // The backward's residuals: the reference's out (rounded to d) and lse.
    const Host out = host(d, Shape{B, T, N, H}, r.out), lse = host(DType::f32, Shape{B, N, T}, r.lse);
    const Fn forward = [p](const std::vector<Array>& a) {
      return bind(Prim::dot_product_attention, std::vector<Array>{a[0], a[1], a[2], a[3], a[4], a[5]}, p);
    };
    const Fn backward = [p](const std::vector<Array>& a) { return bind(Prim::dot_product_attention_bwd, a, p); };
    const double tol = tolerance(d);
    for_each_device_and_mode([&](Device dev, Mode mode) {
      auto put_all = [&](const std::vector<const Host*>& hs) {
        std::vector<Array> args;
        for (const Host* h : hs) args.push_back(make(h->v, h->shape, h->dtype, dev));
        return args;
      };
      const std::vector<Array> f = run(mode, forward, put_all({&q, &k, &v, &bias, &q_len, &kv_len}));
      EXPECT_TRUE(close(read_back(f[0]), r.out, tol, "out"));
      EXPECT_TRUE(close(read_back(f[1]), r.lse, d == DType::f64 ? 1e-6 : tol, "lse"));
      const std::vector<Array> g =
          run(mode, backward, put_all({&q, &k, &v, &out, &lse, &dout, &dlse, &bias, &q_len, &kv_len}));
      // The backward's D term reads `out` as given (rounded to d).
      const double gtol = d == DType::f64 ? 1e-12 : 4 * tol;
      EXPECT_TRUE(close(read_back(g[0]), r.dq, gtol, "dq"));
      EXPECT_TRUE(close(read_back(g[1]), r.dk, gtol, "dk"));
      EXPECT_TRUE(close(read_back(g[2]), r.dv, gtol, "dv"));
      EXPECT_TRUE(close(read_back(g[3]), r.dbias, gtol, "dbias"));
    });
  }
}

}  // namespace
}  // namespace pax::conformance
