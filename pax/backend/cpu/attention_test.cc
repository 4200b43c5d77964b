// The CPU attention kernels (attention.h) against slow reference loops in
// double over the whole [T, S] logits matrix: the forward's out and lse, the
// backward's dq, dk, dv and dbias as the plain chain rule, over shapes that
// are not multiples of the kernels' blocks and vectors, grouped-query heads,
// is_causal, broadcast bias and mask (rows with every key masked among them),
// per-example query and key lengths, and thread counts that split the
// backward's keys into chunks; and the backward against finite differences
// of the forward on a tiny case.
#include "pax/backend/cpu/attention.h"

#include <gtest/gtest.h>
#include <hwy/targets.h>
#include <omp.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "pax/backend/cpu/attention_bf16.h"
#include "pax/backend/cpu/attention_hwy.h"
#include "pax/backend/kernel.h"
#include "pax/core/dtype.h"
#include "pax/core/error.h"

namespace pax::cpu {
namespace {

struct Case {
  int64_t B = 1, T = 1, S = 1, N = 1, K = 1, H = 1;
  bool causal = false;
  float scale = 0.5f;
  float cap = 0.0f;                     // > 0: logits capped to cap * tanh(logits / cap) before the bias
  std::array<int64_t, 4> bias_shape{};  // all 0: no bias
  std::array<int64_t, 4> mask_shape{};  // all 0: no mask
  double mask_keep = 0.7;               // chance that a mask entry attends
  std::vector<int64_t> masked_rows;     // mask rows t set fully to 0 (for every b, n the mask has)
  int64_t mask_band = -1;               // >= 0: mask entries with s > t + mask_band are 0 (0: causal)
  std::vector<int64_t> mask_keys;       // per mask example b: mask entries with s >= mask_keys[b] are 0
  std::vector<int32_t> q_lengths, kv_lengths;
  uint32_t seed = 1;
};

bool has(const std::array<int64_t, 4>& shape) { return shape[0] > 0; }

int64_t numel(const std::array<int64_t, 4>& shape) { return shape[0] * shape[1] * shape[2] * shape[3]; }

// Row-major element strides of a broadcast operand, 0 for its size-1 dimensions.
std::array<int64_t, 4> broadcast_strides(const std::array<int64_t, 4>& shape) {
  std::array<int64_t, 4> strides{};
  int64_t step = 1;
  for (int d = 3; d >= 0; --d) {
    strides[size_t(d)] = shape[size_t(d)] == 1 ? 0 : step;
    step *= shape[size_t(d)];
  }
  return strides;
}

int64_t at(const std::array<int64_t, 4>& strides, int64_t b, int64_t n, int64_t t, int64_t s) {
  return b * strides[0] + n * strides[1] + t * strides[2] + s * strides[3];
}

std::vector<float> uniform(std::mt19937& rng, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = dist(rng);
  return x;
}

// One case's operands and the kernels' results.
struct Problem {
  Case c;
  std::vector<float> q, k, v, bias, dout;
  std::vector<uint8_t> mask;
  AttentionShape shape;
  AttentionExtras extras;

  explicit Problem(const Case& cs) : c(cs) {
    std::mt19937 rng(c.seed);
    q = uniform(rng, c.B * c.T * c.N * c.H, -1.0f, 1.0f);
    k = uniform(rng, c.B * c.S * c.K * c.H, -1.0f, 1.0f);
    v = uniform(rng, c.B * c.S * c.K * c.H, -1.0f, 1.0f);
    dout = uniform(rng, c.B * c.T * c.N * c.H, -1.0f, 1.0f);
    shape = {c.B, c.T, c.S, c.N, c.K, c.H, c.scale, c.causal, c.cap};
    if (has(c.bias_shape)) {
      bias = uniform(rng, numel(c.bias_shape), -1.5f, 1.5f);
      extras.bias = bias.data();
      extras.bias_strides = broadcast_strides(c.bias_shape);
    }
    if (has(c.mask_shape)) {
      std::bernoulli_distribution keep(c.mask_keep);
      mask.resize(size_t(numel(c.mask_shape)));
      for (uint8_t& m : mask) m = keep(rng) ? 1 : 0;
      const auto& ms = c.mask_shape;
      for (int64_t t : c.masked_rows)
        for (int64_t b = 0; b < ms[0]; ++b)
          for (int64_t n = 0; n < ms[1]; ++n)
            for (int64_t s = 0; s < ms[3]; ++s) mask[size_t(((b * ms[1] + n) * ms[2] + t) * ms[3] + s)] = 0;
      for (int64_t b = 0; b < ms[0]; ++b)
        for (int64_t n = 0; n < ms[1]; ++n)
          for (int64_t t = 0; t < ms[2]; ++t)
            for (int64_t s = 0; s < ms[3]; ++s) {
              const bool past_band = c.mask_band >= 0 && s > t + c.mask_band;
              const bool past_keys = !c.mask_keys.empty() && s >= c.mask_keys[size_t(b)];
              if (past_band || past_keys) mask[size_t(((b * ms[1] + n) * ms[2] + t) * ms[3] + s)] = 0;
            }
      extras.mask = mask.data();
      extras.mask_strides = broadcast_strides(c.mask_shape);
    }
    if (!c.q_lengths.empty()) extras.q_lengths = c.q_lengths.data();
    if (!c.kv_lengths.empty()) extras.kv_lengths = c.kv_lengths.data();
  }

  int64_t q_rows(int64_t b) const {
    return c.q_lengths.empty() ? c.T : std::clamp<int64_t>(c.q_lengths[size_t(b)], 0, c.T);
  }
  int64_t kv_keys(int64_t b) const {
    return c.kv_lengths.empty() ? c.S : std::clamp<int64_t>(c.kv_lengths[size_t(b)], 0, c.S);
  }
  bool masked(int64_t b, int64_t n, int64_t t, int64_t s) const {
    if (c.causal && s > t) return true;
    if (s >= kv_keys(b)) return true;
    return extras.mask && extras.mask[at(extras.mask_strides, b, n, t, s)] == 0;
  }
  int64_t qi(int64_t b, int64_t t, int64_t n, int64_t h) const { return ((b * c.T + t) * c.N + n) * c.H + h; }
  int64_t ki(int64_t b, int64_t s, int64_t kh, int64_t h) const { return ((b * c.S + s) * c.K + kh) * c.H + h; }
};

// The reference: softmax over the whole row in double, and the chain rule
// through it.
struct Reference {
  std::vector<double> out, lse, dq, dk, dv, dbias;
};

Reference reference(const Problem& p, bool backward) {
  const Case& c = p.c;
  Reference r;
  r.out.assign(size_t(c.B * c.T * c.N * c.H), 0.0);
  r.lse.assign(size_t(c.B * c.N * c.T), 0.0);
  r.dq.assign(r.out.size(), 0.0);
  r.dk.assign(size_t(c.B * c.S * c.K * c.H), 0.0);
  r.dv.assign(r.dk.size(), 0.0);
  if (has(c.bias_shape)) r.dbias.assign(size_t(numel(c.bias_shape)), 0.0);
  std::vector<double> x(size_t(c.S)), pr(size_t(c.S)), dp(size_t(c.S)), slope(size_t(c.S), 1.0);
  for (int64_t b = 0; b < c.B; ++b) {
    for (int64_t n = 0; n < c.N; ++n) {
      const int64_t kh = n / (c.N / c.K);
      for (int64_t t = 0; t < p.q_rows(b); ++t) {
        for (int64_t s = 0; s < c.S; ++s) {
          if (p.masked(b, n, t, s)) {
            x[size_t(s)] = double(kMaskedLogit);
            continue;
          }
          double d = 0.0;
          for (int64_t h = 0; h < c.H; ++h) d += double(p.q[size_t(p.qi(b, t, n, h))]) * p.k[size_t(p.ki(b, s, kh, h))];
          x[size_t(s)] = double(c.scale) * d;
          if (c.cap > 0) {
            const double th = std::tanh(x[size_t(s)] / c.cap);
            x[size_t(s)] = c.cap * th;
            slope[size_t(s)] = 1.0 - th * th;
          }
          if (p.extras.bias) x[size_t(s)] += p.extras.bias[at(p.extras.bias_strides, b, n, t, s)];
        }
        const double m = *std::max_element(x.begin(), x.end());
        double sum = 0.0;
        for (int64_t s = 0; s < c.S; ++s) sum += pr[size_t(s)] = std::exp(x[size_t(s)] - m);
        for (double& e : pr) e /= sum;
        r.lse[size_t((b * c.N + n) * c.T + t)] = m + std::log(sum);
        for (int64_t h = 0; h < c.H; ++h) {
          double o = 0.0;
          for (int64_t s = 0; s < c.S; ++s) o += pr[size_t(s)] * p.v[size_t(p.ki(b, s, kh, h))];
          r.out[size_t(p.qi(b, t, n, h))] = o;
        }
        if (!backward) continue;
        double delta = 0.0;
        for (int64_t s = 0; s < c.S; ++s) {
          double d = 0.0;
          for (int64_t h = 0; h < c.H; ++h)
            d += double(p.dout[size_t(p.qi(b, t, n, h))]) * p.v[size_t(p.ki(b, s, kh, h))];
          dp[size_t(s)] = d;
          delta += pr[size_t(s)] * d;
        }
        for (int64_t s = 0; s < c.S; ++s) {
          for (int64_t h = 0; h < c.H; ++h)
            r.dv[size_t(p.ki(b, s, kh, h))] += pr[size_t(s)] * p.dout[size_t(p.qi(b, t, n, h))];
          if (p.masked(b, n, t, s)) continue;
          const double ds = pr[size_t(s)] * (dp[size_t(s)] - delta), dx = ds * slope[size_t(s)];
          for (int64_t h = 0; h < c.H; ++h) {
            r.dq[size_t(p.qi(b, t, n, h))] += c.scale * dx * p.k[size_t(p.ki(b, s, kh, h))];
            r.dk[size_t(p.ki(b, s, kh, h))] += c.scale * dx * p.q[size_t(p.qi(b, t, n, h))];
          }
          if (p.extras.bias) r.dbias[size_t(at(broadcast_strides(c.bias_shape), b, n, t, s))] += ds;
        }
      }
    }
  }
  return r;
}

// Whether got is within tol * max(1, |want|) of want everywhere; the first
// mismatches are reported.
void expect_close(const std::string& what, const std::vector<float>& got, const std::vector<double>& want, double tol) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int reported = 0;
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(double(got[i]) - want[i]) / std::max(1.0, std::abs(want[i]));
    worst = std::max(worst, std::isnan(got[i]) ? INFINITY : err);
    if ((err > tol || std::isnan(got[i])) && reported++ < 5)
      ADD_FAILURE() << what << "[" << i << "] = " << got[i] << ", expected " << want[i];
  }
  EXPECT_LE(worst, tol) << what;
}

constexpr double kTol = 1e-5;
// With bf16 products the probabilities and the logits' gradients are
// rounded to bf16 (8 bits) before their products; the logits (products of
// bf16 values, summed in f32) keep f32's accuracy.
constexpr double kBf16Tol = 1.5e-2;

using attention_bf16::Unit;

// Rounds x to bf16 in place; returns the bf16 bits.
std::vector<uint16_t> round_to_bf16(std::vector<float>& x) {
  std::vector<uint16_t> bits(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    bits[i] = float_to_bf16(x[i]);
    x[i] = bf16_to_float(bits[i]);
  }
  return bits;
}

// Runs the forward and the backward of a case and checks them against the
// reference: in f32, or (unit != none) with bf16 operands multiplied on that
// unit.
void check(const Case& c, Unit unit = Unit::none) {
  SCOPED_TRACE(::testing::Message() << "B=" << c.B << " T=" << c.T << " S=" << c.S << " N=" << c.N << " K=" << c.K
                                    << " H=" << c.H << " causal=" << c.causal << " threads=" << omp_get_max_threads()
                                    << " bf16 unit=" << int(unit));
  Problem p(c);
  AttentionBf16Operands bf16;
  std::vector<uint16_t> q16, k16, v16, dout16;
  if (unit != Unit::none) {
    q16 = round_to_bf16(p.q);
    k16 = round_to_bf16(p.k);
    v16 = round_to_bf16(p.v);
    dout16 = round_to_bf16(p.dout);
    bf16 = {q16.data(), k16.data(), v16.data(), dout16.data()};
  }
  const double tol = unit == Unit::none ? kTol : kBf16Tol;
  const Reference r = reference(p, true);
  const KernelContext& ctx = host_kernel_context();
  std::vector<float> out(r.out.size(), NAN), lse(r.lse.size(), NAN);
  attention_forward_f32(ctx, p.shape, p.extras, p.q.data(), p.k.data(), p.v.data(), out.data(), lse.data(), &bf16);
  expect_close("out", out, r.out, tol);
  expect_close("lse", lse, r.lse, kTol);

  std::vector<float> dq(r.dq.size(), NAN), dk(r.dk.size(), NAN), dv(r.dv.size(), NAN);
  std::vector<float> dbias(r.dbias.size(), 0.0f);
  const std::array<int64_t, 4> dbias_strides = has(c.bias_shape) ? broadcast_strides(c.bias_shape)
                                                                 : std::array<int64_t, 4>{};
  attention_backward_f32(ctx, p.shape, p.extras, p.q.data(), p.k.data(), p.v.data(), out.data(), lse.data(),
                         p.dout.data(), nullptr, dq.data(), dk.data(), dv.data(),
                         dbias.empty() ? nullptr : dbias.data(), dbias_strides, &bf16);
  expect_close("dq", dq, r.dq, tol);
  expect_close("dk", dk, r.dk, tol);
  expect_close("dv", dv, r.dv, tol);
  if (!dbias.empty()) expect_close("dbias", dbias, r.dbias, tol);
  if (unit == Unit::none) return;

  // Given the bf16 bits alone (no f32 copies of q, k, v and dout), the
  // kernels convert what they read in f32 themselves: the same results.
  std::vector<float> out2(out.size(), NAN), lse2(lse.size(), NAN);
  attention_forward_f32(ctx, p.shape, p.extras, nullptr, nullptr, nullptr, out2.data(), lse2.data(), &bf16);
  EXPECT_EQ(out2, out);
  EXPECT_EQ(lse2, lse);
  std::vector<float> dq2(dq.size(), NAN), dk2(dk.size(), NAN), dv2(dv.size(), NAN);
  std::vector<float> dbias2(dbias.size(), 0.0f);
  attention_backward_f32(ctx, p.shape, p.extras, nullptr, nullptr, nullptr, out.data(), lse.data(), nullptr, nullptr,
                         dq2.data(), dk2.data(), dv2.data(), dbias2.empty() ? nullptr : dbias2.data(), dbias_strides,
                         &bf16);
  EXPECT_EQ(dq2, dq);
  EXPECT_EQ(dk2, dk);
  EXPECT_EQ(dv2, dv);
  EXPECT_EQ(dbias2, dbias);

  // The output given as bf16 bits alone (as a bf16 forward's is): its rows
  // read from the bits give what its bf16 values given in f32 give.
  std::vector<float> out_bf16 = out;
  const std::vector<uint16_t> out16 = round_to_bf16(out_bf16);
  AttentionBf16Operands with_out = bf16;
  with_out.out = out16.data();
  std::vector<std::vector<float>> grads;
  for (const AttentionBf16Operands* given : {&bf16, &with_out}) {
    std::vector<float> dq3(dq.size(), NAN), dk3(dk.size(), NAN), dv3(dv.size(), NAN), dbias3(dbias.size(), 0.0f);
    attention_backward_f32(ctx, p.shape, p.extras, nullptr, nullptr, nullptr, given->out ? nullptr : out_bf16.data(),
                           lse.data(), nullptr, nullptr, dq3.data(), dk3.data(), dv3.data(),
                           dbias3.empty() ? nullptr : dbias3.data(), dbias_strides, given);
    for (auto* g : {&dq3, &dk3, &dv3, &dbias3}) grads.push_back(std::move(*g));
  }
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(grads[4 + i], grads[i]) << "gradient " << i << " with out as bits";
  expect_close("dq from bf16 out", grads[4], r.dq, tol);
}

// Runs the attention kernels' bf16 products on one unit, restoring the
// unit chosen before.
class ScopedUnit {
 public:
  explicit ScopedUnit(Unit unit) : saved_(attention_bf16::unit()) { attention_bf16::override_unit(unit); }
  ~ScopedUnit() { attention_bf16::override_unit(saved_); }

 private:
  Unit saved_;
};

// Calls f(unit) with the kernels' bf16 products on each unit this CPU has
// (AMX tiles, AVX512_BF16); returns how many there were.
template <class F>
int for_each_bf16_unit(F f) {
  int units = 0;
  for (Unit unit : {Unit::amx, Unit::avx512_bf16}) {
    if (!attention_bf16::has(unit)) continue;
    ++units;
    const ScopedUnit scoped(unit);
    f(unit);
  }
  return units;
}

// Cases that several tests run (the f32 products and the bf16 ones): a causal
// mask with fully masked rows, padding masks over the keys, per-example lengths.
const Case kCausalWithMaskedRows{.B = 1,
                                 .T = 100,
                                 .S = 100,
                                 .N = 2,
                                 .K = 1,
                                 .H = 8,
                                 .causal = true,
                                 .mask_shape = {1, 1, 100, 100},
                                 .masked_rows = {0, 3, 70},
                                 .seed = 43};
// Causal, with the second 16-row strip of the block fully masked: a strip
// that sees no key between two that do.
const Case kMaskedStrip{.B = 1,
                        .T = 64,
                        .S = 64,
                        .N = 2,
                        .K = 1,
                        .H = 8,
                        .mask_shape = {1, 1, 64, 64},
                        .mask_keep = 1.0,
                        .masked_rows = {16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31},
                        .mask_band = 0,
                        .seed = 44};
const Case kPaddedKeys{.B = 3,
                       .T = 66,
                       .S = 200,
                       .N = 2,
                       .K = 1,
                       .H = 7,
                       .mask_shape = {3, 1, 1, 200},
                       .mask_keep = 1.0,
                       .mask_keys = {200, 130, 0},
                       .seed = 48};
const Case kLengths{
    .B = 3, .T = 8, .S = 12, .N = 2, .K = 1, .H = 5, .q_lengths = {8, 3, 0}, .kv_lengths = {12, 5, 4}, .seed = 50};

// OpenMP's thread count for the kernels, restored afterwards.
class ScopedThreads {
 public:
  explicit ScopedThreads(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ScopedThreads() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

TEST(CpuAttention, ShapesAgainstReference) {
  check({.B = 2, .T = 5, .S = 7, .N = 2, .K = 2, .H = 3});
  check({.B = 1, .T = 70, .S = 131, .N = 2, .K = 2, .H = 19, .scale = 0.3f, .seed = 2});
  check({.B = 2, .T = 1, .S = 9, .N = 3, .K = 3, .H = 8, .seed = 3});  // one query
  check({.B = 2, .T = 6, .S = 1, .N = 2, .K = 2, .H = 5, .seed = 4});  // one key
  check({.B = 1, .T = 1, .S = 1, .N = 1, .K = 1, .H = 1, .seed = 5});
  check({.B = 1, .T = 129, .S = 67, .N = 1, .K = 1, .H = 67, .scale = 0.125f, .seed = 6});  // H past one panel
  check({.B = 2, .T = 64, .S = 64, .N = 2, .K = 1, .H = 64, .scale = 0.125f, .seed = 7});   // exact multiples
}

TEST(CpuAttention, GroupedQueryHeads) {
  check({.B = 2, .T = 9, .S = 13, .N = 4, .K = 2, .H = 6, .seed = 10});
  check({.B = 2, .T = 9, .S = 13, .N = 4, .K = 1, .H = 6, .seed = 11});
  check({.B = 1, .T = 66, .S = 150, .N = 4, .K = 2, .H = 17, .seed = 12});
}

TEST(CpuAttention, Causal) {
  check({.B = 2, .T = 70, .S = 70, .N = 2, .K = 1, .H = 9, .causal = true, .seed = 20});   // T == S
  check({.B = 1, .T = 20, .S = 45, .N = 2, .K = 2, .H = 4, .causal = true, .seed = 21});   // T < S
  check({.B = 1, .T = 150, .S = 20, .N = 2, .K = 1, .H = 4, .causal = true, .seed = 22});  // T > S
  check({.B = 1, .T = 1, .S = 5, .N = 1, .K = 1, .H = 3, .causal = true, .seed = 23});
}

TEST(CpuAttention, BroadcastBias) {
  check({.B = 2, .T = 7, .S = 11, .N = 2, .K = 1, .H = 5, .bias_shape = {1, 2, 7, 11}, .seed = 30});
  check({.B = 2, .T = 7, .S = 11, .N = 2, .K = 2, .H = 5, .bias_shape = {2, 1, 1, 11}, .seed = 31});
  check({.B = 2, .T = 7, .S = 11, .N = 4, .K = 2, .H = 5, .bias_shape = {2, 4, 7, 11}, .seed = 32});
  check({.B = 2, .T = 7, .S = 11, .N = 2, .K = 2, .H = 5, .bias_shape = {2, 2, 7, 1}, .seed = 33});  // over keys
  check({.B = 2, .T = 7, .S = 11, .N = 2, .K = 2, .H = 5, .bias_shape = {1, 1, 1, 1}, .seed = 34});
  check(
      {.B = 1, .T = 80, .S = 200, .N = 2, .K = 1, .H = 16, .causal = true, .bias_shape = {1, 1, 80, 200}, .seed = 35});
}

TEST(CpuAttention, MaskWithFullyMaskedRows) {
  // Rows 1 and 4 attend to nothing: they average all S values.
  check({.B = 2,
         .T = 6,
         .S = 10,
         .N = 2,
         .K = 1,
         .H = 4,
         .mask_shape = {2, 1, 6, 10},
         .masked_rows = {1, 4},
         .seed = 40});
  check({.B = 2, .T = 6, .S = 10, .N = 2, .K = 2, .H = 4, .mask_shape = {1, 2, 1, 10}, .seed = 41});
  check({.B = 2, .T = 6, .S = 10, .N = 2, .K = 2, .H = 4, .mask_shape = {2, 1, 1, 1}, .mask_keep = 0.5, .seed = 42});
  // Causal, so that fully masked rows also skip the keys past their block.
  check(kCausalWithMaskedRows);
}

// Keys past the last one a block's mask rows attend to are skipped: causal
// masks given as arrays (T == S, T < S, T > S, per head, with fully masked
// rows and random holes), a band, and padding masks over the keys.
TEST(CpuAttention, MaskedKeyTailsAreSkipped) {
  check({.B = 2,
         .T = 150,
         .S = 150,
         .N = 2,
         .K = 1,
         .H = 9,
         .mask_shape = {1, 1, 150, 150},
         .mask_keep = 1.0,
         .mask_band = 0,
         .seed = 45});
  check({.B = 1,
         .T = 70,
         .S = 140,
         .N = 2,
         .K = 2,
         .H = 8,
         .mask_shape = {1, 2, 70, 140},
         .mask_keep = 0.8,
         .masked_rows = {0, 65},
         .mask_band = 5,
         .seed = 46});
  check({.B = 1,
         .T = 140,
         .S = 70,
         .N = 4,
         .K = 2,
         .H = 8,
         .mask_shape = {1, 1, 140, 70},
         .mask_keep = 0.9,
         .mask_band = 0,
         .seed = 47});
  check(kPaddedKeys);
  check(kMaskedStrip);
  check({.B = 2,
         .T = 130,
         .S = 130,
         .N = 2,
         .K = 2,
         .H = 5,
         .causal = true,
         .mask_shape = {2, 1, 130, 130},
         .mask_keep = 0.9,
         .mask_band = 3,
         .mask_keys = {90, 20},
         .seed = 49});
}

// The logit cap: cap * tanh(scale q.k / cap) before the bias, its
// derivative in dq and dk but not in dbias. Scale 3 drives logits past the
// cap of 2, where the cap bends them.
TEST(CpuAttention, LogitCap) {
  check({.B = 2, .T = 9, .S = 13, .N = 4, .K = 2, .H = 6, .scale = 3.0f, .cap = 2.0f, .seed = 80});
  const Case masked{.B = 1,
                    .T = 70,
                    .S = 300,
                    .N = 2,
                    .K = 1,
                    .H = 16,
                    .causal = true,
                    .scale = 1.0f,
                    .cap = 1.5f,
                    .bias_shape = {1, 2, 70, 300},
                    .mask_shape = {1, 1, 70, 300},
                    .masked_rows = {5},
                    .seed = 81};
  check(masked);
  check({.B = 2,
         .T = 7,
         .S = 11,
         .N = 2,
         .K = 2,
         .H = 5,
         .scale = 2.0f,
         .cap = 1.0f,
         .bias_shape = {2, 1, 1, 11},
         .seed = 82});
  for_each_bf16_unit([&](Unit unit) { check(masked, unit); });
}

TEST(CpuAttention, Lengths) {
  check(kLengths);
  // kv length 0: every key masked, every row averages all S values; lengths
  // past T and S are clamped.
  check(
      {.B = 3, .T = 8, .S = 12, .N = 2, .K = 1, .H = 5, .q_lengths = {20, 8, 6}, .kv_lengths = {0, 30, 7}, .seed = 51});
  check({.B = 2,
         .T = 70,
         .S = 140,
         .N = 2,
         .K = 2,
         .H = 7,
         .causal = true,
         .q_lengths = {65, 70},
         .kv_lengths = {0, 100},
         .seed = 52});
}

TEST(CpuAttention, Combined) {
  check({.B = 2,
         .T = 70,
         .S = 90,
         .N = 4,
         .K = 2,
         .H = 13,
         .causal = true,
         .scale = 0.4f,
         .bias_shape = {2, 1, 70, 90},
         .mask_shape = {2, 4, 70, 90},
         .mask_keep = 0.8,
         .masked_rows = {2, 66},
         .q_lengths = {70, 50},
         .kv_lengths = {80, 0},
         .seed = 60});
  check({.B = 1,
         .T = 130,
         .S = 300,
         .N = 4,
         .K = 1,
         .H = 33,
         .causal = true,
         .scale = 0.2f,
         .bias_shape = {1, 4, 130, 300},
         .mask_shape = {1, 1, 130, 300},
         .mask_keep = 0.9,
         .masked_rows = {5, 129},
         .q_lengths = {120},
         .kv_lengths = {250},
         .seed = 61});
}

// Thread counts above the examples times kv heads split the backward's keys
// into chunks (each with a dQ of its own); a bias broadcast over examples,
// heads or keys keeps those dimensions inside the tasks.
TEST(CpuAttention, ThreadCounts) {
  for (int threads : {1, 3, 8}) {
    const ScopedThreads scoped(threads);
    check({.B = 1, .T = 70, .S = 520, .N = 2, .K = 1, .H = 20, .causal = true, .seed = 70});
    check({.B = 2, .T = 40, .S = 300, .N = 2, .K = 2, .H = 9, .bias_shape = {1, 2, 40, 300}, .seed = 71});
    check({.B = 2,
           .T = 40,
           .S = 300,
           .N = 2,
           .K = 2,
           .H = 9,
           .bias_shape = {2, 1, 40, 1},
           .mask_shape = {2, 1, 40, 300},
           .masked_rows = {7},
           .kv_lengths = {300, 0},
           .seed = 72});
    check({.B = 1,
           .T = 300,
           .S = 300,
           .N = 2,
           .K = 1,
           .H = 16,
           .mask_shape = {1, 1, 300, 300},
           .mask_keep = 1.0,
           .masked_rows = {2},
           .mask_band = 0,
           .seed = 73});
  }
}

TEST(CpuAttention, PaddingQueriesAreZero) {
  const Case c{.B = 2, .T = 5, .S = 4, .N = 1, .K = 1, .H = 3, .q_lengths = {2, 5}};
  const Problem p(c);
  std::vector<float> out(size_t(c.B * c.T * c.N * c.H), NAN), lse(size_t(c.B * c.N * c.T), NAN);
  attention_forward_f32(host_kernel_context(), p.shape, p.extras, p.q.data(), p.k.data(), p.v.data(), out.data(),
                        lse.data());
  for (int64_t t = 2; t < 5; ++t) {
    EXPECT_EQ(lse[size_t(t)], 0.0f) << t;
    for (int64_t h = 0; h < 3; ++h) EXPECT_EQ(out[size_t(p.qi(0, t, 0, h))], 0.0f) << t;
  }
}

// bf16 operands through each bf16 unit this CPU has (AMX tiles, AVX512_BF16
// dot products): sizes that are not multiples of the tiles (16 x 16 by a
// depth of 32) in any dimension, an odd head depth, grouped heads, causal
// blocks, masks with fully masked rows and skipped tails, bias, lengths,
// and threads that split the backward's keys.
TEST(CpuAttention, Bf16ProductsOnEveryUnit) {
  const int units = for_each_bf16_unit([](Unit unit) {
    check({.B = 2, .T = 5, .S = 7, .N = 2, .K = 2, .H = 3}, unit);
    check({.B = 1, .T = 70, .S = 301, .N = 4, .K = 2, .H = 19, .scale = 0.3f, .seed = 2}, unit);
    check({.B = 2, .T = 64, .S = 64, .N = 2, .K = 1, .H = 64, .scale = 0.125f, .seed = 7}, unit);
    check({.B = 1, .T = 130, .S = 130, .N = 2, .K = 1, .H = 40, .causal = true, .seed = 20}, unit);
    check({.B = 2, .T = 7, .S = 11, .N = 4, .K = 2, .H = 5, .bias_shape = {2, 4, 7, 11}, .seed = 32}, unit);
    check(kCausalWithMaskedRows, unit);
    // A causal band with holes and fully masked rows: the row strips of a
    // block see different key ranges.
    check({.B = 1,
           .T = 100,
           .S = 140,
           .N = 2,
           .K = 2,
           .H = 8,
           .mask_shape = {1, 2, 100, 140},
           .mask_keep = 0.8,
           .masked_rows = {0, 40, 65},
           .mask_band = 5,
           .seed = 71},
          unit);
    check(kPaddedKeys, unit);
    check(kMaskedStrip, unit);
    check(kLengths, unit);
    const ScopedThreads threads(3);
    check({.B = 1, .T = 70, .S = 520, .N = 2, .K = 1, .H = 20, .causal = true, .seed = 70}, unit);
  });
  if (units == 0) GTEST_SKIP() << "this CPU has no bf16 products (AMX-BF16 or AVX512_BF16)";
}

// Operands given as bf16 bits alone on a CPU without bf16 products (or with
// them turned off): the kernels convert all of them and multiply in f32.
TEST(CpuAttention, Bf16BitsAloneWithF32Products) {
  const ScopedUnit none(Unit::none);
  for (const Case& c : {kCausalWithMaskedRows, kLengths}) {
    Problem p(c);
    std::vector<uint16_t> q16 = round_to_bf16(p.q), k16 = round_to_bf16(p.k), v16 = round_to_bf16(p.v);
    std::vector<uint16_t> dout16 = round_to_bf16(p.dout);
    const AttentionBf16Operands bf16{q16.data(), k16.data(), v16.data(), dout16.data()};
    const Reference r = reference(p, true);
    const KernelContext& ctx = host_kernel_context();
    std::vector<float> out(r.out.size(), NAN), lse(r.lse.size(), NAN);
    attention_forward_f32(ctx, p.shape, p.extras, nullptr, nullptr, nullptr, out.data(), lse.data(), &bf16);
    expect_close("out", out, r.out, kTol);
    expect_close("lse", lse, r.lse, kTol);
    std::vector<float> dq(r.dq.size(), NAN), dk(r.dk.size(), NAN), dv(r.dv.size(), NAN);
    attention_backward_f32(ctx, p.shape, p.extras, nullptr, nullptr, nullptr, out.data(), lse.data(), nullptr, nullptr,
                           dq.data(), dk.data(), dv.data(), nullptr, {}, &bf16);
    // The output as bits alone: what its bf16 values given in f32 give.
    std::vector<float> out_bf16 = out;
    const std::vector<uint16_t> out16 = round_to_bf16(out_bf16);
    std::vector<float> dq_f32(dq.size(), NAN), dk_f32(dk.size(), NAN), dv_f32(dv.size(), NAN);
    attention_backward_f32(ctx, p.shape, p.extras, nullptr, nullptr, nullptr, out_bf16.data(), lse.data(), nullptr,
                           nullptr, dq_f32.data(), dk_f32.data(), dv_f32.data(), nullptr, {}, &bf16);
    AttentionBf16Operands with_out = bf16;
    with_out.out = out16.data();
    std::vector<float> dq_bits(dq.size(), NAN), dk_bits(dk.size(), NAN), dv_bits(dv.size(), NAN);
    attention_backward_f32(ctx, p.shape, p.extras, nullptr, nullptr, nullptr, nullptr, lse.data(), nullptr, nullptr,
                           dq_bits.data(), dk_bits.data(), dv_bits.data(), nullptr, {}, &with_out);
    EXPECT_EQ(dq_bits, dq_f32);
    EXPECT_EQ(dk_bits, dk_f32);
    EXPECT_EQ(dv_bits, dv_f32);
    expect_close("dq", dq, r.dq, kTol);
    expect_close("dk", dk, r.dk, kTol);
    expect_close("dv", dv, r.dv, kTol);
  }
}

// Infinite keys in one key/value head: every result of the other head stays
// finite. The shape splits the backward's 210 keys into two chunks (three
// threads, two heads), the second starting at key 112: its bf16 products read
// keys rounded up to 32, which must not run into the next head's keys.
TEST(CpuAttention, Bf16KeysOfOneHeadDoNotReachAnother) {
  const int units = for_each_bf16_unit([](Unit) {
    const ScopedThreads threads(3);
    const Case c{.B = 1, .T = 40, .S = 210, .N = 2, .K = 2, .H = 16, .seed = 90};
    Problem p(c);
    for (int64_t s = 0; s < 16; ++s)
      for (int64_t h = 0; h < c.H; ++h) p.k[size_t((s * c.K + 1) * c.H + h)] = INFINITY;  // head 1's first keys
    std::vector<uint16_t> q16 = round_to_bf16(p.q), k16 = round_to_bf16(p.k), v16 = round_to_bf16(p.v);
    std::vector<uint16_t> dout16 = round_to_bf16(p.dout);
    const AttentionBf16Operands bf16{q16.data(), k16.data(), v16.data(), dout16.data()};
    const KernelContext& ctx = host_kernel_context();
    const size_t q_numel = size_t(c.T * c.N * c.H), kv_numel = size_t(c.S * c.K * c.H);
    std::vector<float> out(q_numel), lse(size_t(c.N * c.T)), dq(q_numel), dk(kv_numel), dv(kv_numel);
    attention_forward_f32(ctx, p.shape, p.extras, p.q.data(), p.k.data(), p.v.data(), out.data(), lse.data(), &bf16);
    attention_backward_f32(ctx, p.shape, p.extras, p.q.data(), p.k.data(), p.v.data(), out.data(), lse.data(),
                           p.dout.data(), nullptr, dq.data(), dk.data(), dv.data(), nullptr, {}, &bf16);
    for (int64_t t = 0; t < c.T; ++t)
      for (int64_t h = 0; h < c.H; ++h) {  // query head 0 reads key/value head 0
        const size_t i = size_t((t * c.N + 0) * c.H + h);
        EXPECT_TRUE(std::isfinite(out[i]) && std::isfinite(dq[i])) << "t " << t << " h " << h;
      }
    for (int64_t s = 0; s < c.S; ++s)
      for (int64_t h = 0; h < c.H; ++h) {
        const size_t i = size_t((s * c.K + 0) * c.H + h);
        EXPECT_TRUE(std::isfinite(dk[i]) && std::isfinite(dv[i])) << "s " << s << " h " << h;
      }
  });
  if (units == 0) GTEST_SKIP() << "this CPU has no bf16 products (AMX-BF16 or AVX512_BF16)";
}

// The softmax's exp: within 1 ulp of exp rounded to f32 over the arguments
// it keeps ([-86.5, 0] and a little above), exactly 0 below them, NaN kept,
// and the row's sum returned.
// Calls f() once with each SIMD target of this CPU (Highway's dispatch
// pinned to it, within PAX_MAX_ISA), so that every path attention_hwy.cc is
// compiled for runs on one machine: on x86 the AVX-512 and AVX2 ones and the
// scalar fallback (which the SSE4 and SSSE3 targets, not compiled there, fall
// back to), on aarch64 NEON.
template <class F>
void for_each_simd_target(F f) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    SCOPED_TRACE(hwy::TargetName(target));
    hwy::SetSupportedTargetsForTest(target);
    f();
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(CpuAttention, ExpRowWithinAnUlp) {
  for_each_simd_target([] {
    const int64_t n = 200003;  // not a multiple of any vector
    std::vector<float> args(static_cast<size_t>(n)), x;
    for (int64_t i = 0; i < n; ++i) args[size_t(i)] = -90.0f + 92.0f * float(i) / float(n);
    x = args;
    const float sum = attention_detail::exp_row(x.data(), n, 0.0f);
    double want_sum = 0, worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float a = args[size_t(i)], got = x[size_t(i)];
      if (a < -86.5f) {
        EXPECT_EQ(got, 0.0f) << "exp(" << a << ")";
        continue;
      }
      const auto want = float(std::exp(double(a)));
      want_sum += double(got);
      int32_t want_bits = 0, got_bits = 0;
      std::memcpy(&want_bits, &want, sizeof(want));
      std::memcpy(&got_bits, &got, sizeof(got));
      worst = std::max(worst, std::abs(double(got_bits) - double(want_bits)));
    }
    EXPECT_LE(worst, 1.0) << "ulps";
    EXPECT_NEAR(sum, want_sum, 1e-5 * want_sum);
    // Past the range: masked logits minus a row's maximum, and -inf, give 0;
    // arguments far above it (never a logit minus its maximum) stay finite.
    float special[7] = {NAN, -INFINITY, 0.0f, kMaskedLogit, -1000.0f, 1.0e30f, INFINITY};
    attention_detail::exp_row(special, 7, 0.0f);
    EXPECT_TRUE(std::isnan(special[0]));
    EXPECT_EQ(special[1], 0.0f);
    EXPECT_EQ(special[2], 1.0f);
    EXPECT_EQ(special[3], 0.0f);
    EXPECT_EQ(special[4], 0.0f);
    EXPECT_TRUE(std::isfinite(special[5]) && special[5] > 1e30f) << special[5];
    EXPECT_TRUE(std::isfinite(special[6]) && special[6] > 1e30f) << special[6];
  });
}

// The rows' dot product and the keys' transpose against plain loops, at
// lengths off every vector width, on every SIMD target.
TEST(CpuAttention, DotAndTransposeOnEveryTarget) {
  std::mt19937 rng(61);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> a(100), b(100);
  for (size_t i = 0; i < a.size(); ++i) a[i] = u(rng), b[i] = u(rng);
  const int64_t rows = 37, cols = 19, x_row = 23, ldd = 41;  // x: rows x_row apart; dst: ldd
  std::vector<float> x(size_t(rows * x_row));
  for (float& v : x) v = u(rng);
  for_each_simd_target([&] {
    for (const int64_t n : {0, 1, 7, 16, 31, 64, 100}) {
      double want = 0;
      for (int64_t i = 0; i < n; ++i) want += double(a[size_t(i)]) * double(b[size_t(i)]);
      EXPECT_NEAR(attention_detail::dot(a.data(), b.data(), n), want, 1e-5) << "n=" << n;
    }
    std::vector<float> dst(size_t(cols * ldd), -7.0f);
    attention_detail::transpose(x.data(), x_row, rows, cols, dst.data(), ldd);
    for (int64_t j = 0; j < cols; ++j)
      for (int64_t i = 0; i < ldd; ++i)
        EXPECT_EQ(dst[size_t(j * ldd + i)], i < rows ? x[size_t(i * x_row + j)] : -7.0f) << j << ", " << i;
  });
}

// Memory whose last `n` floats end where an inaccessible page begins: a
// read or write past them faults.
class FloatsBeforeGuardPage {
 public:
  explicit FloatsBeforeGuardPage(size_t n) : page_(size_t(sysconf(_SC_PAGESIZE))) {
    bytes_ = (n * sizeof(float) + page_ - 1) / page_ * page_ + page_;
    void* base = mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    PAX_CHECK(base != MAP_FAILED, "mmap failed");
    base_ = static_cast<char*>(base);
    PAX_CHECK(mprotect(base_ + bytes_ - page_, page_, PROT_NONE) == 0, "mprotect failed");
    data_ = reinterpret_cast<float*>(base_ + bytes_ - page_) - n;
  }
  ~FloatsBeforeGuardPage() { munmap(base_, bytes_); }
  float* data() const { return data_; }

 private:
  size_t page_, bytes_ = 0;
  char* base_ = nullptr;
  float* data_ = nullptr;
};

// The last, partial vector of a product's columns and of an exp row is read
// and written only in its lanes, on every SIMD target: B and C end at a
// guard page (a whole-vector load or a load-blend-store there faults; past
// an operand's row it reads and rewrites another thread's elements).
TEST(CpuAttention, PartialVectorsStayInTheirElements) {
  for_each_simd_target([] {
    const int64_t m = 3, n = 5, k = 2;
    const std::vector<float> a = {1, 2, 3, 4, 5, 6};  // A: m x k
    const FloatsBeforeGuardPage b(size_t(k * n)), c(size_t(m * n));
    for (int64_t i = 0; i < k * n; ++i) b.data()[i] = float(i + 1);
    for (int64_t i = 0; i < m * n; ++i) c.data()[i] = 0.5f;
    attention_detail::gemm(m, n, k, 2.0f, a.data(), k, 1, b.data(), n, c.data(), n, true);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        const float want = 0.5f + 2.0f * (a[size_t(i * k)] * float(j + 1) + a[size_t(i * k + 1)] * float(n + j + 1));
        EXPECT_EQ(c.data()[i * n + j], want) << "C[" << i << ", " << j << "]";
      }
    const FloatsBeforeGuardPage x(3);
    for (int i = 0; i < 3; ++i) x.data()[i] = -float(i);
    EXPECT_FLOAT_EQ(attention_detail::exp_row(x.data(), 3, 0.0f), 1.0f + std::exp(-1.0f) + std::exp(-2.0f));
    EXPECT_FLOAT_EQ(x.data()[2], std::exp(-2.0f));
  });
}

// The backward against central differences of the forward's
// loss = sum(out * w), through every element of q, k, v and the bias, on a
// case with a causal, masked and fully masked row and grouped heads.
TEST(CpuAttention, BackwardMatchesFiniteDifferences) {
  const Case c{.B = 1,
               .T = 3,
               .S = 4,
               .N = 2,
               .K = 1,
               .H = 3,
               .causal = true,
               .scale = 0.7f,
               .bias_shape = {1, 2, 3, 4},
               .mask_shape = {1, 1, 3, 4},
               .mask_keep = 1.0,
               .seed = 80};
  Problem p(c);
  p.mask[0] = 0;  // row 0 sees only key 0, which is masked: fully masked
  p.mask[2 * 4 + 1] = 0;
  const KernelContext& ctx = host_kernel_context();
  const std::vector<float>& w = p.dout;
  auto loss = [&] {
    std::vector<float> out(w.size()), lse(size_t(c.N * c.T));
    attention_forward_f32(ctx, p.shape, p.extras, p.q.data(), p.k.data(), p.v.data(), out.data(), lse.data());
    double sum = 0.0;
    for (size_t i = 0; i < out.size(); ++i) sum += double(out[i]) * w[i];
    return sum;
  };
  std::vector<float> out(w.size()), lse(size_t(c.N * c.T));
  attention_forward_f32(ctx, p.shape, p.extras, p.q.data(), p.k.data(), p.v.data(), out.data(), lse.data());
  std::vector<float> dq(p.q.size()), dk(p.k.size()), dv(p.v.size()), dbias(p.bias.size(), 0.0f);
  attention_backward_f32(ctx, p.shape, p.extras, p.q.data(), p.k.data(), p.v.data(), out.data(), lse.data(), w.data(),
                         nullptr, dq.data(), dk.data(), dv.data(), dbias.data(), p.extras.bias_strides);
  const float eps = 1e-2f;
  auto check_grad = [&](const char* name, std::vector<float>& x, const std::vector<float>& grad) {
    for (size_t i = 0; i < x.size(); ++i) {
      const float saved = x[i];
      x[i] = saved + eps;
      const double up = loss();
      x[i] = saved - eps;
      const double down = loss();
      x[i] = saved;
      const double numeric = (up - down) / (2.0 * double(eps));
      EXPECT_NEAR(grad[i], numeric, 1e-3) << name << "[" << i << "]";
    }
  };
  check_grad("q", p.q, dq);
  check_grad("k", p.k, dk);
  check_grad("v", p.v, dv);
  check_grad("bias", p.bias, dbias);
}

}  // namespace
}  // namespace pax::cpu
