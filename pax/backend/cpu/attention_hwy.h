// The vectorised inner loops of the CPU attention kernels (attention.cc):
// a register-blocked product of small matrices and the row operations of the
// softmax and its gradient, compiled once per SIMD target by Highway
// (attention_hwy.cc) and chosen at run time. All single-threaded: the caller
// runs them inside its own parallel tasks.
#pragma once

#include <cstdint>

namespace pax::cpu::attention_detail {

// C[i, j] = alpha * sum_p A(i, p) B[p, j] (plus C[i, j] when accumulate) for
// i < m, j < n, p < k, where A(i, p) = a[i * a_row + p * a_col] (any strides,
// so that A may be a transposed view), B's rows are ldb elements apart and
// contiguous, and C's rows ldc apart and contiguous. k may be 0 (C = 0, or C
// unchanged when accumulating).
void gemm(int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t a_row, int64_t a_col, const float* b,
          int64_t ldb, float* c, int64_t ldc, bool accumulate);

// The logits of one query row in place: x[s] = c(scale * x[s]) + bias(s) for
// s < valid where mask(s) is set, kMaskedLogit elsewhere (s < n). c is the
// logit cap c(y) = cap * tanh(y / cap) when cap > 0 (then, when slope is not
// null, slope[s] = c'(y) = 1 - tanh^2 for s < valid), else c(y) = y.
// bias(s) = bias[s * bias_stride] and mask(s) = mask[s * mask_stride] (null:
// none; stride 0 broadcasts). Returns the row's maximum (NaN logits may or
// may not count; exp_row carries them into the results either way).
float logits_row(float* x, int64_t n, int64_t valid, float scale, float cap, float* slope, const float* bias,
                 int64_t bias_stride, const uint8_t* mask, int64_t mask_stride);

// x[s] = exp(x[s] - shift) for s < n (0 where the argument is below the range
// of f32's exp); returns the sum of the results.
float exp_row(float* x, int64_t n, float shift);

// dst[j * ldd + i] = x[i * x_row + j] for i < rows, j < cols: whole vectors
// of rows gathered at once.
void transpose(const float* x, int64_t x_row, int64_t rows, int64_t cols, float* dst, int64_t ldd);

// sum_i a[i] * b[i] for i < n.
float dot(const float* a, const float* b, int64_t n);

// The logits' gradient of one row in place: ds[s] = p[s] * (ds[s] - delta)
// where key s is unmasked (s < valid and mask(s) set), 0 elsewhere (s < n).
void dlogits_row(float* ds, const float* p, int64_t n, int64_t valid, float delta, const uint8_t* mask,
                 int64_t mask_stride);

}  // namespace pax::cpu::attention_detail
