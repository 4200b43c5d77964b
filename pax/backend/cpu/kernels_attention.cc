// The CPU kernels of dot_product_attention and its backward: the operands
// as the f32 kernels of attention.h take them (16-bit values converted to
// f32 in scratch memory, a bias or mask's broadcast dimensions given stride
// 0), and the results converted back to their dtypes. f64 operands keep f64
// precision in plain per-row loops (a reference path, not a fast one).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <memory>
#include <vector>

#include "pax/backend/cpu/attention.h"
#include "pax/backend/cpu/elementwise.h"
#include "pax/backend/cpu/kernels.h"
#include "pax/core/buffer.h"
#include "pax/core/parallel.h"
#include "pax/prims/attention_params.h"

namespace pax::cpu {
namespace {

// Temporaries of one kernel call, and the f32 copies of its operands and
// results.
struct Scratch {
  KernelTemporaries temps;
  float* floats(int64_t n) { return static_cast<float*>(temps.allocate(n, DType::f32)); }
  // `t` as f32: itself, or converted.
  const float* f32(const TensorView& t) {
    if (t.dtype == DType::f32) return t.as<const float>();
    float* out = floats(t.numel());
    convert_parallel(t.dtype, t.data, DType::f32, out, t.numel());
    return out;
  }
  // `t` as f32, or null where the kernel takes its bf16 bits instead (and
  // converts what it reads in f32 itself).
  const float* f32_unless_bits(const TensorView& t, const AttentionBf16Operands& bf16) {
    return bf16.q != nullptr ? nullptr : f32(t);
  }
  // Where a result of `t`'s dtype is computed in f32: `t` itself, or a
  // temporary converted into it by finish().
  float* f32_output(const TensorView& t) {
    if (t.dtype == DType::f32) return t.as<float>();
    pending.push_back({floats(t.numel()), t});
    return pending.back().first;
  }
  void finish() {
    for (const auto& [computed, t] : pending) convert_parallel(DType::f32, computed, t.dtype, t.data, t.numel());
  }
  std::vector<std::pair<float*, TensorView>> pending;
};

// Element strides of a [B, N, T, S]-broadcastable operand, 0 where it
// broadcasts.
std::array<int64_t, 4> broadcast_strides(const Shape& s) {
  const std::vector<int64_t> strides = s.strides();
  std::array<int64_t, 4> out{};
  for (size_t d = 0; d < 4; ++d) out[d] = s[int64_t(d)] == 1 ? 0 : strides[d];
  return out;
}

AttentionShape shape_of(const TensorView& q, const TensorView& k, const AttentionParams& a) {
  AttentionShape s;
  s.batch = q.dim(0);
  s.q_len = q.dim(1);
  s.q_heads = q.dim(2);
  s.head_dim = q.dim(3);
  s.kv_len = k.dim(1);
  s.kv_heads = k.dim(2);
  s.scale = float(a.scale);
  s.is_causal = a.is_causal;
  s.logit_cap = float(a.logit_cap);
  return s;
}

AttentionExtras extras_of(std::span<const TensorView> in, const AttentionParams& a, Scratch& scratch) {
  AttentionExtras e;
  if (a.bias >= 0) {
    e.bias = scratch.f32(in[size_t(a.bias)]);
    e.bias_strides = broadcast_strides(*in[size_t(a.bias)].shape);
  }
  if (a.mask >= 0) {
    e.mask = in[size_t(a.mask)].as<const uint8_t>();
    e.mask_strides = broadcast_strides(*in[size_t(a.mask)].shape);
  }
  if (a.q_lengths >= 0) e.q_lengths = in[size_t(a.q_lengths)].as<const int32_t>();
  if (a.kv_lengths >= 0) e.kv_lengths = in[size_t(a.kv_lengths)].as<const int32_t>();
  return e;
}

// The bf16 bits of the operands at `indices` (q, k, v[, dout]) when they are
// all bf16: the kernels' native bf16 products read them.
AttentionBf16Operands bf16_operands(std::span<const TensorView> in, std::initializer_list<size_t> indices) {
  AttentionBf16Operands b;
  const uint16_t** slots[] = {&b.q, &b.k, &b.v, &b.dout};
  size_t slot = 0;
  for (size_t i : indices) {
    if (in[i].dtype != DType::bf16) return {};
    *slots[slot++] = in[i].as<const uint16_t>();
  }
  return b;
}

// ---- f64: one query row at a time, in f64 throughout.

struct F64Attention {
  AttentionShape sh;
  AttentionExtras ex;
  const double* bias = nullptr;  // the bias in f64 (ex.bias unused)
  const double *q, *k, *v;
  double scale = 1.0;      // in f64 (AttentionShape's is f32)
  double logit_cap = 0.0;  // in f64

  int64_t rows_of(int64_t b) const {
    return ex.q_lengths ? std::clamp<int64_t>(ex.q_lengths[b], 0, sh.q_len) : sh.q_len;
  }
  const double* q_row(int64_t b, int64_t t, int64_t n) const {
    return q + ((b * sh.q_len + t) * sh.q_heads + n) * sh.head_dim;
  }
  int64_t kv_offset(int64_t b, int64_t s, int64_t n) const {
    return ((b * sh.kv_len + s) * sh.kv_heads + n / (sh.q_heads / sh.kv_heads)) * sh.head_dim;
  }
  // The logits of row t of (b, n) into x[S]; whether each key is attended;
  // the logit cap's derivative into slope[S] (1 without a cap).
  void logits(int64_t b, int64_t n, int64_t t, std::vector<double>& x, std::vector<bool>& attend,
              std::vector<double>& slope) const {
    const int64_t S = sh.kv_len, H = sh.head_dim;
    const int64_t keys = ex.kv_lengths ? std::clamp<int64_t>(ex.kv_lengths[b], 0, S) : S;
    const double* qt = q_row(b, t, n);
    for (int64_t s = 0; s < S; ++s) {
      const double* ks = k + kv_offset(b, s, n);
      double dot = 0;
      for (int64_t h = 0; h < H; ++h) dot += qt[h] * ks[h];
      x[size_t(s)] = scale * dot;
      slope[size_t(s)] = 1.0;
      if (logit_cap > 0) {
        const double th = std::tanh(x[size_t(s)] / logit_cap);
        x[size_t(s)] = logit_cap * th;
        slope[size_t(s)] = 1.0 - th * th;
      }
      if (bias) {
        const auto& st = ex.bias_strides;
        x[size_t(s)] += bias[b * st[0] + n * st[1] + t * st[2] + s * st[3]];
      }
      bool on = s < keys && !(sh.is_causal && s > t);
      if (ex.mask) {
        const auto& st = ex.mask_strides;
        on = on && ex.mask[b * st[0] + n * st[1] + t * st[2] + s * st[3]] != 0;
      }
      attend[size_t(s)] = on;
      if (!on) x[size_t(s)] = double(kMaskedLogit);
    }
  }
  // x becomes the probabilities; returns the log-sum-exp.
  static double softmax(std::vector<double>& x) {
    const double m = *std::max_element(x.begin(), x.end());
    double sum = 0;
    for (double& e : x) sum += (e = std::exp(e - m));
    for (double& e : x) e /= sum;
    return m + std::log(sum);
  }
};

void attention_forward_f64(const F64Attention& a, double* out, float* lse) {
  const int64_t B = a.sh.batch, N = a.sh.q_heads, T = a.sh.q_len, S = a.sh.kv_len, H = a.sh.head_dim;
  parallel_for(B * N * T, 1, [&](int64_t begin, int64_t end) {
    std::vector<double> x(static_cast<size_t>(S)), slope(static_cast<size_t>(S));
    std::vector<bool> attend(static_cast<size_t>(S));
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / (N * T), n = r / T % N, t = r % T;
      double* o = out + ((b * T + t) * N + n) * H;
      std::fill(o, o + H, 0.0);
      float& l = lse[(b * N + n) * T + t];
      l = 0;
      if (t >= a.rows_of(b)) continue;
      a.logits(b, n, t, x, attend, slope);
      l = float(F64Attention::softmax(x));
      for (int64_t s = 0; s < S; ++s) {
        const double* vs = a.v + a.kv_offset(b, s, n);
        for (int64_t h = 0; h < H; ++h) o[h] += x[size_t(s)] * vs[h];
      }
    }
  });
}

// Sequential: dk, dv and a broadcast bias's gradient gather from many rows.
void attention_backward_f64(const F64Attention& a, const double* out, const double* dout, const float* dlse, double* dq,
                            double* dk, double* dv, double* dbias) {
  const int64_t B = a.sh.batch, N = a.sh.q_heads, T = a.sh.q_len, S = a.sh.kv_len, H = a.sh.head_dim;
  std::fill(dq, dq + B * T * N * H, 0.0);
  std::fill(dk, dk + B * S * a.sh.kv_heads * H, 0.0);
  std::fill(dv, dv + B * S * a.sh.kv_heads * H, 0.0);
  std::vector<double> p(static_cast<size_t>(S)), slope(static_cast<size_t>(S));
  std::vector<bool> attend(static_cast<size_t>(S));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t t = 0; t < a.rows_of(b); ++t) {
        a.logits(b, n, t, p, attend, slope);
        F64Attention::softmax(p);
        const int64_t row = ((b * T + t) * N + n) * H;
        double d = -double(dlse[(b * N + n) * T + t]);
        for (int64_t h = 0; h < H; ++h) d += dout[row + h] * out[row + h];
        for (int64_t s = 0; s < S; ++s) {
          const int64_t kv = a.kv_offset(b, s, n);
          double dp = 0;
          for (int64_t h = 0; h < H; ++h) {
            dp += dout[row + h] * a.v[kv + h];
            dv[kv + h] += p[size_t(s)] * dout[row + h];
          }
          if (!attend[size_t(s)]) continue;
          const double ds = p[size_t(s)] * (dp - d), scaled = a.scale * ds * slope[size_t(s)];
          for (int64_t h = 0; h < H; ++h) {
            dq[row + h] += scaled * a.k[kv + h];
            dk[kv + h] += scaled * a.q[row + h];
          }
          if (dbias) {
            const auto& st = a.ex.bias_strides;
            dbias[b * st[0] + n * st[1] + t * st[2] + s * st[3]] += ds;
          }
        }
      }
    }
  }
}

void attention_f64(const Params& p, Prim prim, std::span<const TensorView> in, std::span<const TensorView> out) {
  const AttentionParams ap = attention_params(p, prim);
  F64Attention a{shape_of(in[0], in[1], ap), {},       nullptr,     in[0].as<const double>(), in[1].as<const double>(),
                 in[2].as<const double>(),   ap.scale, ap.logit_cap};
  std::vector<double> bias;
  if (ap.bias >= 0) {
    const TensorView& t = in[size_t(ap.bias)];
    bias.resize(size_t(t.numel()));
    convert_parallel(t.dtype, t.data, DType::f64, bias.data(), t.numel());
    a.bias = bias.data();
    a.ex.bias_strides = broadcast_strides(*t.shape);
  }
  if (ap.mask >= 0) {
    a.ex.mask = in[size_t(ap.mask)].as<const uint8_t>();
    a.ex.mask_strides = broadcast_strides(*in[size_t(ap.mask)].shape);
  }
  if (ap.q_lengths >= 0) a.ex.q_lengths = in[size_t(ap.q_lengths)].as<const int32_t>();
  if (ap.kv_lengths >= 0) a.ex.kv_lengths = in[size_t(ap.kv_lengths)].as<const int32_t>();
  if (prim == Prim::dot_product_attention) return attention_forward_f64(a, out[0].as<double>(), out[1].as<float>());
  std::vector<double> dbias;
  if (ap.bias >= 0) dbias.assign(size_t(out[3].numel()), 0.0);
  attention_backward_f64(a, in[3].as<const double>(), in[5].as<const double>(), in[6].as<const float>(),
                         out[0].as<double>(), out[1].as<double>(), out[2].as<double>(),
                         dbias.empty() ? nullptr : dbias.data());
  if (ap.bias >= 0) convert_parallel(DType::f64, dbias.data(), out[3].dtype, out[3].data, out[3].numel());
}

void attention_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                      std::span<const TensorView> out) {
  if (in[0].dtype == DType::f64) return attention_f64(p, Prim::dot_product_attention, in, out);
  const AttentionParams a = attention_params(p, Prim::dot_product_attention);
  Scratch scratch{KernelTemporaries(ctx), {}};
  const AttentionShape shape = shape_of(in[0], in[1], a);
  const AttentionExtras extras = extras_of(in, a, scratch);
  const AttentionBf16Operands bf16 = bf16_operands(in, {0, 1, 2});
  attention_forward_f32(ctx, shape, extras, scratch.f32_unless_bits(in[0], bf16), scratch.f32_unless_bits(in[1], bf16),
                        scratch.f32_unless_bits(in[2], bf16), scratch.f32_output(out[0]), out[1].as<float>(), &bf16);
  scratch.finish();
}

void attention_bwd_kernel(const KernelContext& ctx, const Params& p, std::span<const TensorView> in,
                          std::span<const TensorView> out) {
  if (in[0].dtype == DType::f64) return attention_f64(p, Prim::dot_product_attention_bwd, in, out);
  const AttentionParams a = attention_params(p, Prim::dot_product_attention_bwd);
  Scratch scratch{KernelTemporaries(ctx), {}};
  const AttentionShape shape = shape_of(in[0], in[1], a);
  const AttentionExtras extras = extras_of(in, a, scratch);
  AttentionBf16Operands bf16 = bf16_operands(in, {0, 1, 2, 5});
  if (bf16.q && in[3].dtype == DType::bf16) bf16.out = in[3].as<const uint16_t>();
  float* dbias = nullptr;
  std::array<int64_t, 4> dbias_strides{};
  if (a.bias >= 0) {
    dbias = scratch.f32_output(out[3]);
    std::memset(dbias, 0, size_t(out[3].numel()) * sizeof(float));
    dbias_strides = broadcast_strides(*out[3].shape);
  }
  attention_backward_f32(ctx, shape, extras, scratch.f32_unless_bits(in[0], bf16), scratch.f32_unless_bits(in[1], bf16),
                         scratch.f32_unless_bits(in[2], bf16), bf16.out ? nullptr : scratch.f32(in[3]),
                         in[4].as<const float>(), scratch.f32_unless_bits(in[5], bf16), in[6].as<const float>(),
                         scratch.f32_output(out[0]), scratch.f32_output(out[1]), scratch.f32_output(out[2]), dbias,
                         dbias_strides, &bf16);
  scratch.finish();
}

}  // namespace

void register_attention_kernels(CpuKernelTable& t) {
  t[size_t(Prim::dot_product_attention)] = attention_kernel;
  t[size_t(Prim::dot_product_attention_bwd)] = attention_bwd_kernel;
}

}  // namespace pax::cpu
