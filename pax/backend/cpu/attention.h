// Dot-product attention on the CPU, forward and backward, in f32, with the
// semantics of jax.nn.dot_product_attention: the kernels of the
// dot_product_attention and dot_product_attention_bwd primitives. Memory
// grows linearly with the sequence lengths: no [T, S] matrix of a whole
// (batch, head) is kept; queries are processed in blocks against the keys
// (causally masked key blocks skipped), the backward pass recomputing each
// block's probabilities from the forward's row log-sum-exp.
//
// Layouts (row-major, contiguous):
//   q, out, dq     [B, T, N, H]   queries, N query heads
//   k, v, dk, dv   [B, S, K, H]   keys and values, K key / value heads
//   lse            [B, N, T]      each query row's log-sum-exp of its logits
// Grouped-query attention: N is a multiple of K, and query head n reads key /
// value head n / (N / K).
//
// The logits of query row t against key s, for head n of example b:
//   x[t, s] = c(scale * (q[b, t, n, :] . k[b, s, n / (N / K), :])) + bias[b, n, t, s]
// with c(y) = logit_cap * tanh(y / logit_cap) when logit_cap > 0, else y,
// set to kMaskedLogit where masked: key s is masked for row t when
// mask[b, n, t, s] is false, when is_causal and s > t, or when
// s >= kv_lengths[b]. The probabilities are softmax(x[t, :]) over all S keys,
// in f32; out[b, t, n, :] = sum_s p[t, s] v[b, s, n / (N / K), :]. A row whose
// every key is masked thus averages all S values (as JAX's finite masking
// does). Rows t >= q_lengths[b] (padding queries) have out = 0 and lse = 0.
// bias and mask broadcast: each of their 4 dimensions is either the full
// size (B, N, T or S) or 1, given by element strides (0 for a broadcast
// dimension).
#pragma once

#include <array>
#include <cstdint>

#include "pax/backend/kernel.h"

namespace pax::cpu {

// The logit a masked key gets: finite, so that a row with every key masked
// has a defined softmax (uniform), as in jax.nn.dot_product_attention.
inline constexpr float kMaskedLogit = -0.7f * 3.40282347e38f;

struct AttentionShape {
  int64_t batch = 1, q_len = 1, kv_len = 1, q_heads = 1, kv_heads = 1, head_dim = 1;  // B, T, S, N, K, H
  float scale = 1.0f;
  bool is_causal = false;
  float logit_cap = 0.0f;  // > 0: logits scale * q.k become cap * tanh(scale * q.k / cap), before the bias
};

// Optional operands; a null pointer means absent.
struct AttentionExtras {
  const float* bias = nullptr;            // additive logits, f32
  std::array<int64_t, 4> bias_strides{};  // elements per step of (B, N, T, S); 0: broadcast
  const uint8_t* mask = nullptr;          // 1: attend, 0: masked (bool bytes)
  std::array<int64_t, 4> mask_strides{};  // as bias_strides
  const int32_t* q_lengths = nullptr;     // [B] valid query rows per example
  const int32_t* kv_lengths = nullptr;    // [B] valid keys per example
};

// The bf16 values of operands that came in bf16 (bf16 bits; null where not
// given). Where q is given and the CPU has bf16 products (AMX or
// AVX512_BF16, attention_bf16.h), the kernels multiply these (q, k and v for
// both passes, dout for the backward) with f32 sums, and round the
// probabilities and the logits' gradients to bf16 per block before their
// products. The f32 pointers of q, k, v, out and dout may be null where these
// are given: the kernels convert those they read in f32 (the backward reads
// the rows of out and dout for their dot products, dout where a row has
// every key masked, and q and k for such a row's logits; all of them when
// the CPU has no bf16 products).
struct AttentionBf16Operands {
  const uint16_t *q = nullptr, *k = nullptr, *v = nullptr, *dout = nullptr;
  const uint16_t* out = nullptr;  // the backward's: the forward's output
};

// out and lse from q, k, v (all f32). Scratch memory comes from ctx.
void attention_forward_f32(const KernelContext& ctx, const AttentionShape& shape, const AttentionExtras& extras,
                           const float* q, const float* k, const float* v, float* out, float* lse,
                           const AttentionBf16Operands* bf16 = nullptr);

// The gradients of a loss through the forward above: dq, dk, dv (and dbias
// when dbias is not null: the logits' gradient summed over the dimensions the
// bias broadcasts, added into dbias (which the caller zeroes) with
// dbias_strides, the bias's own layout with 0 for a broadcast dimension) from
// q, k, v, the forward's out and lse, the output's cotangent dout and the
// log-sum-exp's cotangent dlse ([B, N, T]; null: zero). Masked logits pass no gradient to q, k or the bias (they are
// constants in the forward), but their probabilities still weigh v (a fully masked row averages v). Rows t >=
// q_lengths[b] pass none at all.
void attention_backward_f32(const KernelContext& ctx, const AttentionShape& shape, const AttentionExtras& extras,
                            const float* q, const float* k, const float* v, const float* out, const float* lse,
                            const float* dout, const float* dlse, float* dq, float* dk, float* dv, float* dbias,
                            const std::array<int64_t, 4>& dbias_strides, const AttentionBf16Operands* bf16 = nullptr);

}  // namespace pax::cpu
