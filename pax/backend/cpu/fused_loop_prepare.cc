// Preparing a fused loop for the CPU (see fused_loop.h): register
// allocation, how each store is written and whether it streams, accumulator
// chains, the runs to compile and the views compiled code reads per segment.
#include <algorithm>
#include <atomic>
#include <climits>
#include <numeric>

#include <unistd.h>

#include "pax/backend/cpu/fused_codegen.h"
#include "pax/backend/cpu/fused_loop.h"
#include "pax/core/error.h"

namespace pax::cpu {
namespace {

constexpr int64_t kMaxColInner = int64_t(1) << 15;  // bounds the partial rows of column tasks
constexpr size_t kMaxViewRank = kMaxFusedViewRank;
constexpr size_t kMaxCases = kMaxFusedSelectCases;
// Shortest segment over which compiled code reads a view in place (below, a
// call per segment costs more than gathering the view per block).
constexpr int64_t kMinSegment = 64;

size_t round64(size_t n) { return (n + 63) & ~size_t(63); }

// Outputs from this size on are written with non-temporal stores, which
// bypass the cache: those that would not stay in the last-level cache until
// their readers come (half of it, and never below 4 MiB). Where the cache
// holds them, streaming them out only makes their readers (the next loop, a
// matmul) fetch them from memory: on a 2-core Zen 5 slice, the GPT step's
// bias + GELU loop took 1.23 ms with its 8 MiB outputs streamed and 0.86 ms
// without.
std::atomic<size_t> g_stream_bytes{0};  // 0: from the cache size

size_t stream_bytes() {
  if (const size_t set = g_stream_bytes.load(std::memory_order_relaxed)) return set;
  static const size_t from_cache = [] {
    long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (llc <= 0) llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
    return std::max(size_t(4) << 20, llc > 0 ? size_t(llc) / 2 : 0);
  }();
  return from_cache;
}

// A view's trailing extent over which it is constant (strides 0) or
// contiguous (strides of a row-major run), as (segment kind, elements).
std::pair<FusedSlot::Segment, int64_t> view_run(const FusedSlot& s) {
  int64_t constant = 1, contiguous = 1;
  bool still_constant = true, still_contiguous = true;
  for (size_t d = s.dims.size(); d-- > 0;) {
    if (s.dims[d] == 1) continue;
    still_constant = still_constant && s.strides[d] == 0;
    still_contiguous = still_contiguous && s.strides[d] == contiguous;
    if (still_constant) constant *= s.dims[d];
    if (still_contiguous) contiguous *= s.dims[d];
    if (!still_constant && !still_contiguous) break;
  }
  if (constant > 1) return {FusedSlot::Segment::splat, constant};
  return {FusedSlot::Segment::contiguous, contiguous};
}

// A view compiled code could read per segment: not stored (a store copies
// its gathered register), with a run of kMinSegment elements or more.
struct SegmentCandidate {
  int64_t run;
  int slot;
  FusedSlot::Segment kind;
};

std::vector<SegmentCandidate> segment_candidates(const LoopProgram& p) {
  std::vector<SegmentCandidate> out;
  for (size_t i = 0; i < p.slots.size(); ++i) {
    if (p.slots[i].kind != FusedSlot::Kind::view) continue;
    const bool stored =
        std::any_of(p.stores.begin(), p.stores.end(), [&](const FusedStore& st) { return st.slot == int(i); });
    const auto [kind, run] = view_run(p.slots[i]);
    if (!stored && run >= kMinSegment) out.push_back({run, int(i), kind});
  }
  return out;
}

}  // namespace

size_t set_stream_bytes_for_testing(size_t bytes) { return g_stream_bytes.exchange(bytes); }

bool fusable_reduction(ReduceOp op, DType dtype, int64_t outer, int64_t n, int64_t inner) {
  if (op != ReduceOp::sum && op != ReduceOp::max && op != ReduceOp::min) return false;
  if (op == ReduceOp::sum && dtype == DType::bool_) return false;
  if (n < 2 || outer < 1 || inner < 1) return false;
  return inner == 1 || (outer == 1 && inner <= kMaxColInner);
}

void FusedLoop::finalize() {
  PAX_CHECK(size > 0 && !instrs.empty(), "fused loop: no domain or no instruction");
  std::vector<int> last_use(slots.size(), -1);
  const int kEnd = INT_MAX;
  for (size_t i = 0; i < instrs.size(); ++i) {
    const FusedInstr& ins = instrs[i];
    PAX_CHECK(
        ins.result >= 0 && size_t(ins.result) < slots.size() && slots[size_t(ins.result)].kind == FusedSlot::Kind::reg,
        "fused loop: instruction ", i, " writes a slot that is not a register");
    PAX_CHECK(!ins.args.empty() && ins.args.size() <= kMaxCases + 1, "fused loop: instruction ", i, " has ",
              ins.args.size(), " operands");
    for (int a : ins.args) {
      PAX_CHECK(a >= 0 && size_t(a) < slots.size(), "fused loop: instruction ", i, " reads slot ", a);
      last_use[size_t(a)] = int(i);
    }
  }
  for (const FusedStore& st : stores) last_use[size_t(st.slot)] = kEnd;
  if (reduce) last_use[size_t(reduce->slot)] = kEnd;
  // Wide bf16 registers pay off from two bf16 operations on: each then
  // saves the conversions of its operands and result. A loop compiled whole
  // does without: its code widens and narrows in vector registers, so its
  // inputs are read where they are and its stores need no narrowing pass.
  int bf16_ops = 0;
  for (const FusedInstr& ins : instrs) {
    const bool arith = ins.kind == FusedInstr::Kind::unary || ins.kind == FusedInstr::Kind::binary ||
                       ins.kind == FusedInstr::Kind::integer_pow;
    bf16_ops += arith && ins.dtype == DType::bf16;
  }
  const bool compiles_whole = codegen_compiles_every_instruction(*this);
  wide_bf16 = bf16_ops >= 2 && !compiles_whole;
  size_t max_width = 1;
  per_block.clear();
  for (size_t i = 0; i < slots.size(); ++i) {
    FusedSlot& s = slots[i];
    s.width = uint8_t(itemsize(s.dtype));
    if (s.kind == FusedSlot::Kind::input || s.kind == FusedSlot::Kind::view) per_block.push_back(int(i));
    PAX_CHECK(s.kind != FusedSlot::Kind::view ||
                  (!s.dims.empty() && s.dims.size() <= kMaxViewRank && s.dims.size() == s.strides.size()),
              "fused loop: a view needs 1 to ", kMaxViewRank, " dimensions");
    if (s.kind == FusedSlot::Kind::view) coalesce_view(s.dims, s.strides);
    if (s.kind != FusedSlot::Kind::input || wide(s)) max_width = std::max(max_width, reg_width(s));
    s.reg = -1;
  }
  // Splats, views and widened inputs hold a register for the whole task /
  // block; instruction results take one at their instruction and give it back
  // after their last use (never to their own instruction's result: kernels of
  // mixed widths may not run in place).
  num_regs = 0;
  std::vector<int> free_regs;
  for (FusedSlot& s : slots) {
    if (s.kind == FusedSlot::Kind::splat || s.kind == FusedSlot::Kind::view || wide(s)) {
      if (s.kind != FusedSlot::Kind::reg) s.reg = num_regs++;
    }
  }
  for (size_t i = 0; i < instrs.size(); ++i) {
    FusedSlot& res = slots[size_t(instrs[i].result)];
    if (free_regs.empty()) {
      res.reg = num_regs++;
    } else {
      res.reg = free_regs.back();
      free_regs.pop_back();
    }
    for (int a : instrs[i].args) {
      FusedSlot& s = slots[size_t(a)];
      if (s.kind == FusedSlot::Kind::reg && last_use[size_t(a)] == int(i) &&
          std::find(free_regs.begin(), free_regs.end(), s.reg) == free_regs.end()) {
        free_regs.push_back(s.reg);
      }
    }
  }
  block = kFusedBlock;
  reg_bytes = round64(size_t(block) * max_width);
  for (FusedStore& st : stores) {
    st.stream = !st.keep_in_cache && size_t(size) * itemsize(slots[size_t(st.slot)].dtype) >= stream_bytes();
  }
  chain_first = -1;
  // Chains do not compute bf16, and gather views per block: compiled code
  // that reads them in place per segment goes faster.
  const bool views_in_place = compiles_whole && !segment_candidates(*this).empty();
  if (!wide_bf16 && !views_in_place) find_chain();
  compiled_runs.clear();
  // Plain loops own every block they compute, so the last instruction may
  // write its stored result in place of the copy (streamed only by chains),
  // unless the loop narrows it. Other stores of results (not streamed, not
  // narrowed, each slot once) may be written apart where the call allows it.
  int last_writers = 0, direct = -1;
  for (size_t k = 0; k < stores.size() && !reduce; ++k) {
    if (stores[k].slot != instrs.back().result || wide(slots[size_t(stores[k].slot)])) continue;
    if (!stores[k].stream || chain_first >= 0) direct = int(k);
    ++last_writers;
  }
  if (last_writers != 1) direct = -1;
  std::vector<bool> seen(slots.size(), false);
  for (size_t k = 0; k < stores.size(); ++k) {
    FusedStore& st = stores[k];
    const FusedSlot& s = slots[size_t(st.slot)];
    const bool apart = chain_first < 0 && s.kind == FusedSlot::Kind::reg && !st.stream && !wide(s) &&
                       !seen[size_t(st.slot)] && !(reduce && reduce->slot == st.slot);
    st.write = int(k) == direct ? FusedStore::Write::direct
               : apart          ? FusedStore::Write::apart
                                : FusedStore::Write::copy;
    seen[size_t(st.slot)] = true;
  }
  if (reduce) {
    const FusedSlot& s = slots[size_t(reduce->slot)];
    PAX_CHECK(s.kind == FusedSlot::Kind::reg, "fused loop: the reduced value must be an instruction result");
    PAX_CHECK(fusable_reduction(reduce->op, s.dtype, reduce->outer, reduce->n, reduce->inner) &&
                  reduce->outer * reduce->n * reduce->inner == size,
              "fused loop: unsupported reduction");
  }
  if (chain_first < 0) compiled_runs = codegen_runs(*this);
  choose_segments();
}

void FusedLoop::choose_segments() {
  segment = 0;
  segment_views.clear();
  segment_moved.clear();
  for (FusedSlot& s : slots) s.segment = FusedSlot::Segment::none;
  // Only code that computes every instruction reads views per segment: the
  // interpreter reads the gathered registers.
  if (wide_bf16 || !compiled_whole()) return;
  std::vector<SegmentCandidate> views = segment_candidates(*this);
  std::stable_sort(views.begin(), views.end(),
                   [](const SegmentCandidate& a, const SegmentCandidate& b) { return a.run > b.run; });
  for (const SegmentCandidate& v : views) {
    const int64_t common = std::gcd(segment, v.run);
    // Too short a segment: left to the per-block gather.
    if (common < kMinSegment || segment_views.size() == kMaxFusedSegmentViews) continue;
    segment = common;
    slots[size_t(v.slot)].segment = v.kind;
    segment_views.push_back(v.slot);
  }
  for (size_t i = 0; i < slots.size() && segment > 0; ++i) {
    const FusedSlot& s = slots[i];
    if (s.segment == FusedSlot::Segment::none && s.kind != FusedSlot::Kind::splat) segment_moved.push_back(int(i));
  }
}

FusedLoop::FusedLoop(const FusedLoop& other) : LoopProgram(other) { *this = other; }

FusedLoop& FusedLoop::operator=(const FusedLoop& other) {
  if (this == &other) return *this;
  static_cast<LoopProgram&>(*this) = other;
  per_block = other.per_block;
  chain_first = other.chain_first;
  chain_steps = other.chain_steps;
  chain_leaves = other.chain_leaves;
  num_regs = other.num_regs;
  block = other.block;
  reg_bytes = other.reg_bytes;
  wide_bf16 = other.wide_bf16;
  compiled_runs = other.compiled_runs;
  segment_views = other.segment_views;
  segment_moved = other.segment_moved;
  const FusedCode* published = other.code.load(std::memory_order_acquire);  // before its owner: see fused_loop.h
  // Once the pointer is published its owner is never written again; before,
  // the owner may be being written, and is not read.
  code_owner = published ? other.code_owner : nullptr;
  code.store(published, std::memory_order_release);
  return *this;
}

void FusedLoop::find_chain() {
  chain_first = -1;
  chain_steps.clear();
  chain_leaves.clear();
  // Reads of each slot by instructions, stores and the reduction.
  std::vector<int> reads(slots.size(), 0);
  for (const FusedInstr& ins : instrs) {
    for (int a : ins.args) ++reads[size_t(a)];
  }
  for (const FusedStore& st : stores) ++reads[size_t(st.slot)];
  if (reduce) ++reads[size_t(reduce->slot)];
  auto is_leaf = [&](int s) { return slots[size_t(s)].kind != FusedSlot::Kind::reg; };
  const DType dt = instrs[0].dtype;
  std::vector<ChainStep> steps;
  std::vector<int> leaves;
  int first = -1;
  int acc = -1;  // the previous result
  for (const FusedInstr& ins : instrs) {
    const bool binary = ins.kind == FusedInstr::Kind::binary;
    if ((!binary && ins.kind != FusedInstr::Kind::unary) || ins.dtype != dt || ins.out_dtype != dt ||
        !chain_supports(binary, ins.op, dt)) {
      return;
    }
    ChainStep step;
    step.binary = binary;
    step.op = ins.op;
    int leaf = -1;
    if (acc < 0) {
      if (!is_leaf(ins.args[0]) || (binary && !is_leaf(ins.args[1]))) return;
      first = acc = ins.args[0];
      if (binary) leaf = ins.args[1];
    } else {
      if (reads[size_t(acc)] != 1) return;  // an intermediate read twice, or stored
      if (!binary) {
        if (ins.args[0] != acc) return;
      } else if (ins.args[0] == acc && ins.args[1] != acc && is_leaf(ins.args[1])) {
        leaf = ins.args[1];
      } else if (ins.args[1] == acc && ins.args[0] != acc && is_leaf(ins.args[0])) {
        leaf = ins.args[0];
        step.leaf_first = true;
      } else {
        return;
      }
    }
    if (binary) step.scalar = slots[size_t(leaf)].kind == FusedSlot::Kind::splat;
    steps.push_back(step);
    leaves.push_back(leaf);
    acc = ins.result;
  }
  chain_first = first;
  chain_steps = std::move(steps);
  chain_leaves = std::move(leaves);
}

}  // namespace pax::cpu
