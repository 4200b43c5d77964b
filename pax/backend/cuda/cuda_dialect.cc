// The CUDA C table of the loop renderer and the device functions it calls
// (see cuda_dialect.h).
#include "pax/backend/cuda/cuda_dialect.h"

#include <cstddef>
#include <vector>

namespace pax::cuda {
namespace {

// The tables below are written for these operations: a new one must be
// rendered here or listed as left out (cuda_codegen_test.cc checks that every
// operation is one or the other).
static_assert(kNumUnaryOps == 21, "a unary operation was added: render it in cuda_dialect() or leave it out");
static_assert(kNumBinaryOps == 14, "a binary operation was added: render it in cuda_dialect() or leave it out");
static_assert(kNumCompareOps == 6, "a compare operation was added: render it in cuda_dialect()");

constexpr std::string_view kPrelude = R"(// paxcc CUDA prelude (pax/backend/cuda/cuda_dialect.cc)
// Memory: f32 as float, bf16 as its 16 bits, int32 as int, bool as one byte.
__device__ __forceinline__ bool pax_isnan(float x) { return x != x; }
__device__ __forceinline__ float pax_ld_f32(const float* p, long long i) { return p[i]; }
__device__ __forceinline__ float pax_ld_bf16(const unsigned short* p, long long i) {
  return __uint_as_float((unsigned)p[i] << 16);
}
__device__ __forceinline__ int pax_ld_i32(const int* p, long long i) { return p[i]; }
__device__ __forceinline__ bool pax_ld_bool(const unsigned char* p, long long i) { return p[i] != 0; }
// A value in its memory format: bf16 values are bf16-exact (each instruction
// that makes one rounds it), so their high halves are the bf16 bits.
__device__ __forceinline__ float pax_mem_f32(float v) { return v; }
__device__ __forceinline__ unsigned short pax_mem_bf16(float v) { return (unsigned short)(__float_as_uint(v) >> 16); }
__device__ __forceinline__ int pax_mem_i32(int v) { return v; }
__device__ __forceinline__ unsigned char pax_mem_bool(bool v) { return v ? 1 : 0; }
// v rounded to bf16 precision as the CPU rounds it: to nearest even, NaN
// made quiet, kept in the high half of the f32 bits.
__device__ __forceinline__ float pax_round_bf16(float v) {
  const unsigned b = __float_as_uint(v);
  if (pax_isnan(v)) return __uint_as_float((b | 0x00400000u) & 0xffff0000u);
  return __uint_as_float((b + ((b >> 16) & 1u) + 0x7fffu) & 0xffff0000u);
}
__device__ __forceinline__ bool pax_isfinite(float x) { return fabsf(x) < __uint_as_float(0x7f800000u); }
__device__ __forceinline__ float pax_sign(float x) {
  const float s = x > 0.0f ? 1.0f : x;
  return x < 0.0f ? -1.0f : s;
}
// max / min propagate NaN; otherwise the second operand wins a tie, as the
// CPU's vector max / min do (so max(-0, +0) is +0 and max(+0, -0) is -0).
__device__ __forceinline__ float pax_max(float a, float b) {
  return pax_isnan(a) ? a : pax_isnan(b) ? b : (a > b ? a : b);
}
__device__ __forceinline__ float pax_min(float a, float b) {
  return pax_isnan(a) ? a : pax_isnan(b) ? b : (a < b ? a : b);
}
__device__ __forceinline__ float pax_round_away(float x) {
  const float t = truncf(x);
  return fabsf(x - t) >= 0.5f ? t + copysignf(1.0f, x) : t;
}
// exp of a non-positive argument never overflows, so results down to the
// smallest subnormal survive.
__device__ __forceinline__ float pax_logistic(float x) {
  const float e = expf(-fabsf(x));
  return (x < 0.0f ? e : 1.0f) / (1.0f + e);
}
// The CPU's erf: x P(x^2) / Q(x^2) on [-4, 4].
__device__ __forceinline__ float pax_erf(float x) {
  float c = x > -4.0f ? x : -4.0f;
  c = c < 4.0f ? c : 4.0f;
  const float x2 = c * c;
  float p = -2.72614225801306e-10f;
  p = fmaf(p, x2, 2.77068142495902e-08f);
  p = fmaf(p, x2, -2.10102402082508e-06f);
  p = fmaf(p, x2, -5.69250639462346e-05f);
  p = fmaf(p, x2, -7.34990630326855e-04f);
  p = fmaf(p, x2, -2.95459980854025e-03f);
  p = fmaf(p, x2, -1.60960333262415e-02f);
  float q = -1.45660718464996e-05f;
  q = fmaf(q, x2, -2.13374055278905e-04f);
  q = fmaf(q, x2, -1.68282697438203e-03f);
  q = fmaf(q, x2, -7.37332916720468e-03f);
  q = fmaf(q, x2, -1.42647390514189e-02f);
  return pax_isnan(x) ? x : (c * p) / q;
}
// The CPU's erf_inv (M. Giles, 2010): two polynomials in w = -log(1 - x^2).
__device__ __forceinline__ float pax_erf_inv(float x) {
  const float ax = fabsf(x);
  const float w = -logf((1.0f - ax) * (1.0f + ax));
  const float w1 = w - 2.5f;
  float p1 = 2.81022636e-08f;
  p1 = fmaf(p1, w1, 3.43273939e-07f);
  p1 = fmaf(p1, w1, -3.5233877e-06f);
  p1 = fmaf(p1, w1, -4.39150654e-06f);
  p1 = fmaf(p1, w1, 0.00021858087f);
  p1 = fmaf(p1, w1, -0.00125372503f);
  p1 = fmaf(p1, w1, -0.00417768164f);
  p1 = fmaf(p1, w1, 0.246640727f);
  p1 = fmaf(p1, w1, 1.50140941f);
  const float w2 = sqrtf(w) - 3.0f;
  float p2 = -0.000200214257f;
  p2 = fmaf(p2, w2, 0.000100950558f);
  p2 = fmaf(p2, w2, 0.00134934322f);
  p2 = fmaf(p2, w2, -0.00367342844f);
  p2 = fmaf(p2, w2, 0.00573950773f);
  p2 = fmaf(p2, w2, -0.0076224613f);
  p2 = fmaf(p2, w2, 0.00943887047f);
  p2 = fmaf(p2, w2, 1.00167406f);
  p2 = fmaf(p2, w2, 2.83297682f);
  float y = (w < 5.0f ? p1 : p2) * x;
  if (ax == 1.0f) y = copysignf(__uint_as_float(0x7f800000u), x);
  if (ax > 1.0f) y = __uint_as_float(0x7fffffffu);
  return pax_isnan(x) ? x : y;
}
// x^e by squaring, the products in the CPU's order; a negative exponent
// inverts the product.
__device__ __forceinline__ float pax_ipow_f32(float base, long long e) {
  const bool invert = e < 0;
  unsigned long long m = invert ? (unsigned long long)(-(e + 1)) + 1ull : (unsigned long long)e;
  float acc = 1.0f;
  for (; m; m >>= 1) {
    if (m & 1ull) acc = acc * base;
    base = base * base;
  }
  return invert ? 1.0f / acc : acc;
}
// int32 as the kernels compute it: wrapping, x / 0 = -1, x % 0 = x,
// INT32_MIN / -1 = INT32_MIN, INT32_MIN % -1 = 0, shifts by a count outside
// [0, 32) give 0 (the sign fill for arithmetic right shifts).
__device__ __forceinline__ int pax_add_i32(int a, int b) { return (int)((unsigned)a + (unsigned)b); }
__device__ __forceinline__ int pax_sub_i32(int a, int b) { return (int)((unsigned)a - (unsigned)b); }
__device__ __forceinline__ int pax_mul_i32(int a, int b) { return (int)((unsigned)a * (unsigned)b); }
__device__ __forceinline__ int pax_neg_i32(int a) { return (int)(0u - (unsigned)a); }
__device__ __forceinline__ int pax_abs_i32(int a) { return a < 0 ? pax_neg_i32(a) : a; }
__device__ __forceinline__ int pax_sign_i32(int a) { return (a > 0) - (a < 0); }
__device__ __forceinline__ int pax_div_i32(int a, int b) {
  if (b == 0) return -1;
  if (b == -1) return pax_neg_i32(a);
  return a / b;
}
__device__ __forceinline__ int pax_rem_i32(int a, int b) {
  if (b == 0) return a;
  if (b == -1) return 0;
  return a % b;
}
__device__ __forceinline__ int pax_shl_i32(int a, int b) { return (unsigned)b < 32u ? (int)((unsigned)a << b) : 0; }
__device__ __forceinline__ int pax_shrl_i32(int a, int b) { return (unsigned)b < 32u ? (int)((unsigned)a >> b) : 0; }
__device__ __forceinline__ int pax_shra_i32(int a, int b) { return a >> ((unsigned)b < 32u ? b : 31); }
// x^e with e taken as int32: wrapping products by squaring; a negative
// exponent gives 1 for x = 1, +-1 for x = -1 and 0 otherwise.
__device__ __forceinline__ int pax_pow_i32(int base, int e) {
  if (e < 0) return base == 1 ? 1 : base == -1 ? ((e & 1) ? -1 : 1) : 0;
  unsigned r = 1u, b = (unsigned)base;
  for (unsigned k = (unsigned)e; k; k >>= 1) {
    if (k & 1u) r *= b;
    b *= b;
  }
  return (int)r;
}
__device__ __forceinline__ int pax_ipow_i32(int x, long long e) {
  return pax_pow_i32(x, (int)(unsigned)(unsigned long long)e);
}
// float -> int32: toward zero, saturated at the int32 range, NaN -> 0.
__device__ __forceinline__ int pax_f32_to_i32(float v) {
  if (pax_isnan(v)) return 0;
  if (v >= 2147483648.0f) return 2147483647;
  if (v <= -2147483648.0f) return -2147483647 - 1;
  return (int)v;
}
// Moves of N elements between memory and a local array (16-byte aligned):
// 16-byte transfers where the bytes allow, else one of all of them.
template <int kBytes> struct pax_chunk;
template <> struct pax_chunk<16> { typedef uint4 type; };
template <> struct pax_chunk<8> { typedef uint2 type; };
template <> struct pax_chunk<4> { typedef unsigned int type; };
template <class T, int N>
__device__ __forceinline__ void pax_vload(T (&dst)[N], const T* src) {
  constexpr int kBytes = N * (int)sizeof(T);
  constexpr int kChunk = kBytes >= 16 ? 16 : kBytes;
  typedef typename pax_chunk<kChunk>::type C;
#pragma unroll
  for (int k = 0; k < kBytes / kChunk; ++k) reinterpret_cast<C*>(dst)[k] = reinterpret_cast<const C*>(src)[k];
}
template <class T, int N>
__device__ __forceinline__ void pax_vstore(T* dst, const T (&src)[N]) {
  constexpr int kBytes = N * (int)sizeof(T);
  constexpr int kChunk = kBytes >= 16 ? 16 : kBytes;
  typedef typename pax_chunk<kChunk>::type C;
#pragma unroll
  for (int k = 0; k < kBytes / kChunk; ++k) reinterpret_cast<C*>(dst)[k] = reinterpret_cast<const C*>(src)[k];
}
// Reductions: the combining operations, and a reduction across a group of
// T threads (a warp, or a whole block of T threads) in a fixed order: a
// butterfly within each warp, then the warps' results in warp order through
// shared memory. Thread 0 of the group holds the result.
struct pax_sum_f32 { __device__ float operator()(float a, float b) const { return a + b; } };
struct pax_max_f32 { __device__ float operator()(float a, float b) const { return pax_max(a, b); } };
struct pax_min_f32 { __device__ float operator()(float a, float b) const { return pax_min(a, b); } };
struct pax_sum_i32 { __device__ int operator()(int a, int b) const { return pax_add_i32(a, b); } };
struct pax_max_i32 { __device__ int operator()(int a, int b) const { return a > b ? a : b; } };
struct pax_min_i32 { __device__ int operator()(int a, int b) const { return a < b ? a : b; } };
template <class V, class Op>
__device__ __forceinline__ V pax_warp_reduce(V v, Op op) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <int T, class V, class Op>
__device__ __forceinline__ V pax_group_reduce(V v, Op op, V identity) {
  v = pax_warp_reduce(v, op);
  if constexpr (T > 32) {
    __shared__ V partial[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();  // an earlier reduction's reads of `partial` are done
    if (lane == 0) partial[warp] = v;
    __syncthreads();
    if (warp == 0) v = pax_warp_reduce(lane < T / 32 ? partial[lane] : identity, op);
  }
  return v;
}
)";

struct Tables {
  LoopDialect dialect{};
  std::vector<LeftOut> left_out;
};

const Tables& tables() {
  static const Tables t = [] {
    Tables t;
    LoopDialect& d = t.dialect;
    auto unary = [&](UnaryOp op, std::string_view tmpl) { d.unary[size_t(op)] = tmpl; };
    auto binary = [&](BinaryOp op, std::string_view tmpl) { d.binary[size_t(op)] = tmpl; };
    auto left = [&](std::string_view table, int op, std::string_view why) { t.left_out.push_back({table, op, why}); };

    unary(UnaryOp::neg, "(-{0})");
    unary(UnaryOp::abs, "fabsf({0})");
    unary(UnaryOp::sign, "pax_sign({0})");
    unary(UnaryOp::exp, "expf({0})");
    unary(UnaryOp::expm1, "expm1f({0})");
    unary(UnaryOp::log, "logf({0})");
    unary(UnaryOp::log1p, "log1pf({0})");
    unary(UnaryOp::sqrt, "sqrtf({0})");
    // 1 / sqrt as the CPU computes it (CUDA's rsqrtf is within 2 ulp).
    unary(UnaryOp::rsqrt, "(1.0f / sqrtf({0}))");
    unary(UnaryOp::cbrt, "cbrtf({0})");
    unary(UnaryOp::tanh, "tanhf({0})");
    unary(UnaryOp::logistic, "pax_logistic({0})");
    unary(UnaryOp::erf, "pax_erf({0})");
    unary(UnaryOp::erf_inv, "pax_erf_inv({0})");
    unary(UnaryOp::sin, "sinf({0})");
    unary(UnaryOp::cos, "cosf({0})");
    unary(UnaryOp::floor, "floorf({0})");
    unary(UnaryOp::ceil, "ceilf({0})");
    unary(UnaryOp::round_away, "pax_round_away({0})");
    unary(UnaryOp::round_even, "rintf({0})");  // the default rounding mode: to nearest even
    left("unary", int(UnaryOp::not_), "not is defined on integers and booleans only");

    binary(BinaryOp::add, "({0} + {1})");
    binary(BinaryOp::sub, "({0} - {1})");
    binary(BinaryOp::mul, "({0} * {1})");
    binary(BinaryOp::div, "({0} / {1})");
    binary(BinaryOp::max, "pax_max({0}, {1})");
    binary(BinaryOp::min, "pax_min({0}, {1})");
    binary(BinaryOp::rem, "fmodf({0}, {1})");  // exact, as the CPU's std::fmod
    binary(BinaryOp::pow, "powf({0}, {1})");
    for (BinaryOp op : {BinaryOp::and_, BinaryOp::or_, BinaryOp::xor_, BinaryOp::shift_left,
                        BinaryOp::shift_right_logical, BinaryOp::shift_right_arithmetic}) {
      left("binary", int(op), "bitwise operations and shifts are defined on integers and booleans only");
    }

    // The integer kernels define neg, abs, sign and not; the others are
    // floating-point functions.
    d.unary_int[size_t(UnaryOp::neg)] = "pax_neg_i32({0})";
    d.unary_int[size_t(UnaryOp::abs)] = "pax_abs_i32({0})";
    d.unary_int[size_t(UnaryOp::sign)] = "pax_sign_i32({0})";
    d.unary_int[size_t(UnaryOp::not_)] = "(~{0})";
    for (int op = 0; op < kNumUnaryOps; ++op) {
      if (d.unary_int[size_t(op)].empty()) left("unary_int", op, "a floating-point function: no int32 kernel");
    }
    d.binary_int[size_t(BinaryOp::add)] = "pax_add_i32({0}, {1})";
    d.binary_int[size_t(BinaryOp::sub)] = "pax_sub_i32({0}, {1})";
    d.binary_int[size_t(BinaryOp::mul)] = "pax_mul_i32({0}, {1})";
    d.binary_int[size_t(BinaryOp::div)] = "pax_div_i32({0}, {1})";
    d.binary_int[size_t(BinaryOp::max)] = "max({0}, {1})";
    d.binary_int[size_t(BinaryOp::min)] = "min({0}, {1})";
    d.binary_int[size_t(BinaryOp::rem)] = "pax_rem_i32({0}, {1})";
    d.binary_int[size_t(BinaryOp::pow)] = "pax_pow_i32({0}, {1})";
    d.binary_int[size_t(BinaryOp::and_)] = "({0} & {1})";
    d.binary_int[size_t(BinaryOp::or_)] = "({0} | {1})";
    d.binary_int[size_t(BinaryOp::xor_)] = "({0} ^ {1})";
    d.binary_int[size_t(BinaryOp::shift_left)] = "pax_shl_i32({0}, {1})";
    d.binary_int[size_t(BinaryOp::shift_right_logical)] = "pax_shrl_i32({0}, {1})";
    d.binary_int[size_t(BinaryOp::shift_right_arithmetic)] = "pax_shra_i32({0}, {1})";

    // As C++ compares: unordered operands are unequal and nothing else.
    d.compare_float = {"({0} == {1})", "({0} != {1})", "({0} < {1})", "({0} <= {1})", "({0} > {1})", "({0} >= {1})"};
    d.compare_int = d.compare_float;
    d.round_bf16 = "pax_round_bf16({0})";
    d.is_finite = "pax_isfinite({0})";
    d.integer_pow = "pax_ipow_f32({0}, {1}LL)";
    d.integer_pow_int = "pax_ipow_i32({0}, {1}LL)";
    d.select = "({0} ? {2} : {1})";
    d.select_int = "({0} ? {2} : {1})";
    d.mask_to_float = "({0} ? 1.0f : 0.0f)";
    d.float_to_mask = "({0} != 0.0f)";
    d.int_to_float = "((float){0})";  // round to nearest, as the CPU's conversion
    d.float_to_int = "pax_f32_to_i32({0})";
    d.int_to_mask = "({0} != 0)";
    d.mask_to_int = "({0} ? 1 : 0)";
    d.let_float = "const float {0} = {1};";
    d.let_int = "const int {0} = {1};";
    d.let_mask = "const bool {0} = {1};";
    auto mem = [&](SlotFormat f, std::string_view load, std::string_view splat) {
      d.load[size_t(f)] = load;
      d.splat[size_t(f)] = splat;
      // Values stay in their variables: the kernel's stores and reduction
      // read those.
      d.store[size_t(f)] = "(void){0};";
    };
    mem(SlotFormat::f32, "pax_ld_f32(p{0}, i{0})", "pax_ld_f32(p{0}, 0)");
    mem(SlotFormat::bf16, "pax_ld_bf16(p{0}, i{0})", "pax_ld_bf16(p{0}, 0)");
    mem(SlotFormat::i32, "pax_ld_i32(p{0}, i{0})", "pax_ld_i32(p{0}, 0)");
    mem(SlotFormat::boolean, "pax_ld_bool(p{0}, i{0})", "pax_ld_bool(p{0}, 0)");
    return t;
  }();
  return t;
}

}  // namespace

const LoopDialect& cuda_dialect() { return tables().dialect; }

std::string_view cuda_dialect_prelude() { return kPrelude; }

std::span<const LeftOut> cuda_dialect_left_out() { return tables().left_out; }

}  // namespace pax::cuda
