// Dot-product attention on the CPU in f32 (attention.h): blocks of query
// rows against blocks of keys, each block's logits in a per-thread scratch
// of rows x kKeyBlock that stays in the core's cache with the keys and
// values it reads, the products through the register-blocked loops of
// attention_hwy.cc.
//
// Forward: tasks are (example, query head, query block). K is transposed
// once into [B, K, H, S] so that a block's logits are a product with rows of
// keys along the vector lanes. The key blocks pass with an online softmax:
// each row keeps its running maximum and sum, and the output rows (summed in
// place) are rescaled when the maximum grows. Keys no row of a query block
// can see are neither computed nor read: those past kv_lengths, for
// is_causal those past the block's last row, and those past the last key the
// mask lets any row of the block attend to (a causal or padding mask given
// as an array is thus skipped as is_causal is; each mask row's last attended
// key is found once per call). They are masked, so they weigh nothing
// unless a row's every logit is masked: such a row (detected by its maximum
// not exceeding kMaskedLogit) adds the skipped keys' values with weight
// exp(0) = 1 each, as the full softmax over S would. The same holds within
// a block, per strip of 16 rows: a key block that a strip sees only in part
// (it crosses the causal diagonal, or a mask's edge) is computed strip by
// strip, each strip only up to the last key one of its rows may see.
//
// Backward (FlashAttention-2): the block's probabilities are recomputed from
// the forward's lse, P = exp(x - lse), dS = P * (dO V^T - rowsum(dO * O))
// where unmasked, and dQ = scale dS K, dK += scale dS^T Q, dV += P^T dO,
// dbias += dS. Row strips as in the forward: P, dS and dQ per strip, and dK
// and dV per range of keys with only the strips from the first that sees
// them (from a multiple of 32 rows with bf16 products, whose depth is padded
// to 32). Tasks are (example, kv head, key chunk); each passes over its
// chunk in key blocks and, per key block, over the query heads of its group
// and the query blocks, so that each owns its rows of dK and dV (no races, a
// fixed summation order). When the examples and kv heads make fewer than
// four tasks per thread, the keys are split into chunks that run in
// parallel (so that threads slowed by other work even out), each chunk's dQ
// going to a buffer of its own summed at the end. A dimension over which
// the bias broadcasts (so that tasks along it would add into the same dbias
// entries) is looped inside the tasks instead. Each row's rowsum(dO * O)
// is found once before the tasks. A row whose lse does not exceed
// kMaskedLogit (every key masked: its lse is kMaskedLogit + log(S) rounded)
// cannot be recomputed from lse in f32, so its maximum and sum are
// recomputed over all S keys, also once before the tasks.
#include "pax/backend/cpu/attention.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "pax/backend/cpu/attention_bf16.h"
#include "pax/backend/cpu/attention_hwy.h"
#include "pax/backend/cpu/elementwise.h"
#include "pax/core/buffer.h"
#include "pax/core/dtype.h"
#include "pax/core/error.h"
#include "pax/core/parallel.h"

namespace pax::cpu {
namespace {

namespace ad = attention_detail;

constexpr int64_t kBlockRows = 64;      // query rows per block
constexpr int64_t kKeyBlock = 256;      // keys per block: 64 KiB of logits, keys and values each
constexpr int64_t kMinChunk = 128;      // keys per backward chunk, at least
constexpr int64_t kTasksPerThread = 4;  // backward tasks per thread, where chunks of keys can make them
// The backward's dQ buffers of its key chunks past the first: at most this
// many bytes, or 4 of them.
constexpr int64_t kChunkBuffersBytes = int64_t(512) << 20;
constexpr int64_t kAlign = 16;  // floats: scratch rows start 64 bytes apart

int64_t round_up(int64_t n, int64_t m) { return ceil_div(n, m) * m; }

// The row stride of a scratch matrix with n columns: 64-byte aligned, and not
// a multiple of 1 KiB, whose rows would all fall into the same few cache
// sets (the products walk down columns of these matrices).
int64_t row_stride(int64_t n) {
  const int64_t stride = round_up(n, kAlign);
  return stride % 256 == 0 ? stride + kAlign : stride;
}

// Sizes, strides and per-example bounds shared by both passes.
struct Geometry {
  AttentionShape sh;
  AttentionExtras ex;
  int64_t group = 1;   // query heads per kv head
  int64_t block = 1;   // query rows per block
  int64_t blocks = 1;  // query blocks per (example, head)
  int64_t ldt = 1;     // row stride of the transposed keys / values
  int64_t q_row = 1;   // elements between query rows: N * H
  int64_t kv_row = 1;  // elements between key rows: K * H
  // Per mask row ([B or 1, N or 1, T or 1] as the mask broadcasts): the
  // keys [0, ones) it attends to without a gap, and one past its last
  // attended key. Empty without a mask.
  struct MaskSpan {
    int32_t ones = 0, limit = 0;
  };
  std::vector<MaskSpan> mask_spans;
  int64_t span_heads = 1, span_rows = 1;

  Geometry(const AttentionShape& s, const AttentionExtras& e) : sh(s), ex(e) {
    PAX_CHECK(s.batch > 0 && s.q_len > 0 && s.kv_len > 0 && s.q_heads > 0 && s.kv_heads > 0 && s.head_dim > 0,
              "dot_product_attention: sizes must be positive, got B=", s.batch, " T=", s.q_len, " S=", s.kv_len,
              " N=", s.q_heads, " K=", s.kv_heads, " H=", s.head_dim);
    PAX_CHECK(s.q_heads % s.kv_heads == 0, "dot_product_attention: the ", s.q_heads,
              " query heads must be a multiple of the ", s.kv_heads, " key / value heads");
    group = s.q_heads / s.kv_heads;
    block = std::min(kBlockRows, s.q_len);
    blocks = ceil_div(s.q_len, block);
    ldt = row_stride(s.kv_len);
    q_row = s.q_heads * s.head_dim;
    kv_row = s.kv_heads * s.head_dim;
    if (e.mask) find_mask_limits();
  }

  void find_mask_limits() {
    const auto& st = ex.mask_strides;
    const int64_t mb = st[0] ? sh.batch : 1, S = sh.kv_len;
    span_heads = st[1] ? sh.q_heads : 1;
    span_rows = st[2] ? sh.q_len : 1;
    mask_spans.assign(size_t(mb * span_heads * span_rows), {});
    parallel_for(mb * span_heads * span_rows, 64, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const int64_t t = i % span_rows, n = i / span_rows % span_heads, b = i / (span_rows * span_heads);
        mask_spans[size_t(i)] = span_of(ex.mask + b * st[0] + n * st[1] + t * st[2], S, st[3]);
      }
    });
  }

  // The span of one mask row of n keys, stride apart: whole 8-byte words
  // at a time where they are contiguous.
  static MaskSpan span_of(const uint8_t* row, int64_t n, int64_t stride) {
    if (stride == 0) return row[0] ? MaskSpan{int32_t(n), int32_t(n)} : MaskSpan{};
    constexpr uint64_t kAllOnes = 0x0101010101010101ull;
    auto word = [&](int64_t at) {
      uint64_t w;
      std::memcpy(&w, row + at, sizeof(w));
      return w;
    };
    int64_t ones = 0, limit = n;
    if (stride == 1)
      while (ones + 8 <= n && word(ones) == kAllOnes) ones += 8;
    while (ones < n && row[ones * stride] != 0) ++ones;
    if (stride == 1)
      while (limit - 8 >= ones && word(limit - 8) == 0) limit -= 8;
    while (limit > ones && row[(limit - 1) * stride] == 0) --limit;
    return {int32_t(ones), int32_t(limit)};
  }

  // Valid query rows and keys of example b (lengths clamped to [0, T] / [0, S]).
  int64_t rows_of(int64_t b) const {
    return ex.q_lengths ? std::clamp<int64_t>(ex.q_lengths[b], 0, sh.q_len) : sh.q_len;
  }
  int64_t keys_of(int64_t b) const {
    return ex.kv_lengths ? std::clamp<int64_t>(ex.kv_lengths[b], 0, sh.kv_len) : sh.kv_len;
  }
  // Keys the block of rows [t0, t1) of head n computes: none past the last
  // one a row of it may attend to.
  int64_t visible(int64_t b, int64_t n, int64_t t0, int64_t t1) const {
    int64_t keys = sh.is_causal ? std::min(keys_of(b), t1) : keys_of(b);
    if (!mask_spans.empty()) keys = std::min(keys, mask_limit(b, n, t0, t1));
    return keys;
  }
  const MaskSpan* spans_of(int64_t b, int64_t n) const {
    const auto& st = ex.mask_strides;
    return mask_spans.data() + ((st[0] ? b : 0) * span_heads + (st[1] ? n : 0)) * span_rows;
  }
  // One past the last key any mask row of [t0, t1) attends to.
  int64_t mask_limit(int64_t b, int64_t n, int64_t t0, int64_t t1) const {
    const MaskSpan* row = spans_of(b, n);
    if (ex.mask_strides[2] == 0) return row[0].limit;
    int64_t limit = 0;
    for (int64_t t = t0; t < t1; ++t) limit = std::max<int64_t>(limit, row[t].limit);
    return limit;
  }
  // Row t's mask over keys [s0, s0 + w), given that only the first `valid`
  // of them may be attended to: null where the row attends to all of those,
  // or where its attended keys are one run from key 0 (a causal or padding
  // mask), which `valid` then ends instead (the keys past it are masked).
  const uint8_t* mask_block(int64_t b, int64_t n, int64_t t, int64_t s0, int64_t w, int64_t& valid) const {
    if (!ex.mask) return nullptr;
    const MaskSpan span = spans_of(b, n)[ex.mask_strides[2] ? t : 0];
    if (s0 + std::min(w, valid) <= span.ones) return nullptr;
    if (span.ones == span.limit) {
      valid = std::clamp<int64_t>(span.ones - s0, 0, valid);
      return nullptr;
    }
    return mask_row(b, n, t) + s0 * ex.mask_strides[3];
  }
  // Unmasked-by-position keys of row t: [0, limit).
  int64_t row_limit(int64_t t, int64_t visible_keys) const {
    return sh.is_causal ? std::min(t + 1, visible_keys) : visible_keys;
  }
  const float* bias_row(int64_t b, int64_t n, int64_t t) const {
    if (!ex.bias) return nullptr;
    const auto& st = ex.bias_strides;
    return ex.bias + b * st[0] + n * st[1] + t * st[2];
  }
  const uint8_t* mask_row(int64_t b, int64_t n, int64_t t) const {
    if (!ex.mask) return nullptr;
    const auto& st = ex.mask_strides;
    return ex.mask + b * st[0] + n * st[1] + t * st[2];
  }
  int64_t q_offset(int64_t b, int64_t t, int64_t n) const {
    return ((b * sh.q_len + t) * sh.q_heads + n) * sh.head_dim;
  }
  int64_t kv_offset(int64_t b, int64_t s, int64_t kh) const {
    return ((b * sh.kv_len + s) * sh.kv_heads + kh) * sh.head_dim;
  }
  int64_t lse_offset(int64_t b, int64_t n, int64_t t) const { return (b * sh.q_heads + n) * sh.q_len + t; }
};

// x[B, S, K, H] into xt[B, K, H, ldt]: keys along the rows of each
// (example, head), the layout whose rows the products read as vectors.
void transpose_keys(const Geometry& g, const float* x, float* xt) {
  const int64_t K = g.sh.kv_heads, H = g.sh.head_dim;
  parallel_for(g.sh.batch * K, 1, [&](int64_t begin, int64_t end) {
    for (int64_t task = begin; task < end; ++task)
      ad::transpose(x + g.kv_offset(task / K, 0, task % K), g.kv_row, g.sh.kv_len, H, xt + task * H * g.ldt, g.ldt);
  });
}

// Per-thread scratch: `slots` areas of `per_slot` floats from ctx, the area
// of the calling thread picked by its OpenMP thread number.
class ThreadScratch {
 public:
  ThreadScratch(const KernelContext& ctx, int64_t per_slot)
      : slots_(std::max(1, omp_get_max_threads())), per_slot_(round_up(per_slot, kAlign)) {
    buffer_ = ctx.allocate_scratch(size_t(slots_ * per_slot_) * sizeof(float));
  }
  float* mine() const { return static_cast<float*>(buffer_->data()) + (omp_get_thread_num() % slots_) * per_slot_; }

 private:
  int64_t slots_, per_slot_;
  std::shared_ptr<Buffer> buffer_;
};

// Operands given only as bf16 bits, converted to f32 where a kernel reads
// them in f32 (the buffers held for the call).
class F32Operands {
 public:
  explicit F32Operands(const KernelContext& ctx) : ctx_(ctx) {}
  // x itself, or n floats converted from bits where x is null.
  const float* get(const float* x, const uint16_t* bits, int64_t n, const char* name) {
    if (x) return x;
    PAX_CHECK(bits, "dot_product_attention: the operand ", name, " is given neither in f32 nor in bf16");
    held_.push_back(ctx_.allocate_scratch(size_t(n) * sizeof(float)));
    float* f = static_cast<float*>(held_.back()->data());
    convert_parallel(DType::bf16, bits, DType::f32, f, n);
    return f;
  }

 private:
  const KernelContext& ctx_;
  std::vector<std::shared_ptr<Buffer>> held_;
};

void fill_zero(float* x, int64_t n) {
  parallel_for(n, grain_for(sizeof(float)),
               [&](int64_t begin, int64_t end) { std::memset(x + begin, 0, size_t(end - begin) * sizeof(float)); });
}

// The products of both passes. f32 operands go through ad::gemm; where the
// operands came in bf16 and the CPU has a bf16 unit (attention_bf16.h),
// their bf16 values go through it (f32 sums), paired and padded once per
// call as it takes them, and the f32 probabilities and logit gradients are
// rounded to bf16 per block (as flash attention does on GPUs). The bf16
// products that accumulate add only their valid rows and columns to the
// destination (other threads own the rows past them): directly on
// AVX512_BF16, through per-thread scratch from AMX tiles. On AVX512_BF16 a
// transposed block is taken as a pair-major operand (no transpose made).
class Products {
 public:
  // f32 operands: q [B, T, N, H], k and v [B, S, K, H], kt and vt their
  // transposes (transpose_keys); vt and dout are the backward's.
  struct F32 {
    const float *q = nullptr, *k = nullptr, *kt = nullptr, *v = nullptr, *vt = nullptr, *dout = nullptr;
  };

  Products(const Geometry& g, const F32& f, const AttentionBf16Operands* bf16) : gp_(&g), f_(f) {
    if (bf16 && bf16->q) unit_ = attention_bf16::unit();
    if (unit_ != Unit::none) b16_ = bf16;
  }
  bool bf16() const { return b16_ != nullptr; }
  // The first query row of a dK or dV product over rows from r: the bf16
  // products read their depth (query rows) from pairs padded to 32 rows, so
  // they start at a multiple of 32 (the rows before r add zeros).
  int64_t depth_start(int64_t r) const { return b16_ ? r / kDepth * kDepth : r; }
  const F32& f32() const { return f_; }

  // Pairs the bf16 operands (forward: q, k, v; backward: also dout), in
  // memory from ctx. Returns the floats of scratch each thread needs.
  int64_t prepare(const KernelContext& ctx, bool backward) {
    if (!b16_) return 0;
    const Geometry& g = *gp_;
    const int64_t B = g.sh.batch, K = g.sh.kv_heads, N = g.sh.q_heads, S = g.sh.kv_len, T = g.sh.q_len;
    const int64_t H = g.sh.head_dim;
    h16_ = round_up(H, kPad);
    h32_ = round_up(H, kDepth);
    s16_ = round_up(S, kPad);
    s32_ = round_up(S, kDepth);
    t32_ = round_up(T, kDepth);
    const int64_t by_h = B * K * h32_ * s16_, by_s = B * K * s32_ * h16_, by_t = B * N * t32_ * h16_;
    const int64_t total = by_h + by_s + (backward ? by_h + by_s + 2 * by_t : 0);
    buffer_ = ctx.allocate_scratch(size_t(total) * sizeof(uint16_t));
    uint16_t* next = static_cast<uint16_t*>(buffer_->data());
    auto take = [&](int64_t n) { return std::exchange(next, next + n); };
    k_by_h_ = take(by_h);
    v_by_s_ = take(by_s);
    if (backward) {
      v_by_h_ = take(by_h);
      k_by_s_ = take(by_s);
      q_by_t_ = take(by_t);
      dout_by_t_ = take(by_t);
    }
    namespace ab = attention_bf16;
    parallel_for(B * K, 1, [&](int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; ++task) {
        const int64_t off = g.kv_offset(task / K, 0, task % K);
        ab::pair(H, S, h32_, s16_, b16_->k + off, 1, g.kv_row, k_by_h_ + task * h32_ * s16_, s16_);
        ab::pair(S, H, s32_, h16_, b16_->v + off, g.kv_row, 1, v_by_s_ + task * s32_ * h16_, h16_);
        if (!backward) continue;
        ab::pair(H, S, h32_, s16_, b16_->v + off, 1, g.kv_row, v_by_h_ + task * h32_ * s16_, s16_);
        ab::pair(S, H, s32_, h16_, b16_->k + off, g.kv_row, 1, k_by_s_ + task * s32_ * h16_, h16_);
      }
    });
    if (backward) {
      parallel_for(B * N, 1, [&](int64_t begin, int64_t end) {
        for (int64_t task = begin; task < end; ++task) {
          const int64_t off = g.q_offset(task / N, 0, task % N);
          ab::pair(T, H, t32_, h16_, b16_->q + off, g.q_row, 1, q_by_t_ + task * t32_ * h16_, h16_);
          ab::pair(T, H, t32_, h16_, b16_->dout + off, g.q_row, 1, dout_by_t_ + task * t32_ * h16_, h16_);
        }
      });
    }
    // Operand rows of a block (kBlockRows x up to kKeyBlock keys, or its
    // transpose) in bf16, and a padded result of up to kKeyBlock x h16 floats.
    const int64_t operand = std::max(kBlockRows * std::max(h32_, kKeyBlock), kKeyBlock * kBlockRows);
    return ceil_div(operand, 2) + kKeyBlock * h16_;
  }

  // x[rows, w] = q[b, t0:, n] . k[b, s0:s0+w, kh]^T (x has kBlockRows rows
  // and at least round_up(w, 16) columns).
  void scores(int64_t b, int64_t n, int64_t t0, int64_t rows, int64_t s0, int64_t w, float* x, int64_t ldx,
              float* scratch) const {
    if (b16_) return rows_times_keys(b16_->q, k_by_h_, b, n, t0, rows, s0, w, x, ldx, scratch);
    const int64_t H = gp_->sh.head_dim, kv = b * gp_->sh.kv_heads + n / gp_->group;
    ad::gemm(rows, w, H, 1.0f, f_.q + gp_->q_offset(b, t0, n), gp_->q_row, 1, f_.kt + kv * H * gp_->ldt + s0, gp_->ldt,
             x, ldx, false);
  }
  // ds[rows, w] = dout[b, t0:, n] . v[b, s0:s0+w, kh]^T
  void dprobs(int64_t b, int64_t n, int64_t t0, int64_t rows, int64_t s0, int64_t w, float* ds, int64_t ldw,
              float* scratch) const {
    if (b16_) return rows_times_keys(b16_->dout, v_by_h_, b, n, t0, rows, s0, w, ds, ldw, scratch);
    const int64_t H = gp_->sh.head_dim, kv = b * gp_->sh.kv_heads + n / gp_->group;
    ad::gemm(rows, w, H, 1.0f, f_.dout + gp_->q_offset(b, t0, n), gp_->q_row, 1, f_.vt + kv * H * gp_->ldt + s0,
             gp_->ldt, ds, ldw, false);
  }
  // out[rows, H] (rows ldo apart) += alpha p[rows, w] . x[b, s0:s0+w, kh],
  // x the values (forward) or the keys (dQ).
  void add_times_rows(bool keys, int64_t b, int64_t n, int64_t rows, int64_t s0, int64_t w, float alpha, const float* p,
                      int64_t ldp, float* out, int64_t ldo, float* scratch) const {
    const Geometry& g = *gp_;
    const int64_t H = g.sh.head_dim, kv = b * g.sh.kv_heads + n / g.group;
    if (!b16_) {
      const float* x = (keys ? f_.k : f_.v) + g.kv_offset(b, s0, n / g.group);
      return ad::gemm(rows, H, w, alpha, p, ldp, 1, x, g.kv_row, out, ldo, true);
    }
    const int64_t w32 = round_up(w, kDepth);
    auto* a16 = reinterpret_cast<uint16_t*>(scratch + kKeyBlock * h16_);
    attention_bf16::convert_rows(rows, w, w32, p, ldp, a16, w32);
    const uint16_t* x = (keys ? k_by_s_ : v_by_s_) + kv * s32_ * h16_ + s0 * h16_;
    attention_bf16::product_add(unit_, rows, H, w32, attention_bf16::rows_left(a16, w32), x, h16_, alpha, out, ldo,
                                scratch);
  }
  // out[w, H] (rows kv_row apart) += alpha p[rows, w]^T . x[b, t0:t0+rows, n],
  // x the queries (dK) or the output's cotangent (dV).
  void add_transposed_times(bool queries, int64_t b, int64_t n, int64_t t0, int64_t rows, int64_t w, float alpha,
                            const float* p, int64_t ldp, float* out, float* scratch) const {
    const Geometry& g = *gp_;
    const int64_t H = g.sh.head_dim;
    if (!b16_) {
      const float* x = (queries ? f_.q : f_.dout) + g.q_offset(b, t0, n);
      return ad::gemm(w, H, rows, alpha, p, 1, ldp, x, g.q_row, out, g.kv_row, true);
    }
    const int64_t r32 = round_up(rows, kDepth), w16 = round_up(w, kPad);
    auto* a16 = reinterpret_cast<uint16_t*>(scratch + kKeyBlock * h16_);
    attention_bf16::Left left = attention_bf16::rows_left(a16, r32);
    if (attention_bf16::takes_pair_major(unit_)) {  // no transpose: pairs of p's rows side by side
      attention_bf16::convert_pair_major(rows, w, r32, p, ldp, a16, w16);
      left = attention_bf16::pair_major_left(a16, w16);
    } else {
      attention_bf16::convert_transposed(rows, w, r32, p, ldp, a16, r32);
    }
    const uint16_t* x = (queries ? q_by_t_ : dout_by_t_) + (b * g.sh.q_heads + n) * t32_ * h16_ + t0 * h16_;
    attention_bf16::product_add(unit_, w, H, r32, left, x, h16_, alpha, out, g.kv_row, scratch);
  }

 private:
  using Unit = attention_bf16::Unit;
  static constexpr int64_t kPad = attention_bf16::kRowsPad, kDepth = attention_bf16::kDepthPad;

  // x[rows, w] = y[b, t0:, n] . z[b, s0:s0+w, kh]^T for bf16 rows y and z
  // paired by head dimension.
  void rows_times_keys(const uint16_t* y, const uint16_t* z_by_h, int64_t b, int64_t n, int64_t t0, int64_t rows,
                       int64_t s0, int64_t w, float* x, int64_t ldx, float* scratch) const {
    const Geometry& g = *gp_;
    const int64_t H = g.sh.head_dim, kv = b * g.sh.kv_heads + n / g.group;
    const int64_t m16 = round_up(rows, kPad), w16 = round_up(w, kPad);
    const uint16_t* y0 = y + g.q_offset(b, t0, n);
    const uint16_t* z = z_by_h + kv * h32_ * s16_ + 2 * s0;
    if (!attention_bf16::needs_padding(unit_) && H % 2 == 0)  // y's rows read in place
      return attention_bf16::product(unit_, rows, w16, H, y0, g.q_row, z, s16_, x, ldx);
    auto* a16 = reinterpret_cast<uint16_t*>(scratch + kKeyBlock * h16_);
    for (int64_t i = 0; i < m16; ++i) {  // rows past the block's are zero
      uint16_t* dst = a16 + i * h32_;
      if (i < rows) std::memcpy(dst, y0 + i * g.q_row, size_t(H) * sizeof(uint16_t));
      std::fill(dst + (i < rows ? H : 0), dst + h32_, uint16_t(0));
    }
    attention_bf16::product(unit_, m16, w16, h32_, a16, h32_, z, s16_, x, ldx);
  }

  const Geometry* gp_;
  F32 f_;
  const AttentionBf16Operands* b16_ = nullptr;
  Unit unit_ = Unit::none;
  std::shared_ptr<Buffer> buffer_;
  int64_t h16_ = 0, h32_ = 0, s16_ = 0, s32_ = 0, t32_ = 0;  // padded sizes
  // Paired bf16 operands: keys and values by head dimension (per (b, kh):
  // h32 / 2 pairs of s16 columns), by key (s32 / 2 pairs of h16 columns),
  // and queries and the output's cotangent by query row (per (b, n): t32 / 2
  // pairs of h16 columns).
  uint16_t *k_by_h_ = nullptr, *v_by_h_ = nullptr, *k_by_s_ = nullptr, *v_by_s_ = nullptr;
  uint16_t *q_by_t_ = nullptr, *dout_by_t_ = nullptr;
};

// The values as the forward's rows with every key masked read them: in f32,
// or (bf16 products) as the bf16 bits, converted as they are read.
struct Values {
  const float* f32 = nullptr;
  const uint16_t* bits = nullptr;
  // o[h] += v[at + h] for h < H.
  void add_row(int64_t at, int64_t H, float* o) const {
    for (int64_t h = 0; h < H; ++h) o[h] += f32 ? f32[at + h] : bf16_to_float(bits[at + h]);
  }
};

// The row strips of a query block's rows [t0, t0 + rows): strip k holds
// rows [k * size, (k + 1) * size) of it and sees keys [0, visible[k]) only
// (the keys any of its rows may attend to). A key block that some strip sees
// only in part (the causal diagonal, a mask's edge) is computed strip by
// strip, each up to its own last key, instead of whole: at the diagonal
// that skips most of the masked half a whole block would compute.
struct Strips {
  static constexpr int64_t kSize = 16, kMax = kBlockRows / kSize;
  int64_t count = 0;
  int64_t visible[kMax] = {};

  Strips(const Geometry& g, int64_t b, int64_t n, int64_t t0, int64_t block_rows) : count(ceil_div(block_rows, kSize)) {
    for (int64_t k = 0; k < count; ++k)
      visible[k] = g.visible(b, n, t0 + k * kSize, t0 + std::min(block_rows, (k + 1) * kSize));
  }
  // Rows of strip k of a block of block_rows rows.
  static int64_t rows(int64_t k, int64_t block_rows) { return std::min(kSize, block_rows - k * kSize); }
  // Keys of the block [s0, s0 + w) strip k computes.
  int64_t width(int64_t k, int64_t s0, int64_t w) const { return std::clamp<int64_t>(visible[k] - s0, 0, w); }
  // Whether a strip sees only part of the block [s0, s0 + w).
  bool cut(int64_t s0, int64_t w) const {
    for (int64_t k = 0; k < count; ++k)
      if (width(k, s0, w) < w) return true;
    return false;
  }
};

// The forward of one (example b, query head n, query block); x holds
// block x kKeyBlock logits, rows ldx apart.
void forward_block(const Geometry& g, const Products& pr, int64_t b, int64_t n, int64_t qb, const Values& v, float* out,
                   float* lse, float* x, int64_t ldx, float* scratch) {
  const int64_t S = g.sh.kv_len, H = g.sh.head_dim, kh = n / g.group;
  const int64_t t0 = qb * g.block, t1 = std::min(g.sh.q_len, t0 + g.block);
  const int64_t t_end = std::max(t0, std::min(t1, g.rows_of(b)));
  for (int64_t t = t0; t < t1; ++t) {  // the sums start at 0; padding queries stay 0
    std::memset(out + g.q_offset(b, t, n), 0, size_t(H) * sizeof(float));
    lse[g.lse_offset(b, n, t)] = 0.0f;
  }
  const int64_t rows = t_end - t0;
  if (rows == 0) return;
  const int64_t sv = g.visible(b, n, t0, t_end);
  const Strips strips(g, b, n, t0, rows);
  float* o0 = out + g.q_offset(b, t0, n);
  // Per row: the running maximum of its logits and sum of their weights.
  float maxes[kBlockRows], sums[kBlockRows];
  std::fill(maxes, maxes + rows, -std::numeric_limits<float>::infinity());
  std::fill(sums, sums + rows, 0.0f);
  for (int64_t s0 = 0; s0 < sv; s0 += kKeyBlock) {
    const int64_t w = std::min(kKeyBlock, sv - s0);
    const bool whole = !strips.cut(s0, w);
    for (int64_t k = 0; k < (whole ? 1 : strips.count); ++k) {
      const int64_t r0 = whole ? 0 : k * Strips::kSize, nr = whole ? rows : strips.rows(k, rows);
      const int64_t ws = whole ? w : strips.width(k, s0, w);
      if (ws == 0) continue;
      float* xs = x + r0 * ldx;
      pr.scores(b, n, t0 + r0, nr, s0, ws, xs, ldx, scratch);
      for (int64_t i = r0; i < r0 + nr; ++i) {
        const int64_t t = t0 + i;
        float* xi = x + i * ldx;
        const float* bias = g.bias_row(b, n, t);
        if (bias) bias += s0 * g.ex.bias_strides[3];
        int64_t valid = std::clamp<int64_t>(g.row_limit(t, strips.visible[i / Strips::kSize]) - s0, 0, ws);
        const uint8_t* mask = g.mask_block(b, n, t, s0, ws, valid);
        const float m = std::max(maxes[i], ad::logits_row(xi, ws, valid, g.sh.scale, g.sh.logit_cap, nullptr, bias,
                                                          g.ex.bias_strides[3], mask, g.ex.mask_strides[3]));
        if (m > maxes[i] && sums[i] > 0.0f) {  // earlier weights shrink by exp(old - new)
          const float factor = std::exp(maxes[i] - m);
          sums[i] *= factor;
          float* oi = o0 + i * g.q_row;
          for (int64_t h = 0; h < H; ++h) oi[h] *= factor;
        }
        maxes[i] = m;
        sums[i] += ad::exp_row(xi, ws, m);
      }
      pr.add_times_rows(false, b, n, nr, s0, ws, 1.0f, xs, ldx, o0 + r0 * g.q_row, g.q_row, scratch);
    }
  }
  for (int64_t i = 0; i < rows; ++i) {
    float* oi = o0 + i * g.q_row;
    const int64_t seen = strips.visible[i / Strips::kSize];  // the row's strip computed keys [0, seen)
    if (!(maxes[i] > kMaskedLogit) && seen < S) {
      // Every logit masked: the maximum over all S is kMaskedLogit, and each
      // key not computed weighs exp(0) = 1.
      maxes[i] = kMaskedLogit;
      sums[i] += float(S - seen);
      for (int64_t s = seen; s < S; ++s) v.add_row(g.kv_offset(b, s, kh), H, oi);
    }
    lse[g.lse_offset(b, n, t0 + i)] = maxes[i] + std::log(sums[i]);
    const float inv = 1.0f / sums[i];
    for (int64_t h = 0; h < H; ++h) oi[h] *= inv;
  }
}

// Adds one row of dS into dbias's layout (stride 0: the bias broadcasts over
// keys, and the row's sum goes to its one entry).
void add_dbias_row(float* dst, int64_t stride, const float* ds, int64_t n) {
  if (stride == 0) {
    float sum = 0.0f;
    for (int64_t s = 0; s < n; ++s) sum += ds[s];
    dst[0] += sum;
  } else {
    for (int64_t s = 0; s < n; ++s) dst[s * stride] += ds[s];
  }
}

struct BackwardArgs {
  const float* lse;
  const float* delta;            // [B, N, T]: rowsum(dO * O) - dlse per row
  const float *shift, *inv_sum;  // [B, N, T]: a fully masked row's maximum and 1 / sum
  float *dk, *dv, *dbias;
  std::array<int64_t, 4> dbias_strides;
  float* const* dq_chunks;  // dq per key chunk (the first is dq itself)
  int64_t chunk;            // keys per chunk
};

// Whether a row's log-sum-exp says every key of it was masked (NaN counts:
// such a row's terms are recomputed from its logits).
bool every_key_masked(float lse) { return !(lse > kMaskedLogit); }

// The maximum and the sum of exp(x - maximum) over all S logits of row t of
// (b, n), for a row whose lse cannot give them. `x` holds S floats.
std::pair<float, float> full_row_stats(const Geometry& g, const float* q, const float* kt, int64_t b, int64_t n,
                                       int64_t t, float* x) {
  const int64_t S = g.sh.kv_len, H = g.sh.head_dim, kh = n / g.group;
  const int64_t sv = g.visible(b, n, t, t + 1);
  ad::gemm(1, sv, H, 1.0f, q + g.q_offset(b, t, n), g.q_row, 1, kt + (b * g.sh.kv_heads + kh) * H * g.ldt, g.ldt, x, S,
           false);
  const float m = ad::logits_row(x, S, g.row_limit(t, sv), g.sh.scale, g.sh.logit_cap, nullptr, g.bias_row(b, n, t),
                                 g.ex.bias_strides[3], g.mask_row(b, n, t), g.ex.mask_strides[3]);
  return {m, ad::exp_row(x, S, m)};
}

// Per query row, before the backward's tasks: delta = rowsum(dO * O) - dlse
// (the log-sum-exp's own cotangent: d lse / d x = p, so it joins the row's
// dot(dout, out) term with the opposite sign) and, for a row with every key
// masked, the maximum and 1 / sum of its weights (inv_sum 0 for the others).
// kt is read only for those rows (null when there are none). out and dout
// are read in f32, or where null as bf16 bits (converted a row at a time).
void row_terms(const KernelContext& ctx, const Geometry& g, const float* q, const float* kt, const float* out,
               const float* lse, const float* dout, const AttentionBf16Operands* bits, const float* dlse, float* delta,
               float* shift, float* inv_sum) {
  const int64_t N = g.sh.q_heads, T = g.sh.q_len, H = g.sh.head_dim;
  const ThreadScratch scratch(ctx, g.sh.kv_len + 2 * H);
  parallel_for(g.sh.batch * N * T, 64, [&](int64_t begin, int64_t end) {
    float* x = scratch.mine();
    float* rows = x + g.sh.kv_len;  // a row of out and of dout converted from bits
    auto row_of = [&](const float* f32, const uint16_t* b16, int64_t at, float* dst) {
      if (f32) return f32 + at;
      convert(DType::bf16, b16 + at, DType::f32, dst, size_t(H));
      return static_cast<const float*>(dst);
    };
    for (int64_t r = begin; r < end; ++r) {
      const int64_t b = r / (N * T), n = r / T % N, t = r % T;
      const int64_t i = g.lse_offset(b, n, t);
      delta[i] = 0.0f;
      shift[i] = lse[i];
      inv_sum[i] = 0.0f;
      if (t >= g.rows_of(b)) continue;
      const int64_t at = g.q_offset(b, t, n);
      const float* o = row_of(out, bits ? bits->out : nullptr, at, rows);
      const float* d = row_of(dout, bits ? bits->dout : nullptr, at, rows + H);
      delta[i] = ad::dot(d, o, H) - (dlse ? dlse[i] : 0.0f);
      if (!every_key_masked(lse[i])) continue;
      const auto [m, l] = full_row_stats(g, q, kt, b, n, t, x);
      shift[i] = m;
      inv_sum[i] = 1.0f / l;
    }
  });
}

// The rows [r0, r0 + nr) of a query block's P and dS against keys [s0, s0 +
// ws) of a key block ending at s1 (P recomputed from lse, dS = P * (dP -
// delta)), each row past ws zeroed up to w; its rows' part of dbias; and, for
// a row with every key masked, the weight of the keys past ws (exp(0) / sum
// each) on dV. `seen`: one past the last key these rows may see (their
// strip's or block's visible keys).
void backward_rows(const Geometry& g, const Products& pr, const BackwardArgs& a, int64_t b, int64_t n, int64_t t0,
                   int64_t r0, int64_t nr, int64_t seen, int64_t s0, int64_t s1, int64_t ws, int64_t w, float* p,
                   float* ds, float* slope, int64_t ldw, float* scratch) {
  const int64_t H = g.sh.head_dim, kh = n / g.group;
  const auto& dbs = a.dbias_strides;
  if (ws > 0) {
    pr.scores(b, n, t0 + r0, nr, s0, ws, p + r0 * ldw, ldw, scratch);
    pr.dprobs(b, n, t0 + r0, nr, s0, ws, ds + r0 * ldw, ldw, scratch);
  }
  for (int64_t i = r0; i < r0 + nr; ++i) {
    const int64_t t = t0 + i, r = g.lse_offset(b, n, t);
    float* pi = p + i * ldw;
    float* dsi = ds + i * ldw;
    std::fill(pi + ws, pi + w, 0.0f);
    std::fill(dsi + ws, dsi + w, 0.0f);
    const float inv_sum = a.inv_sum[r];
    const bool all_masked = inv_sum > 0.0f;
    if (all_masked) {
      // Keys of this block past ws: masked, each of weight exp(0) / sum.
      const float* doi = pr.f32().dout + g.q_offset(b, t, n);
      for (int64_t s = s0 + ws; s < s1; ++s) {
        float* dvs = a.dv + g.kv_offset(b, s, kh);
        for (int64_t h = 0; h < H; ++h) dvs[h] += inv_sum * doi[h];
      }
    }
    if (ws == 0) continue;
    int64_t limit = std::clamp<int64_t>(g.row_limit(t, seen) - s0, 0, ws);
    const float* bias = g.bias_row(b, n, t);
    const uint8_t* mask = g.mask_block(b, n, t, s0, ws, limit);
    if (bias) bias += s0 * g.ex.bias_strides[3];
    ad::logits_row(pi, ws, limit, g.sh.scale, g.sh.logit_cap, slope, bias, g.ex.bias_strides[3], mask,
                   g.ex.mask_strides[3]);
    ad::exp_row(pi, ws, a.shift[r]);
    if (all_masked)
      for (int64_t s = 0; s < ws; ++s) pi[s] *= inv_sum;
    ad::dlogits_row(dsi, pi, ws, limit, a.delta[r], mask, g.ex.mask_strides[3]);
    if (a.dbias) add_dbias_row(a.dbias + b * dbs[0] + n * dbs[1] + t * dbs[2] + s0 * dbs[3], dbs[3], dsi, ws);
    if (g.sh.logit_cap > 0.0f)  // q and k see the logits before the cap: dx = dc * c'
      for (int64_t s = 0; s < limit; ++s) dsi[s] *= slope[s];
  }
}

// The backward of one (example b, kv head kh, key chunk c): every query
// head of the group and every query block against keys [c0, c1), in blocks
// of kKeyBlock keys. A block that a row strip sees only in part has P, dS
// and dQ computed per strip, and dK and dV per range of keys with only the
// strips that see them.
void backward_task(const Geometry& g, const Products& pr, const BackwardArgs& a, int64_t b, int64_t kh, int64_t c,
                   float* p, float* ds, float* slope, int64_t ldw, float* scratch) {
  const int64_t S = g.sh.kv_len;
  const int64_t c0 = c * a.chunk, c1 = std::min(S, c0 + a.chunk);
  const int64_t q_rows = g.rows_of(b);
  float* dq = a.dq_chunks[c];
  for (int64_t s0 = c0; s0 < c1; s0 += kKeyBlock) {
    const int64_t s1 = std::min(c1, s0 + kKeyBlock);
    float* dk0 = a.dk + g.kv_offset(b, s0, kh);
    float* dv0 = a.dv + g.kv_offset(b, s0, kh);
    for (int64_t n = kh * g.group; n < (kh + 1) * g.group; ++n) {
      for (int64_t t0 = 0; t0 < q_rows; t0 += g.block) {
        const int64_t rows = std::min(g.block, q_rows - t0);
        const Strips strips(g, b, n, t0, rows);
        const int64_t sv = g.visible(b, n, t0, t0 + rows);
        const int64_t w = std::max<int64_t>(0, std::min(s1, sv) - s0);
        float* dq0 = dq + g.q_offset(b, t0, n);
        // P, dS and dQ for the whole block at once, or strip by strip.
        const bool whole = !strips.cut(s0, w);
        for (int64_t k = 0; k < (whole ? 1 : strips.count); ++k) {
          const int64_t r0 = whole ? 0 : k * Strips::kSize, nr = whole ? rows : strips.rows(k, rows);
          const int64_t ws = whole ? w : strips.width(k, s0, w), seen = whole ? sv : strips.visible[k];
          backward_rows(g, pr, a, b, n, t0, r0, nr, seen, s0, s1, ws, w, p, ds, slope, ldw, scratch);
          if (ws > 0)
            pr.add_times_rows(true, b, n, nr, s0, ws, g.sh.scale, ds + r0 * ldw, ldw, dq0 + r0 * g.q_row, g.q_row,
                              scratch);
        }
        // Keys [lo, hi) are seen by no strip before `first`: their dK and dV
        // sum over the rows from that strip on (other strips that do not see
        // them add zeros). A whole block is one such range, from row 0.
        for (int64_t lo = 0; lo < w;) {
          int64_t first = 0;
          while (first < strips.count && strips.width(first, s0, w) <= lo) ++first;
          if (first == strips.count) break;
          const int64_t hi = strips.width(first, s0, w), r0 = pr.depth_start(first * Strips::kSize);
          const int64_t off = r0 * ldw + lo;
          pr.add_transposed_times(false, b, n, t0 + r0, rows - r0, hi - lo, 1.0f, p + off, ldw, dv0 + lo * g.kv_row,
                                  scratch);
          pr.add_transposed_times(true, b, n, t0 + r0, rows - r0, hi - lo, g.sh.scale, ds + off, ldw,
                                  dk0 + lo * g.kv_row, scratch);
          lo = hi;
        }
      }
    }
  }
}

}  // namespace

void attention_forward_f32(const KernelContext& ctx, const AttentionShape& shape, const AttentionExtras& extras,
                           const float* q, const float* k, const float* v, float* out, float* lse,
                           const AttentionBf16Operands* bf16) {
  const Geometry g(shape, extras);
  const int64_t B = shape.batch, N = shape.q_heads, S = shape.kv_len, H = shape.head_dim;
  const int64_t q_numel = B * shape.q_len * N * H, kv_numel = B * S * shape.kv_heads * H;
  Products pr(g, {}, bf16);
  // bf16 products read no f32 operand: the rare rows with every key masked
  // read the values' bits.
  F32Operands f32(ctx);
  std::shared_ptr<Buffer> kt_buffer;
  if (!pr.bf16()) {
    q = f32.get(q, bf16 ? bf16->q : nullptr, q_numel, "q");
    k = f32.get(k, bf16 ? bf16->k : nullptr, kv_numel, "k");
    v = f32.get(v, bf16 ? bf16->v : nullptr, kv_numel, "v");
    kt_buffer = ctx.allocate_scratch(size_t(B * shape.kv_heads * H * g.ldt) * sizeof(float));
    float* kt = static_cast<float*>(kt_buffer->data());
    transpose_keys(g, k, kt);
    pr = Products(g, {q, k, kt, v, nullptr, nullptr}, nullptr);
  }
  const int64_t products_scratch = pr.prepare(ctx, false);
  const Values values{v, v ? nullptr : bf16->v};
  // Logits of a block: its rows rounded up to 16 (the bf16 products write
  // whole tiles) by up to kKeyBlock keys.
  const int64_t ldx = row_stride(std::min(S, kKeyBlock)), x_size = round_up(g.block, kAlign) * ldx;
  const ThreadScratch scratch(ctx, x_size + products_scratch);
  // Tasks go to the threads as they become free, within each (example, head)
  // the last query block first: with a causal mask it sees the most keys.
  parallel_for_dynamic(B * N * g.blocks, 1, [&](int64_t begin, int64_t end) {
    float* x = scratch.mine();
    for (int64_t task = begin; task < end; ++task) {
      const int64_t bn = task / g.blocks, qb = g.blocks - 1 - task % g.blocks;
      forward_block(g, pr, bn / N, bn % N, qb, values, out, lse, x, ldx, x + x_size);
    }
  });
}

void attention_backward_f32(const KernelContext& ctx, const AttentionShape& shape, const AttentionExtras& extras,
                            const float* q, const float* k, const float* v, const float* out, const float* lse,
                            const float* dout, const float* dlse, float* dq, float* dk, float* dv, float* dbias,
                            const std::array<int64_t, 4>& dbias_strides, const AttentionBf16Operands* bf16) {
  const Geometry g(shape, extras);
  const int64_t B = shape.batch, K = shape.kv_heads, S = shape.kv_len, H = shape.head_dim;
  const int64_t q_numel = B * shape.q_len * shape.q_heads * H, kv_numel = B * S * K * H;
  fill_zero(dq, q_numel);
  fill_zero(dk, kv_numel);
  fill_zero(dv, kv_numel);

  // Tasks along a dimension the bias broadcasts over would add into the same
  // dbias entries: such a dimension is looped inside the tasks.
  const bool par_b = !(dbias && dbias_strides[0] == 0), par_k = !(dbias && dbias_strides[1] == 0);
  const bool par_c = !(dbias && dbias_strides[3] == 0);
  const int64_t nb = par_b ? B : 1, nk = par_k ? K : 1;
  const int64_t threads = omp_get_max_threads();
  // Where the (example, kv head) tasks are fewer than kTasksPerThread per
  // thread, the keys are split into chunks: with several tasks each, the
  // threads even out their shares as they take them (a thread slowed by
  // other work takes fewer), for a dQ buffer per extra chunk.
  int64_t chunks = 1;
  if (par_c && nb * nk < kTasksPerThread * threads) {
    const int64_t buffers = std::max<int64_t>(4, kChunkBuffersBytes / (q_numel * int64_t(sizeof(float))));
    chunks = std::min({ceil_div(kTasksPerThread * threads, nb * nk), ceil_div(S, kMinChunk), 1 + buffers});
  }
  // Chunks start at multiples of 32 keys: the bf16 products read a block's
  // keys rounded up to 32, which then stay within its own head's padded keys.
  const int64_t chunk = round_up(ceil_div(S, chunks), attention_bf16::kDepthPad);
  chunks = ceil_div(S, chunk);

  // kt and vt for f32 products; with bf16 products kt only where a row has
  // every key masked (row_terms recomputes such a row's logits in f32).
  Products pr(g, {}, bf16);
  const int64_t lse_numel = B * shape.q_heads * shape.q_len;
  const bool masked_rows = pr.bf16() && std::any_of(lse, lse + lse_numel, every_key_masked);
  const int64_t transposes = pr.bf16() ? (masked_rows ? 1 : 0) : 2;
  // f32 operands where they are read whole: dout for f32 products or a fully
  // masked row's weights on dV, q and k for f32 products or a fully masked
  // row's logits, v for f32 products (out and dout are otherwise read a row
  // at a time, from their bits where not in f32).
  F32Operands f32(ctx);
  PAX_CHECK(out || (bf16 && bf16->out), "dot_product_attention: the operand out is given neither in f32 nor in bf16");
  PAX_CHECK(dout || (bf16 && bf16->dout),
            "dot_product_attention: the operand dout is given neither in f32 nor in bf16");
  if (transposes > 0) {
    dout = f32.get(dout, bf16 ? bf16->dout : nullptr, q_numel, "dout");
    q = f32.get(q, bf16 ? bf16->q : nullptr, q_numel, "q");
    k = f32.get(k, bf16 ? bf16->k : nullptr, kv_numel, "k");
  }
  if (transposes > 1) v = f32.get(v, bf16 ? bf16->v : nullptr, kv_numel, "v");
  std::shared_ptr<Buffer> kv_buffer;
  float *kt = nullptr, *vt = nullptr;
  if (transposes > 0) {
    kv_buffer = ctx.allocate_scratch(size_t(transposes * B * K * H * g.ldt) * sizeof(float));
    kt = static_cast<float*>(kv_buffer->data());
    transpose_keys(g, k, kt);
  }
  if (transposes > 1) {
    vt = kt + B * K * H * g.ldt;
    transpose_keys(g, v, vt);
  }
  pr = Products(g, {q, k, kt, v, vt, dout}, bf16);
  const int64_t products_scratch = pr.prepare(ctx, true);
  std::shared_ptr<Buffer> dq_buffer;
  std::vector<float*> dq_chunks{dq};
  if (chunks > 1) {
    dq_buffer = ctx.allocate_scratch(size_t((chunks - 1) * q_numel) * sizeof(float));
    float* partial = static_cast<float*>(dq_buffer->data());
    fill_zero(partial, (chunks - 1) * q_numel);
    for (int64_t c = 1; c < chunks; ++c) dq_chunks.push_back(partial + (c - 1) * q_numel);
  }
  const int64_t rows = B * shape.q_heads * shape.q_len;
  std::shared_ptr<Buffer> rows_buffer = ctx.allocate_scratch(size_t(3 * rows) * sizeof(float));
  float* delta = static_cast<float*>(rows_buffer->data());
  float* shift = delta + rows;
  float* inv_sum = shift + rows;
  row_terms(ctx, g, q, kt, out, lse, dout, bf16, dlse, delta, shift, inv_sum);
  const BackwardArgs args{lse, delta, shift, inv_sum, dk, dv, dbias, dbias_strides, dq_chunks.data(), chunk};

  const int64_t ldw = row_stride(std::min(chunk, kKeyBlock));
  const int64_t p_size = round_up(g.block, kAlign) * ldw;  // as the forward's x
  const ThreadScratch scratch(ctx, 2 * p_size + ldw + products_scratch);
  const int64_t nc = par_c ? chunks : 1;
  // Tasks go to the threads as they become free, the first key chunk of each
  // (example, kv head) first: with a causal mask every query sees its keys.
  parallel_for_dynamic(nb * nk * nc, 1, [&](int64_t begin, int64_t end) {
    float* p = scratch.mine();
    float* ds = p + p_size;
    float* slope = ds + p_size;  // one row: the logit cap's derivative
    float* products = slope + ldw;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t ic = task % nc, ik = task / nc % nk, ib = task / (nc * nk);
      for (int64_t b = par_b ? ib : 0; b < (par_b ? ib + 1 : B); ++b)
        for (int64_t kh = par_k ? ik : 0; kh < (par_k ? ik + 1 : K); ++kh)
          for (int64_t c = par_c ? ic : 0; c < (par_c ? ic + 1 : chunks); ++c)
            backward_task(g, pr, args, b, kh, c, p, ds, slope, ldw, products);
    }
  });

  if (chunks > 1) {
    parallel_for(q_numel, grain_for(sizeof(float) * chunks), [&](int64_t begin, int64_t end) {
      for (int64_t c = 1; c < chunks; ++c) {
        const float* partial = dq_chunks[size_t(c)];
        for (int64_t i = begin; i < end; ++i) dq[i] += partial[i];
      }
    });
  }
}

}  // namespace pax::cpu
