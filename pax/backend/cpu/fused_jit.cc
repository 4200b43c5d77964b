// Code generation for runs of fused-loop instructions (see fused_jit.h): the
// choice of runs, register allocation over a run, and the AVX-512 sequence of
// each instruction (exp and tanh: the operations of Highway's f32 Exp and
// Tanh, in their order).
#include "pax/backend/cpu/fused_jit.h"

#include <xbyak/xbyak.h>
#include <xbyak/xbyak_util.h>

#include <bit>
#include <cstdlib>
#include <cstring>
#include <unordered_map>

#include "pax/backend/cpu/fused_loop.h"

namespace pax::cpu {
namespace {

using Xbyak::Opmask;
using Xbyak::Xmm;
using Xbyak::Zmm;

constexpr int kLanes = 16;            // f32 lanes of a zmm register
constexpr int kMinRun = 2;            // shorter runs stay interpreted
constexpr size_t kCodeBytes = 1 << 16;
constexpr int kTailMask = 7;          // k7: the lanes of the last, partial vector
constexpr int kScratchMask = 6;       // k6: NaN lanes inside max / min / rounding
constexpr int kExpLiveMask = 5;       // k5: inside exp, the lanes not flushed to zero
constexpr int kFirstBoolMask = 1;     // k1..k4 hold bool values
constexpr int kBoolMasks = 4;
constexpr int kUnordered = 3;         // vcmpps predicate: either operand NaN

// How a slot's values sit in vector registers: f32 lanes (f32, and bf16
// widened on load and narrowed on store), i32 lanes, or a bool mask.
enum class Lanes { none, f32, i32, mask };

Lanes lanes_of(const FusedProgram& p, int slot) {
  const FusedSlot& s = p.slots[size_t(slot)];
  if (s.dtype == DType::f32 || s.dtype == DType::bf16) return Lanes::f32;
  if (s.dtype == DType::i32) return Lanes::i32;
  if (s.dtype == DType::bool_) return Lanes::mask;
  return Lanes::none;
}

bool compilable(const FusedProgram& p, const FusedInstr& ins) {
  auto lanes = [&](int k) { return lanes_of(p, ins.args[size_t(k)]); };
  const Lanes out = lanes_of(p, ins.result);
  switch (ins.kind) {
    case FusedInstr::Kind::unary: {
      const UnaryOp op = UnaryOp(ins.op);
      return (op == UnaryOp::neg || op == UnaryOp::abs || op == UnaryOp::sqrt || op == UnaryOp::exp ||
              op == UnaryOp::tanh) &&
             lanes(0) == Lanes::f32 && out == Lanes::f32;
    }
    case FusedInstr::Kind::binary: {
      const BinaryOp op = BinaryOp(ins.op);
      const bool ok = op == BinaryOp::add || op == BinaryOp::sub || op == BinaryOp::mul || op == BinaryOp::div ||
                      op == BinaryOp::max || op == BinaryOp::min;
      return ok && lanes(0) == Lanes::f32 && lanes(1) == Lanes::f32 && out == Lanes::f32;
    }
    case FusedInstr::Kind::integer_pow:
      return lanes(0) == Lanes::f32 && out == Lanes::f32 && ins.exponent > -(int64_t(1) << 20) &&
             ins.exponent < (int64_t(1) << 20);
    case FusedInstr::Kind::convert: return lanes(0) == Lanes::f32 && out == Lanes::f32;
    case FusedInstr::Kind::compare:
      return (lanes(0) == Lanes::f32 || lanes(0) == Lanes::i32) && lanes(1) == lanes(0) && out == Lanes::mask;
    case FusedInstr::Kind::select_n:
      return ins.args.size() == 3 && lanes(0) == Lanes::mask && lanes(1) == Lanes::f32 && lanes(2) == Lanes::f32 &&
             out == Lanes::f32;
    case FusedInstr::Kind::is_finite: return false;
  }
  return false;
}

// The constants of exp and tanh (ExpOp and TanhOp over Highway's f32 Exp,
// Expm1 and Tanh), read as broadcast memory operands.
enum ExpConstant {
  kExpHi, kExpLo, kExpNegZero, kExpHalf, kExpOneOverLn2, kExpLn2Part0, kExpLn2Part1,
  kExpC0, kExpC1, kExpC2, kExpC3, kExpC4, kExpC5, kExpOne, kExpLowerBound, kExpInf, kExpBias,
  kTanhClampHi, kTanhClampLo, kTanhTwo, kTanhLn2Over2, kExpCount
};
alignas(64) const uint32_t kExpTable[kExpCount] = {
    std::bit_cast<uint32_t>(kExpF32ArgMax),
    std::bit_cast<uint32_t>(kExpF32ArgMin),
    0x80000000u,
    std::bit_cast<uint32_t>(0.5f),
    std::bit_cast<uint32_t>(1.442695040888963407359924681f),
    std::bit_cast<uint32_t>(-0.693145751953125f),
    std::bit_cast<uint32_t>(-1.428606765330187045e-6f),
    std::bit_cast<uint32_t>(+0.5f),
    std::bit_cast<uint32_t>(+0.166666671633720397949219f),
    std::bit_cast<uint32_t>(+0.0416664853692054748535156f),
    std::bit_cast<uint32_t>(+0.00833336077630519866943359f),
    std::bit_cast<uint32_t>(+0.00139304355252534151077271f),
    std::bit_cast<uint32_t>(+0.000198527617612853646278381f),
    std::bit_cast<uint32_t>(1.0f),
    std::bit_cast<uint32_t>(-104.0f),                        // Exp is zero below
    0x7f800000u,                                             // +inf
    0x7fu,                                                   // exponent bias (i32)
    std::bit_cast<uint32_t>(kTanhF32ArgLimit),
    std::bit_cast<uint32_t>(-kTanhF32ArgLimit),
    std::bit_cast<uint32_t>(2.0f),
    std::bit_cast<uint32_t>(static_cast<float>(0.346573590279972654708616)),  // Expm1: ln2 / 2
};

bool cpu_supports_jit() {
  static const bool ok = [] {
    const char* env = std::getenv("PAX_FUSED_JIT");
    if (env && std::strcmp(env, "0") == 0) return false;
    Xbyak::util::Cpu cpu;
    using C = Xbyak::util::Cpu;
    return cpu.has(C::tAVX512F) && cpu.has(C::tAVX512BW) && cpu.has(C::tAVX512VL) && cpu.has(C::tBMI2);
  }();
  return ok;
}

// Thrown inside generation when a run needs more registers than there are.
struct OutOfRegisters {};

class RunGenerator : public Xbyak::CodeGenerator {
 public:
  // unroll: vectors per iteration of the main loop (1 or 2); two give the
  // out-of-order core independent work to overlap long dependency chains.
  RunGenerator(const FusedProgram& p, int begin, int end, int unroll)
      : Xbyak::CodeGenerator(kCodeBytes), p_(p), b_(begin), e_(end) {
    analyse();
    prologue();
    // Iterations of `unroll` vectors, then single vectors, then the partial
    // one under the tail mask.
    Xbyak::Label pairs, singles, tail, done;
    xor_(rcx, rcx);
    if (unroll == 2) {
      mov(rdx, rsi);
      and_(rdx, ~int64_t(2 * kLanes - 1));
      L(pairs);
      cmp(rcx, rdx);
      jge(singles, T_NEAR);
      body(false, 2);
      add(rcx, 2 * kLanes);
      jmp(pairs, T_NEAR);
    }
    L(singles);
    mov(rdx, rsi);
    and_(rdx, ~int64_t(kLanes - 1));
    Xbyak::Label single;
    L(single);
    cmp(rcx, rdx);
    jge(tail, T_NEAR);
    body(false, 1);
    add(rcx, kLanes);
    jmp(single, T_NEAR);
    L(tail);
    cmp(rcx, rsi);
    jge(done, T_NEAR);
    mov(rax, rsi);
    sub(rax, rcx);
    mov(r8d, 0xffff);
    bzhi(r8d, r8d, eax);
    kmovw(Opmask(kTailMask), r8d);
    body(true, 1);
    L(done);
    vzeroupper();
    ret();
    setProtectModeRE();
  }

 private:
  // Per slot: its last read inside the run (-1: none) and whether something
  // after the run reads it.
  void analyse() {
    last_read_.assign(p_.slots.size(), -1);
    after_.assign(p_.slots.size(), false);
    for (int i = b_; i < e_; ++i) {
      for (int a : p_.instrs[size_t(i)].args) last_read_[size_t(a)] = i;
    }
    for (size_t i = size_t(e_); i < p_.instrs.size(); ++i) {
      for (int a : p_.instrs[i].args) after_[size_t(a)] = true;
    }
    for (const FusedStore& st : p_.stores) after_[size_t(st.slot)] = true;
    if (p_.reduce) after_[size_t(p_.reduce->slot)] = true;
    for (int i = b_; i < e_; ++i) {
      const FusedInstr& ins = p_.instrs[size_t(i)];
      round_ = round_ || rounds(ins);
      neg_ = neg_ || (ins.kind == FusedInstr::Kind::unary && UnaryOp(ins.op) == UnaryOp::neg);
      abs_ = abs_ || (ins.kind == FusedInstr::Kind::unary && UnaryOp(ins.op) == UnaryOp::abs);
      one_ = one_ || ins.kind == FusedInstr::Kind::integer_pow;
    }
  }

  // Whether the instruction rounds its result to bf16 precision, as the bf16
  // kernels (and the f32 kernels of wide loops) do: arithmetic and converts
  // with a bf16 result (a select or a bf16 -> bf16 convert moves values that
  // already are bf16).
  bool rounds(const FusedInstr& ins) const {
    if (ins.out_dtype != DType::bf16) return false;
    if (ins.kind == FusedInstr::Kind::convert) return ins.dtype != DType::bf16;
    return ins.kind != FusedInstr::Kind::select_n;
  }

  // Constants and splat operands, loaded once before the loop into the top
  // registers; the rest form the pool of the loop body.
  void prologue() {
    mov(r10, reinterpret_cast<size_t>(kExpTable));  // for exp and tanh
    int top = 32;
    auto constant = [&](uint32_t bits) {
      const int z = --top;
      mov(eax, bits);
      vpbroadcastd(Zmm(z), eax);
      return z;
    };
    if (round_) {
      c_lsb_ = constant(1u);
      c_bias_ = constant(0x7fffu);
      c_quiet_ = constant(0x00400000u);
      c_high_ = constant(0xffff0000u);
    }
    if (neg_) c_sign_ = constant(0x80000000u);
    if (abs_) c_abs_ = constant(0x7fffffffu);
    if (one_) c_one_ = constant(0x3f800000u);
    scratch_ = --top;
    for (int i = b_; i < e_; ++i) {
      for (int a : p_.instrs[size_t(i)].args) {
        const FusedSlot& s = p_.slots[size_t(a)];
        if (s.kind != FusedSlot::Kind::splat || lanes_of(p_, a) == Lanes::mask || splat_.count(a)) continue;
        if (top <= 8) throw OutOfRegisters{};
        const int z = --top;
        mov(r9, ptr[rdi + a * 8]);
        if (narrow_bf16(a)) {
          movzx(eax, word[r9]);
          shl(eax, 16);
          vpbroadcastd(Zmm(z), eax);
        } else {
          vpbroadcastd(Zmm(z), dword[r9]);
        }
        splat_[a] = z;
      }
    }
    pool_size_ = top;
  }

  int take_zmm() {
    for (int z = 0; z < pool_size_; ++z) {
      if (!zmm_used_[size_t(z)]) {
        zmm_used_[size_t(z)] = true;
        return z;
      }
    }
    throw OutOfRegisters{};
  }
  int take_mask() {
    for (int k = 0; k < kBoolMasks; ++k) {
      if (!mask_used_[size_t(k)]) {
        mask_used_[size_t(k)] = true;
        return kFirstBoolMask + k;
      }
    }
    throw OutOfRegisters{};
  }

  // Whether the slot's memory holds bf16 (2 bytes an element) while its
  // registers hold the values as f32.
  bool narrow_bf16(int slot) const { return p_.reg_width(p_.slots[size_t(slot)]) == 2; }

  // Vector u of this iteration in the slot's memory.
  Xbyak::Address at(int slot, int u) {
    mov(r9, ptr[rdi + slot * 8]);
    switch (p_.reg_width(p_.slots[size_t(slot)])) {
      case 1: return ptr[r9 + rcx + u * kLanes];
      case 2: return ptr[r9 + rcx * 2 + u * 2 * kLanes];
      default: return ptr[r9 + rcx * 4 + u * 4 * kLanes];
    }
  }

  // The register holding a slot's value in vector u of this iteration
  // (loaded on first use).
  int value(int slot, bool tail, int u) {
    if (auto it = splat_.find(slot); it != splat_.end()) return it->second;
    if (auto it = reg_[u].find(slot); it != reg_[u].end()) return it->second;
    if (lanes_of(p_, slot) == Lanes::mask) {
      const int k = take_mask();
      const Xbyak::Address src = at(slot, u);
      if (tail) vmovdqu8(Xmm(scratch_) | Opmask(kTailMask) | T_z, src);
      else vmovdqu8(Xmm(scratch_), src);
      vptestmb(Opmask(k), Xmm(scratch_), Xmm(scratch_));
      return reg_[u][slot] = k;
    }
    const int z = take_zmm();
    const Xbyak::Address src = at(slot, u);
    if (narrow_bf16(slot)) {  // bf16 bits into the high half of f32 lanes
      if (tail) vmovdqu16(Xbyak::Ymm(z) | Opmask(kTailMask) | T_z, src);
      else vmovdqu16(Xbyak::Ymm(z), src);
      vpmovzxwd(Zmm(z), Xbyak::Ymm(z));
      vpslld(Zmm(z), Zmm(z), 16);
    } else if (tail) {
      vmovups(Zmm(z) | Opmask(kTailMask) | T_z, src);
    } else {
      vmovups(Zmm(z), src);
    }
    return reg_[u][slot] = z;
  }

  void release(int slot, int u) {
    auto it = reg_[u].find(slot);
    if (it == reg_[u].end()) return;
    if (lanes_of(p_, slot) == Lanes::mask) mask_used_[size_t(it->second - kFirstBoolMask)] = false;
    else zmm_used_[size_t(it->second)] = false;
    reg_[u].erase(it);
  }

  void store(int slot, int r, bool tail, int u) {
    const Xbyak::Address dst = at(slot, u);
    if (lanes_of(p_, slot) == Lanes::mask) {
      vpmovm2b(Xmm(scratch_), Opmask(r));
      vpabsb(Xmm(scratch_), Xmm(scratch_));  // 0xff -> 1
      if (tail) vmovdqu8(dst | Opmask(kTailMask), Xmm(scratch_));
      else vmovdqu8(dst, Xmm(scratch_));
      return;
    }
    if (narrow_bf16(slot)) {  // values are bf16-exact: their high halves
      vpsrld(Zmm(scratch_), Zmm(r), 16);
      if (tail) vpmovdw(dst | Opmask(kTailMask), Zmm(scratch_));
      else vpmovdw(dst, Zmm(scratch_));
      return;
    }
    if (tail) vmovups(dst | Opmask(kTailMask), Zmm(r));
    else vmovups(dst, Zmm(r));
  }

  // y = x rounded to bf16 precision, as RoundBf16 does it (y != x).
  void round_bf16(int y, int x) {
    const Opmask nan(kScratchMask);
    vpsrld(Zmm(y), Zmm(x), 16);
    vpandd(Zmm(y), Zmm(y), Zmm(c_lsb_));
    vpaddd(Zmm(y), Zmm(y), Zmm(c_bias_));
    vpaddd(Zmm(y), Zmm(y), Zmm(x));
    vcmpps(nan, Zmm(x), Zmm(x), kUnordered);
    vpord(Zmm(scratch_), Zmm(x), Zmm(c_quiet_));
    vmovdqa32(Zmm(y) | nan, Zmm(scratch_));
    vpandd(Zmm(y), Zmm(y), Zmm(c_high_));
  }

  // max / min that return a NaN operand (a first), as MaxOp / MinOp do.
  void max_min(bool is_max, int y, int a, int b) {
    const Opmask nan(kScratchMask);
    if (is_max) vmaxps(Zmm(y), Zmm(a), Zmm(b));
    else vminps(Zmm(y), Zmm(a), Zmm(b));
    vcmpps(nan, Zmm(b), Zmm(b), kUnordered);
    vmovaps(Zmm(y) | nan, Zmm(b));
    vcmpps(nan, Zmm(a), Zmm(a), kUnordered);
    vmovaps(Zmm(y) | nan, Zmm(a));
  }

  // acc = x^e by squaring, the multiplications of IntegerPowTyped in its order.
  void integer_pow(int y, int x, int64_t e) {
    const uint64_t m = e < 0 ? uint64_t(-e) : uint64_t(e);
    const int base = take_zmm();
    vmovaps(Zmm(y), Zmm(c_one_));
    vmovaps(Zmm(base), Zmm(x));
    for (uint64_t k = m; k; k >>= 1) {
      if (k & 1) vmulps(Zmm(y), Zmm(y), Zmm(base));
      if (k >> 1) vmulps(Zmm(base), Zmm(base), Zmm(base));
    }
    if (e < 0) vdivps(Zmm(y), Zmm(c_one_), Zmm(y));
    zmm_used_[size_t(base)] = false;
  }

  // An entry of kExpTable (r10 holds its address), broadcast to all lanes as
  // a memory operand, or as a plain dword.
  Xbyak::Address table(ExpConstant e) const { return ptr_b[r10 + int(e) * 4]; }
  Xbyak::Address table_entry(ExpConstant e) const { return dword[r10 + int(e) * 4]; }

  // Highway's ExpImpl<float> steps on c: q = trunc(c / ln2 +- 0.5) as i32
  // lanes, and y = ExpPoly(c - q ln2) (ln2 in two parts, the Estrin
  // polynomial, times r^2 plus r). c is left as it was.
  void exp_poly(int y, int q, int c) {
    const int r = take_zmm(), x2 = take_zmm(), x4 = take_zmm(), t = take_zmm(), b = take_zmm();
    vandps(Zmm(t), Zmm(c), table(kExpNegZero));
    vorps(Zmm(t), Zmm(t), table(kExpHalf));
    vmovaps(Zmm(r), Zmm(c));
    vfmadd132ps(Zmm(r), Zmm(t), table(kExpOneOverLn2));  // c / ln2 + (+-0.5)
    vcvttps2dq(Zmm(q), Zmm(r));
    vcvtdq2ps(Zmm(t), Zmm(q));
    vmovaps(Zmm(r), Zmm(t));
    vfmadd132ps(Zmm(r), Zmm(c), table(kExpLn2Part0));  // qf * ln2_0 + c
    vfmadd231ps(Zmm(r), Zmm(t), table(kExpLn2Part1));  // qf * ln2_1 + that
    vmulps(Zmm(x2), Zmm(r), Zmm(r));
    vmulps(Zmm(x4), Zmm(x2), Zmm(x2));
    vbroadcastss(Zmm(t), table_entry(kExpC4));
    vfmadd231ps(Zmm(t), Zmm(r), table(kExpC5));  // c5 r + c4
    vbroadcastss(Zmm(b), table_entry(kExpC2));
    vfmadd231ps(Zmm(b), Zmm(r), table(kExpC3));  // c3 r + c2
    vbroadcastss(Zmm(y), table_entry(kExpC0));
    vfmadd231ps(Zmm(y), Zmm(r), table(kExpC1));  // c1 r + c0
    vfmadd231ps(Zmm(y), Zmm(x2), Zmm(b));    // r^2 (c3 r + c2) + (c1 r + c0)
    vfmadd231ps(Zmm(y), Zmm(x4), Zmm(t));    // r^4 (c5 r + c4) + that
    vfmadd213ps(Zmm(y), Zmm(x2), Zmm(r));    // poly r^2 + r
    for (int z : {r, x2, x4, t, b}) zmm_used_[size_t(z)] = false;
  }

  // y = y 2^q as LoadExpShortRange computes it, 2^(q/2) 2^(q - q/2);
  // q is overwritten.
  void times_pow2(int y, int q) {
    const int t = take_zmm();
    vpsrad(Zmm(t), Zmm(q), 1);
    vpsubd(Zmm(q), Zmm(q), Zmm(t));
    vpaddd(Zmm(t), Zmm(t), table(kExpBias));
    vpslld(Zmm(t), Zmm(t), 23);
    vpaddd(Zmm(q), Zmm(q), table(kExpBias));
    vpslld(Zmm(q), Zmm(q), 23);
    vmulps(Zmm(y), Zmm(y), Zmm(t));
    vmulps(Zmm(y), Zmm(y), Zmm(q));
    zmm_used_[size_t(t)] = false;
  }

  // y = exp(x) exactly as ExpOp computes it: x clamped to [lo, hi], Highway's
  // Exp (the polynomial plus one, times 2^q, zero below -104), inf above hi,
  // NaN kept.
  void exp_f32(int y, int x) {
    const Opmask m(kScratchMask), live(kExpLiveMask);
    const int c = take_zmm(), q = take_zmm();
    vminps(Zmm(c), Zmm(x), table(kExpHi));
    vmaxps(Zmm(c), Zmm(c), table(kExpLo));
    // Lanes below -104 come out zero whatever is computed for them: they
    // compute exp(0) instead, which keeps the multiplications of 2^q out of
    // the subnormal range (slow on some CPUs; masked logits hit it).
    vcmpps(live, Zmm(c), table(kExpLowerBound), 0x1d);  // GE_OQ
    vmovaps(Zmm(c) | live | T_z, Zmm(c));
    exp_poly(y, q, c);
    vaddps(Zmm(y), Zmm(y), table(kExpOne));
    times_pow2(y, q);
    vmovaps(Zmm(y) | live | T_z, Zmm(y));
    vcmpps(m, Zmm(x), table(kExpHi), 0x1e);  // GT_OQ
    vbroadcastss(Zmm(y) | m, table_entry(kExpInf));
    vcmpps(m, Zmm(x), Zmm(x), kUnordered);
    vmovaps(Zmm(y) | m, Zmm(x));
    for (int z : {c, q}) zmm_used_[size_t(z)] = false;
  }

  // y = tanh(x) exactly as TanhOp computes it: x clamped to +-20, Highway's
  // Tanh (s = sign, e = Expm1(2|x|), e / (e + 2), sign put back), NaN kept.
  // 2|x| is at most 40, so Expm1's own bounds never apply, and Tanh's one
  // above |x| = 18.7 is what e / (e + 2) rounds to there anyway.
  void tanh_f32(int y, int x) {
    const Opmask m(kScratchMask);
    const int a = take_zmm(), s = take_zmm(), c = take_zmm(), q = take_zmm(), e = take_zmm();
    vmaxps(Zmm(a), Zmm(x), table(kTanhClampLo));
    vminps(Zmm(a), Zmm(a), table(kTanhClampHi));
    vandps(Zmm(s), Zmm(a), table(kExpNegZero));
    vxorps(Zmm(a), Zmm(a), Zmm(s));                // |x|
    vmulps(Zmm(c), Zmm(a), table(kTanhTwo));
    exp_poly(y, q, c);                             // Expm1: the polynomial alone near 0,
    vaddps(Zmm(e), Zmm(y), table(kExpOne));            // else 2^q (poly + 1) - 1
    times_pow2(e, q);
    vsubps(Zmm(e), Zmm(e), table(kExpOne));
    vcmpps(m, Zmm(c), table(kTanhLn2Over2), 0x11);     // LT_OQ (c >= 0: |c| = c)
    vmovaps(Zmm(e) | m, Zmm(y));
    vaddps(Zmm(c), Zmm(e), table(kTanhTwo));
    vdivps(Zmm(y), Zmm(e), Zmm(c));
    vxorps(Zmm(y), Zmm(y), Zmm(s));
    vcmpps(m, Zmm(x), Zmm(x), kUnordered);
    vmovaps(Zmm(y) | m, Zmm(x));
    for (int z : {a, s, c, q, e}) zmm_used_[size_t(z)] = false;
  }

  static int float_predicate(CompareOp op) {
    switch (op) {
      case CompareOp::eq: return 0x00;  // EQ_OQ
      case CompareOp::ne: return 0x04;  // NEQ_UQ: NaN != anything
      case CompareOp::lt: return 0x11;  // LT_OQ
      case CompareOp::le: return 0x12;  // LE_OQ
      case CompareOp::gt: return 0x1e;  // GT_OQ
      case CompareOp::ge: return 0x1d;  // GE_OQ
    }
    return 0;
  }
  static int int_predicate(CompareOp op) {
    switch (op) {
      case CompareOp::eq: return 0;
      case CompareOp::lt: return 1;
      case CompareOp::le: return 2;
      case CompareOp::ne: return 4;
      case CompareOp::ge: return 5;
      case CompareOp::gt: return 6;
    }
    return 0;
  }

  // Computes instruction `ins` from its operand registers into a new register.
  int emit(const FusedInstr& ins, bool tail, int u) {
    std::vector<int> r;
    for (int a : ins.args) r.push_back(value(a, tail, u));
    if (ins.kind == FusedInstr::Kind::compare) {
      const int k = take_mask();
      if (lanes_of(p_, ins.args[0]) == Lanes::i32) vpcmpd(Opmask(k), Zmm(r[0]), Zmm(r[1]), int_predicate(CompareOp(ins.op)));
      else vcmpps(Opmask(k), Zmm(r[0]), Zmm(r[1]), float_predicate(CompareOp(ins.op)));
      return k;
    }
    const int y = take_zmm();
    // With rounding, the raw result goes to a temporary first.
    const int raw = rounds(ins) ? take_zmm() : y;
    switch (ins.kind) {
      case FusedInstr::Kind::unary:
        switch (UnaryOp(ins.op)) {
          case UnaryOp::neg: vxorps(Zmm(raw), Zmm(r[0]), Zmm(c_sign_)); break;
          case UnaryOp::abs: vandps(Zmm(raw), Zmm(r[0]), Zmm(c_abs_)); break;
          case UnaryOp::exp: exp_f32(raw, r[0]); break;
          case UnaryOp::tanh: tanh_f32(raw, r[0]); break;
          default: vsqrtps(Zmm(raw), Zmm(r[0])); break;
        }
        break;
      case FusedInstr::Kind::binary:
        switch (BinaryOp(ins.op)) {
          case BinaryOp::add: vaddps(Zmm(raw), Zmm(r[0]), Zmm(r[1])); break;
          case BinaryOp::sub: vsubps(Zmm(raw), Zmm(r[0]), Zmm(r[1])); break;
          case BinaryOp::mul: vmulps(Zmm(raw), Zmm(r[0]), Zmm(r[1])); break;
          case BinaryOp::div: vdivps(Zmm(raw), Zmm(r[0]), Zmm(r[1])); break;
          case BinaryOp::max: max_min(true, raw, r[0], r[1]); break;
          default: max_min(false, raw, r[0], r[1]); break;
        }
        break;
      case FusedInstr::Kind::integer_pow: integer_pow(raw, r[0], ins.exponent); break;
      case FusedInstr::Kind::convert: vmovaps(Zmm(raw), Zmm(r[0])); break;  // f32 -> bf16 then rounds
      case FusedInstr::Kind::select_n: vblendmps(Zmm(raw) | Opmask(r[0]), Zmm(r[1]), Zmm(r[2])); break;
      default: break;
    }
    if (raw != y) {
      round_bf16(y, raw);
      zmm_used_[size_t(raw)] = false;
    }
    return y;
  }

  // One iteration: each instruction for vector 0, then for vector 1, ...
  void body(bool tail, int unroll) {
    for (auto& m : reg_) m.clear();
    zmm_used_.assign(size_t(pool_size_), false);
    mask_used_.assign(size_t(kBoolMasks), false);
    for (int i = b_; i < e_; ++i) {
      const FusedInstr& ins = p_.instrs[size_t(i)];
      for (int u = 0; u < unroll; ++u) {
        const int y = emit(ins, tail, u);
        reg_[u][ins.result] = y;
        if (after_[size_t(ins.result)]) store(ins.result, y, tail, u);
      }
      for (int u = 0; u < unroll; ++u) {
        for (int a : ins.args) {
          if (last_read_[size_t(a)] == i) release(a, u);
        }
        if (last_read_[size_t(ins.result)] <= i) release(ins.result, u);
      }
    }
  }

  const FusedProgram& p_;
  const int b_, e_;
  std::vector<int> last_read_;
  std::vector<bool> after_;
  bool round_ = false, neg_ = false, abs_ = false, one_ = false;
  int c_lsb_ = -1, c_bias_ = -1, c_quiet_ = -1, c_high_ = -1, c_sign_ = -1, c_abs_ = -1, c_one_ = -1;
  int scratch_ = -1;
  int pool_size_ = 0;
  std::unordered_map<int, int> splat_;  // splat slot -> register (whole call)
  std::unordered_map<int, int> reg_[2];  // per vector of the iteration: slot -> register or mask
  std::vector<bool> zmm_used_, mask_used_;
};

// The code of [begin, end), two vectors per iteration where the registers
// allow it, else one; null when even one does not fit.
std::shared_ptr<RunGenerator> generate(const FusedProgram& p, int begin, int end) {
  for (int unroll : {2, 1}) {
    try {
      return std::make_shared<RunGenerator>(p, begin, end, unroll);
    } catch (const OutOfRegisters&) {
    }
  }
  return nullptr;
}

}  // namespace

bool jit_compiles_every_instruction(const FusedProgram& p) {
  if (!cpu_supports_jit() || int(p.instrs.size()) < kMinRun) return false;
  for (const FusedInstr& ins : p.instrs) {
    if (!compilable(p, ins)) return false;
  }
  return true;
}

std::vector<FusedJitRun> compile_fused_runs(const FusedProgram& p) {
  std::vector<FusedJitRun> runs;
  if (!cpu_supports_jit()) return runs;
  const int n = int(p.instrs.size());
  for (int i = 0; i < n;) {
    int end = i;
    while (end < n && compilable(p, p.instrs[size_t(end)])) ++end;
    if (end - i < kMinRun) {
      i = std::max(end, i + 1);
      continue;
    }
    // The longest prefix whose registers suffice; the rest is tried next.
    for (int e = end; e - i >= kMinRun; --e) {
      if (std::shared_ptr<RunGenerator> code = generate(p, i, e)) {
        runs.push_back({i, e, code->getCode<void (*)(void* const*, int64_t)>(), code});
        end = e;
        break;
      }
    }
    i = end;
  }
  return runs;
}

}  // namespace pax::cpu
