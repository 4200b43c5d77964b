// The fused loop executor (see fused_loop.h): the per-block interpreter, the
// per-segment calls of compiled code, and the task structure of plain loops,
// of loops ending in a row or column reduction and of row sweeps. Preparing a
// program (registers, stores, chains, segments) is fused_loop_prepare.cc.
#include "pax/backend/cpu/fused_loop.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>

#include "pax/backend/cpu/dispatch.h"
#include "pax/backend/cpu/fused_codegen.h"
#include "pax/backend/cpu/fused_kernels.h"
#include "pax/core/parallel.h"
#include "pax/core/buffer.h"
#include "pax/core/error.h"

namespace pax::cpu {
namespace {

constexpr int64_t kWindow = 512;                 // see kFusedBlock
constexpr int64_t kMinChunk = 16 * kFusedBlock;  // fewest elements per task of a plain loop
constexpr int64_t kChunks = 128;                 // tasks a large plain loop is cut into
constexpr int64_t kRowBlock = kReduceRowBlock;
constexpr int64_t kRowTile = int64_t(1) << 14;  // elements of whole short rows per task
constexpr int64_t kColTaskElems = int64_t(1) << 16;
constexpr int64_t kMaxColTasks = 64;
constexpr size_t kMaxViewRank = kMaxFusedViewRank;
constexpr size_t kMaxCases = kMaxFusedSelectCases;

static_assert(kFusedBlock % kWindow == 0 && kMinChunk % kFusedBlock == 0);

int64_t floor_window(int64_t i) { return i / kWindow * kWindow; }

// Per-thread scratch memory, kept between calls. Page-aligned: registers then
// sit at the same offset within a page as the blocks of large arrays, so that
// a register store never looks like an earlier store to the next block's
// input (4 KiB aliasing), which would hold the streaming loads back.
constexpr size_t kPage = 4096;

char* thread_scratch(size_t bytes) {
  thread_local std::unique_ptr<char[]> mem;
  thread_local size_t capacity = 0;
  if (bytes + kPage > capacity) {
    capacity = std::max(bytes + kPage, capacity * 2);
    mem.reset(new char[capacity]);
  }
  return reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(mem.get()) + kPage - 1) & ~uintptr_t(kPage - 1));
}

size_t round64(size_t n) { return (n + 63) & ~size_t(63); }

BinaryOp accumulate_op(ReduceOp op, DType acc) {
  if (acc == DType::bool_) return op == ReduceOp::max ? BinaryOp::or_ : BinaryOp::and_;
  return op == ReduceOp::sum ? BinaryOp::add : op == ReduceOp::max ? BinaryOp::max : BinaryOp::min;
}

// Copies elements [start, start + m) of a strided view into dst.
void gather_view(const FusedSlot& s, const char* base, int64_t start, int64_t m, char* dst) {
  visit_width(itemsize(s.dtype), [&](auto t) {
    using T = decltype(t);
    const T* src = reinterpret_cast<const T*>(base);
    T* y = reinterpret_cast<T*>(dst);
    const size_t rank = s.dims.size();
    const size_t last = rank - 1;
    int64_t idx[kMaxViewRank];
    int64_t off = 0;
    int64_t rem = start;
    for (size_t d = rank; d-- > 0;) {
      idx[d] = rem % s.dims[d];
      rem /= s.dims[d];
      off += idx[d] * s.strides[d];
    }
    const int64_t len = s.dims[last], stride = s.strides[last];
    for (int64_t done = 0; done < m;) {
      const int64_t run = std::min(len - idx[last], m - done);
      if (stride == 0) {
        fill_block(sizeof(T), src + off, y + done, size_t(run));
      } else if (stride == 1) {
        std::memcpy(y + done, src + off, size_t(run) * sizeof(T));
      } else {
        for (int64_t k = 0; k < run; ++k) y[done + k] = src[off + k * stride];
      }
      done += run;
      idx[last] += run;
      off += run * stride;
      if (idx[last] < len) continue;
      off -= len * stride;
      idx[last] = 0;
      for (size_t d = last; d-- > 0;) {
        off += s.strides[d];
        if (++idx[d] < s.dims[d]) break;
        off -= s.dims[d] * s.strides[d];
        idx[d] = 0;
      }
    }
  });
}

void fill_splat(const FusedSlot& s, bool wide, const void* src, char* dst, int64_t n) {
  if (wide) {
    uint16_t bits;
    std::memcpy(&bits, src, sizeof(bits));
    std::fill(reinterpret_cast<float*>(dst), reinterpret_cast<float*>(dst) + n, bf16_to_float(bits));
    return;
  }
  visit_width(itemsize(s.dtype), [&](auto t) {
    using T = decltype(t);
    T v;
    std::memcpy(&v, src, sizeof(T));
    if constexpr (sizeof(T) == sizeof(int32_t)) {
      if (s.clamp_hi >= 0) {
        int32_t k;
        std::memcpy(&k, &v, sizeof(k));
        k = int32_t(std::clamp<int64_t>(k, 0, s.clamp_hi));
        std::memcpy(&v, &k, sizeof(k));
      }
    }
    std::fill(reinterpret_cast<T*>(dst), reinterpret_cast<T*>(dst) + n, v);
  });
}

// With wide bf16 registers, bf16 operands are f32 values and a bf16 result
// is the f32 result rounded to bf16 (what the kernel does inside for bf16),
// rounded by the f32 kernel as it writes it where the kernel can.
void exec(const FusedInstr& ins, void* const* ptr, size_t m, bool wide_bf16) {
  void* y = ptr[ins.result];
  const void* a = ptr[ins.args[0]];
  auto reg = [&](DType t) { return wide_bf16 && t == DType::bf16 ? DType::f32 : t; };
  const DType dt = reg(ins.dtype);
  const bool round = wide_bf16 && ins.out_dtype == DType::bf16;
  float* yf = static_cast<float*>(y);
  switch (ins.kind) {
    case FusedInstr::Kind::unary:
      if (round) return unary_round_bf16(UnaryOp(ins.op), static_cast<const float*>(a), yf, m);
      return unary(UnaryOp(ins.op), dt, a, y, m);
    case FusedInstr::Kind::binary:
      if (round) {
        return binary_round_bf16(BinaryOp(ins.op), static_cast<const float*>(a),
                                 static_cast<const float*>(ptr[ins.args[1]]), yf, m);
      }
      return binary(BinaryOp(ins.op), dt, a, ptr[ins.args[1]], y, m);
    case FusedInstr::Kind::compare:
      return compare(CompareOp(ins.op), dt, a, ptr[ins.args[1]], static_cast<bool*>(y), m);
    case FusedInstr::Kind::is_finite: return is_finite(dt, a, static_cast<bool*>(y), m);
    case FusedInstr::Kind::integer_pow:
      integer_pow(dt, ins.exponent, a, y, m);
      if (round) round_to_bf16(yf, yf, m);
      return;
    case FusedInstr::Kind::convert:
      if (!round) return convert(dt, a, reg(ins.out_dtype), y, m);
      if (ins.dtype == DType::bf16) return convert(dt, a, DType::f32, y, m);  // bf16 to bf16 copies the bits
      if (dt == DType::f32) return round_to_bf16(static_cast<const float*>(a), yf, m);
      convert(dt, a, DType::f32, y, m);
      return round_to_bf16(yf, yf, m);
    case FusedInstr::Kind::select_n: {
      const void* cases[kMaxCases];
      const size_t num = ins.args.size() - 1;
      for (size_t c = 0; c < num; ++c) cases[c] = ptr[ins.args[c + 1]];
      return select_n(dt, a, cases, num, itemsize(reg(ins.out_dtype)), y, m);
    }
  }
}

// The state of one task: its registers and the current pointer of every slot.
class Task {
 public:
  Task(const FusedLoop& p, std::span<const void* const> in, std::span<void* const> out, bool apart, size_t tile_bytes,
       size_t extra_bytes)
      : p_(p), in_(in), out_(out), apart_(apart), code_(p.code.load(std::memory_order_acquire)), steps_(p.chain_steps) {
    const size_t reg_total = size_t(p.num_regs) * p.reg_bytes;
    // Wide bf16 loops stage gathered views before widening them.
    const size_t stage_bytes = p.wide_bf16 ? round64(size_t(p.block) * sizeof(uint16_t)) : 0;
    char* regs = thread_scratch(reg_total + round64(tile_bytes) + round64(extra_bytes) + stage_bytes +
                                2 * p.slots.size() * sizeof(void*));
    tile_ = regs + reg_total;
    extra_ = tile_ + round64(tile_bytes);
    stage_ = extra_ + round64(extra_bytes);
    ptr_ = reinterpret_cast<void**>(stage_ + stage_bytes);
    segment_ptr_ = ptr_ + p.slots.size();
    segmented_ = code_ && p.segment > 0;
    regs_ = regs;
    // Compiled code reads a splat's one element where it is.
    const bool splat_in_place = code_ && p.compiled_whole() && !p.wide_bf16;
    for (size_t s = 0; s < p.slots.size(); ++s) {
      const FusedSlot& slot = p.slots[s];
      ptr_[s] = slot.reg >= 0 ? regs + size_t(slot.reg) * p.reg_bytes : nullptr;
      if (slot.kind == FusedSlot::Kind::splat && splat_in_place) {
        ptr_[s] = const_cast<void*>(in[size_t(slot.arg)]);
      } else if (slot.kind == FusedSlot::Kind::splat) {
        fill_splat(slot, p.wide(slot), in[size_t(slot.arg)], regs + size_t(slot.reg) * p.reg_bytes, p.block);
      }
    }
  }

  char* tile() const { return tile_; }
  char* extra() const { return extra_; }
  void* slot(int s) const { return ptr_[s]; }

  // Computes elements [start, start + m) and stores those in [own_lo, own_hi).
  // With a tile, the reduced slot is written at tile + (start - tile_start).
  void run_block(int64_t start, int64_t m, int64_t own_lo, int64_t own_hi, int64_t tile_start = -1) {
    for (int s : p_.per_block) {
      const FusedSlot& slot = p_.slots[size_t(s)];
      if (segmented_ && slot.segment != FusedSlot::Segment::none) continue;  // read per segment
      const char* base = static_cast<const char*>(in_[size_t(slot.arg)]);
      if (p_.wide(slot)) {
        const char* src = base + size_t(start) * slot.width;
        if (slot.kind == FusedSlot::Kind::view) {
          gather_view(slot, base, start, m, stage_);
          src = stage_;
        }
        convert(DType::bf16, src, DType::f32, ptr_[s], size_t(m));
      } else if (slot.kind == FusedSlot::Kind::input) {
        ptr_[s] = const_cast<char*>(base) + size_t(start) * slot.width;
      } else {
        gather_view(slot, base, start, m, static_cast<char*>(ptr_[s]));
      }
    }
    const bool wide_tile = tile_start >= 0 && p_.wide(p_.slots[size_t(p_.reduce->slot)]);
    if (tile_start >= 0 && !wide_tile) {
      const FusedSlot& slot = p_.slots[size_t(p_.reduce->slot)];
      ptr_[p_.reduce->slot] = tile_ + size_t(start - tile_start) * slot.width;
    }
    const int64_t lo = std::max(start, own_lo), hi = std::min(start + m, own_hi);
    // Stores written by their instructions: their slots point at the outputs
    // (apart ones only in blocks owned whole; else at their registers).
    const bool in_place = apart_ && lo == start && hi == start + m;
    bool direct_stream = false;  // the direct store streams (chains only)
    for (const FusedStore& st : p_.stores) {
      if (st.write == FusedStore::Write::copy) continue;
      const FusedSlot& slot = p_.slots[size_t(st.slot)];
      const bool to_output = st.write == FusedStore::Write::direct || in_place;
      ptr_[st.slot] = to_output ? static_cast<char*>(out_[size_t(st.output)]) + size_t(start) * slot.width
                                : regs_ + size_t(slot.reg) * p_.reg_bytes;
      direct_stream = direct_stream || (st.write == FusedStore::Write::direct && st.stream);
    }
    if (segmented_) {
      run_segments(start, m);
    } else if (p_.chain_first >= 0) {
      for (size_t k = 0; k < steps_.size(); ++k) {
        if (p_.chain_leaves[k] >= 0) steps_[k].leaf = ptr_[p_.chain_leaves[k]];
      }
      const FusedSlot& first = p_.slots[size_t(p_.chain_first)];
      chain(first.dtype, ptr_[p_.chain_first], first.kind == FusedSlot::Kind::splat, steps_,
            ptr_[p_.instrs.back().result], size_t(m), direct_stream);
      streamed_ = streamed_ || direct_stream;
    } else {
      const int n = int(p_.instrs.size());
      size_t next = 0;  // the next compiled run
      for (int i = 0; i < n;) {
        if (code_ && next < p_.compiled_runs.size() && p_.compiled_runs[next].first == i) {
          code_->runs[next](ptr_, m);
          i = p_.compiled_runs[next++].second;
        } else {
          exec(p_.instrs[size_t(i)], ptr_, size_t(m), p_.wide_bf16);
          ++i;
        }
      }
    }
    if (wide_tile) {
      const float* x = static_cast<const float*>(ptr_[p_.reduce->slot]);
      narrow_to_bf16(x, reinterpret_cast<uint16_t*>(tile_) + (start - tile_start), size_t(m));
    }
    if (lo >= hi) return;
    for (size_t k = 0; k < p_.stores.size(); ++k) {
      const FusedStore& st = p_.stores[k];
      if (st.write == FusedStore::Write::direct || (st.write == FusedStore::Write::apart && in_place)) continue;
      const FusedSlot& slot = p_.slots[size_t(st.slot)];
      const size_t w = slot.width;
      char* dst = static_cast<char*>(out_[size_t(st.output)]) + size_t(lo) * w;
      const char* src = static_cast<const char*>(ptr_[st.slot]) + size_t(lo - start) * p_.reg_width(slot);
      const bool stream = st.stream && reinterpret_cast<uintptr_t>(dst) % 64 == 0;
      if (p_.wide(slot)) {
        narrow_to_bf16(reinterpret_cast<const float*>(src), reinterpret_cast<uint16_t*>(dst), size_t(hi - lo), stream);
        streamed_ = streamed_ || stream;
      } else if (stream) {
        stream_copy(dst, src, size_t(hi - lo) * w);
        streamed_ = true;
      } else {
        std::memcpy(dst, src, size_t(hi - lo) * w);
      }
    }
  }

  ~Task() {
    if (streamed_) stream_fence();
  }

  // The compiled program (one run of every instruction) over [start, start +
  // m) in pieces that never cross a multiple of the program's segment, each
  // view marked with a Segment read where it lies in its input. A segment
  // view's last dimension is its run (finalize coalesces views): a cursor
  // keeps the offset of the current run and the position in it, so that
  // moving to the next segment takes no division.
  void run_segments(int64_t start, int64_t m) {
    struct Cursor {
      int64_t run_at;             // input element of the run's first element
      int64_t into;               // position in the run
      int64_t idx[kMaxViewRank];  // the run's index over the other dimensions
    };
    const std::vector<int>& views = p_.segment_views;
    std::array<Cursor, kMaxFusedSegmentViews> cursors;
    for (size_t v = 0; v < views.size(); ++v) {
      const FusedSlot& slot = p_.slots[size_t(views[v])];
      const size_t outer = slot.dims.size() - 1;
      Cursor& c = cursors[v];
      int64_t q = start / slot.dims.back();
      c.into = start % slot.dims.back();
      c.run_at = 0;
      for (size_t d = outer; d-- > 0;) {
        c.idx[d] = q % slot.dims[d];
        q /= slot.dims[d];
        c.run_at += c.idx[d] * slot.strides[d];
      }
    }
    for (size_t s = 0; s < p_.slots.size(); ++s) segment_ptr_[s] = ptr_[s];
    const int64_t end = start + m;
    for (int64_t a = start, b = std::min(end, (start / p_.segment + 1) * p_.segment); a < end;
         a = b, b = std::min(end, b + p_.segment)) {
      for (size_t v = 0; v < views.size(); ++v) {
        const FusedSlot& slot = p_.slots[size_t(views[v])];
        const Cursor& c = cursors[v];
        segment_ptr_[views[v]] = const_cast<char*>(static_cast<const char*>(in_[size_t(slot.arg)])) +
                                 (c.run_at + c.into * slot.strides.back()) * int64_t(slot.width);
      }
      code_->runs[0](segment_ptr_, b - a);
      for (int s : p_.segment_moved) {
        segment_ptr_[s] = static_cast<char*>(segment_ptr_[s]) + (b - a) * int64_t(p_.slots[size_t(s)].width);
      }
      for (size_t v = 0; v < views.size(); ++v) {
        const FusedSlot& slot = p_.slots[size_t(views[v])];
        Cursor& c = cursors[v];
        c.into += b - a;
        if (c.into < slot.dims.back()) continue;
        c.into = 0;
        for (size_t d = slot.dims.size() - 1; d-- > 0;) {
          c.run_at += slot.strides[d];
          if (++c.idx[d] < slot.dims[d]) break;
          c.run_at -= slot.dims[d] * slot.strides[d];
          c.idx[d] = 0;
        }
      }
    }
  }

  // Runs the blocks of [lo, hi) (lo a window boundary), storing [own_lo, own_hi).
  template <class AfterBlock>
  void run_range(int64_t lo, int64_t hi, int64_t own_lo, int64_t own_hi, int64_t tile_start, AfterBlock&& after) {
    for (int64_t b = lo; b < hi; b += p_.block) {
      const int64_t m = std::min(p_.block, hi - b);
      run_block(b, m, own_lo, own_hi, tile_start);
      after(b, m);
    }
  }

 private:
  const FusedLoop& p_;
  std::span<const void* const> in_;
  std::span<void* const> out_;
  bool apart_;             // no input shares memory with an output
  const FusedCode* code_;  // the compiled runs, once published (read once per task)
  char* regs_;
  void** ptr_;
  void** segment_ptr_;  // the slots' pointers for one segment (run_segments)
  bool segmented_;      // compiled code reads views per segment
  char* tile_;
  char* extra_;
  char* stage_;  // wide bf16 loops: one block of bf16
  bool streamed_ = false;
  std::vector<ChainStep> steps_;  // the program's chain, with this block's leaves
};

void run_plain(const FusedLoop& p, std::span<const void* const> in, std::span<void* const> out, bool apart) {
  // Tasks of whole blocks: they see the kernels' windows, and each ends
  // with one fence for its streamed stores (so tasks are not too short).
  const int64_t chunk = std::max(kMinChunk, ceil_div(ceil_div(p.size, kChunks), p.block) * p.block);
  parallel_for(p.size, chunk, [&](int64_t b, int64_t e) {
    Task task(p, in, out, apart, 0, 0);
    task.run_range(b, e, b, e, -1, [](int64_t, int64_t) {});
  });
}

// Rows of n elements are cut into segments of min(n, kRowBlock) (units), as
// cpu::reduce cuts them; tasks hold one segment, or several whole rows.
void run_row_reduce(const KernelContext& ctx, const FusedLoop& p, std::span<const void* const> in,
                    std::span<void* const> out, bool apart) {
  const FusedReduce& r = *p.reduce;
  const DType dt = p.slots[size_t(r.slot)].dtype;
  const DType acc = accumulator_dtype(dt);
  const size_t w = itemsize(dt), aw = itemsize(acc);
  const int64_t rb = std::min(r.n, kRowBlock);
  const int64_t nb = ceil_div(r.n, rb);
  const int64_t units = r.outer * nb;
  const int64_t per_task = nb == 1 ? std::max<int64_t>(1, kRowTile / r.n) : 1;
  const int64_t tasks = ceil_div(units, per_task);
  const bool direct = nb == 1 && acc == r.out_dtype;
  std::shared_ptr<Buffer> partials = direct ? nullptr : ctx.allocate_scratch(size_t(units) * aw);
  char* part = direct ? static_cast<char*>(out[size_t(r.output)]) : static_cast<char*>(partials->data());
  auto unit_lo = [&](int64_t u) { return (u / nb) * r.n + (u % nb) * rb; };
  auto unit_hi = [&](int64_t u) { return (u / nb) * r.n + std::min(r.n, (u % nb + 1) * rb); };
  const size_t tile_bytes = size_t(std::max(per_task * r.n, rb) + 2 * kWindow) * w;
  parallel_for(tasks, 1, [&](int64_t t0, int64_t t1) {
    Task task(p, in, out, apart, tile_bytes, 0);
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t u0 = t * per_task, u1 = std::min(units, u0 + per_task);
      const int64_t a = unit_lo(u0), z = unit_hi(u1 - 1);
      // Blocks start on a window boundary, so each kernel sees whole windows.
      const int64_t lo = floor_window(a), hi = std::min(p.size, ceil_div(z, kWindow) * kWindow);
      task.run_range(lo, hi, a, z, lo, [](int64_t, int64_t) {});
      const char* x = task.tile() + size_t(a - lo) * w;
      if (nb == 1) reduce_rows(r.op, dt, x, size_t(u1 - u0), size_t(r.n), part + size_t(u0) * aw);
      else reduce_rows(r.op, dt, x, 1, size_t(z - a), part + size_t(u0) * aw);
    }
  });
  if (!direct) reduce(ctx, r.op, acc, part, r.out_dtype, out[size_t(r.output)], r.outer, nb, 1);
}

// Each task accumulates a run of rows into a partial row (accumulator dtype);
// the partial rows are then reduced in order.
void run_col_reduce(const KernelContext& ctx, const FusedLoop& p, std::span<const void* const> in,
                    std::span<void* const> out, bool apart) {
  const FusedReduce& r = *p.reduce;
  const DType dt = p.slots[size_t(r.slot)].dtype;
  const DType acc = accumulator_dtype(dt);
  const size_t aw = itemsize(acc);
  const BinaryOp op = accumulate_op(r.op, acc);
  const int64_t want = std::clamp<int64_t>(ceil_div(p.size, kColTaskElems), 1, kMaxColTasks);
  const int64_t rows = ceil_div(r.n, want);
  const int64_t tasks = ceil_div(r.n, rows);
  const bool direct = tasks == 1 && acc == r.out_dtype;
  std::shared_ptr<Buffer> partials = direct ? nullptr : ctx.allocate_scratch(size_t(tasks * r.inner) * aw);
  char* part = direct ? static_cast<char*>(out[size_t(r.output)]) : static_cast<char*>(partials->data());
  alignas(8) unsigned char identity[8];
  reduce_identity(r.op, acc, identity);
  const size_t convert_bytes = acc == dt ? 0 : size_t(p.block) * aw;
  parallel_for(tasks, 1, [&](int64_t t0, int64_t t1) {
    Task task(p, in, out, apart, 0, convert_bytes);
    for (int64_t t = t0; t < t1; ++t) {
      char* row = part + size_t(t * r.inner) * aw;
      visit_width(aw, [&](auto v) {
        using T = decltype(v);
        std::memcpy(&v, identity, sizeof(T));
        std::fill(reinterpret_cast<T*>(row), reinterpret_cast<T*>(row) + r.inner, v);
      });
      const int64_t a = t * rows * r.inner, z = std::min(r.n, (t + 1) * rows) * r.inner;
      const int64_t lo = floor_window(a), hi = std::min(p.size, ceil_div(z, kWindow) * kWindow);
      task.run_range(lo, hi, a, z, -1, [&](int64_t b, int64_t m) {
        const int64_t s0 = std::max(b, a), s1 = std::min(b + m, z);
        if (s0 >= s1) return;
        // A wide bf16 slot holds the values already converted to f32.
        const bool wide = p.wide(p.slots[size_t(r.slot)]);
        const char* v = static_cast<const char*>(task.slot(r.slot)) + size_t(s0 - b) * (wide ? aw : itemsize(dt));
        if (acc != dt && !wide) {
          convert(dt, v, acc, task.extra(), size_t(s1 - s0));
          v = task.extra();
        }
        for (int64_t pos = s0; pos < s1;) {
          const int64_t c = pos % r.inner;
          const int64_t len = std::min(r.inner - c, s1 - pos);
          char* dst = row + size_t(c) * aw;
          binary(op, acc, dst, v + size_t(pos - s0) * aw, dst, size_t(len));
          pos += len;
        }
      });
    }
  });
  if (!direct) reduce(ctx, r.op, acc, part, r.out_dtype, out[size_t(r.output)], 1, tasks, r.inner);
}

// Whether no output a store writes shares a byte with an input the loop
// reads (then stores may be written by their instructions in place). Null
// arrays (a row sweep's local values, in buffers of their own) share none.
bool outputs_apart(const FusedLoop& p, std::span<const void* const> in, std::span<void* const> out) {
  bool any = false;
  for (const FusedStore& st : p.stores) any = any || st.write == FusedStore::Write::apart;
  if (!any) return false;
  for (const FusedSlot& s : p.slots) {
    if (s.kind == FusedSlot::Kind::reg) continue;
    // The bytes the slot's input spans.
    int64_t lo = 0, hi = s.kind == FusedSlot::Kind::input ? p.size - 1 : 0;
    if (s.kind == FusedSlot::Kind::view) {
      for (size_t d = 0; d < s.dims.size(); ++d) {
        const int64_t reach = (s.dims[d] - 1) * s.strides[d];
        (reach < 0 ? lo : hi) += reach;
      }
    }
    const char* base = static_cast<const char*>(in[size_t(s.arg)]);
    if (!base) continue;
    const char* first = base + lo * int64_t(s.width);
    const char* last = base + (hi + 1) * int64_t(s.width);
    for (const FusedStore& st : p.stores) {
      const char* o = static_cast<const char*>(out[size_t(st.output)]);
      if (!o) continue;
      const char* o_end = o + size_t(p.size) * p.slots[size_t(st.slot)].width;
      if (first < o_end && o < last) return false;
    }
  }
  return true;
}

// Rows per tile of a row sweep: kRowTile elements of each value, so that the
// values the loops pass each other stay in cache between the loops.
int64_t sweep_tile_rows(int64_t rows, int64_t row_len) {
  const int64_t per_tile = std::max<int64_t>(1, kRowTile / row_len);
  // Enough tiles for every thread.
  return std::max<int64_t>(1, std::min(per_tile, ceil_div(rows, 2 * int64_t(omp_get_max_threads()))));
}

}  // namespace

void run_row_sweep(const KernelContext& /*ctx*/, std::span<const SweepLoop> loops, int64_t rows, int64_t row_len,
                   std::span<const size_t> local_widths) {
  std::vector<bool> apart(loops.size());
  size_t tile_bytes = 0;
  const int64_t tile_rows = sweep_tile_rows(rows, row_len);
  const int64_t tile_elems = tile_rows * row_len;
  for (size_t k = 0; k < loops.size(); ++k) {
    const SweepLoop& loop = loops[k];
    if (!loop.program) {
      PAX_CHECK(loop.inputs.size() == 1 && loop.outputs.size() == 1 && loop.input_local.size() == 1 &&
                    loop.output_local.size() == 1 && loop.output_local[0] < 0 &&
                    accumulator_dtype(loop.reduce_dtype) == loop.reduce_dtype,
                "row sweep: reduction ", k, " takes one array of rows");
      continue;
    }
    const FusedLoop& p = *loop.program;
    PAX_CHECK(int(loop.inputs.size()) == p.num_inputs && int(loop.outputs.size()) == p.num_outputs &&
                  loop.input_local.size() == loop.inputs.size() && loop.output_local.size() == loop.outputs.size(),
              "row sweep: loop ", k, " takes ", p.num_inputs, " inputs and ", p.num_outputs, " outputs");
    PAX_CHECK(p.size == rows * row_len || p.size == rows, "row sweep: loop ", k, " of ", p.size, " elements over ",
              rows, " rows of ", row_len);
    for (int l : loop.input_local)
      PAX_CHECK(l < 0 || (p.size != rows && size_t(l) < local_widths.size()), "row sweep: loop ", k, " reads local ",
                l);
    for (int l : loop.output_local)
      PAX_CHECK(l < 0 || (p.size != rows && size_t(l) < local_widths.size()), "row sweep: loop ", k, " writes local ",
                l);
    apart[k] = outputs_apart(p, loop.inputs, loop.outputs);
    if (p.reduce) {
      const FusedReduce& r = *p.reduce;
      PAX_CHECK(r.inner == 1 && r.outer == rows && r.n == row_len &&
                    accumulator_dtype(p.slots[size_t(r.slot)].dtype) == r.out_dtype,
                "row sweep: loop ", k, " reduces other rows");
      tile_bytes = std::max(tile_bytes, size_t(tile_elems) * itemsize(p.slots[size_t(r.slot)].dtype));
    }
  }
  // Offsets of the sweep-local values in a thread's buffer.
  std::vector<size_t> local_at(local_widths.size() + 1, 0);
  for (size_t l = 0; l < local_widths.size(); ++l)
    local_at[l + 1] = local_at[l] + round64(size_t(tile_elems) * local_widths[l]);
  parallel_for(ceil_div(rows, tile_rows), 1, [&](int64_t t0, int64_t t1) {
    thread_local std::vector<char> local_mem;
    if (local_mem.size() < local_at.back() + 64) local_mem.resize(local_at.back() + 64);
    char* local = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(local_mem.data()) + 63) & ~uintptr_t(63));
    std::vector<const void*> in;
    std::vector<void*> out;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r0 = t * tile_rows, r1 = std::min(rows, r0 + tile_rows);
      // A local value's element i lives at its buffer + (i - r0 * row_len):
      // its array pointer is moved so that the loops' own indexing lands there.
      auto local_base = [&](int l) {
        return reinterpret_cast<char*>(reinterpret_cast<uintptr_t>(local + local_at[size_t(l)]) -
                                       uintptr_t(r0 * row_len) * local_widths[size_t(l)]);
      };
      for (size_t k = 0; k < loops.size(); ++k) {
        const SweepLoop& loop = loops[k];
        if (!loop.program) {
          const size_t w = itemsize(loop.reduce_dtype);
          const char* x =
              static_cast<const char*>(loop.input_local[0] >= 0 ? local_base(loop.input_local[0]) : loop.inputs[0]);
          reduce_rows(loop.reduce_op, loop.reduce_dtype, x + size_t(r0 * row_len) * w, size_t(r1 - r0), size_t(row_len),
                      static_cast<char*>(loop.outputs[0]) + size_t(r0) * w);
          continue;
        }
        const FusedLoop& p = *loop.program;
        in.assign(loop.inputs.begin(), loop.inputs.end());
        out.assign(loop.outputs.begin(), loop.outputs.end());
        for (size_t i = 0; i < in.size(); ++i) {
          if (loop.input_local[i] >= 0) in[i] = local_base(loop.input_local[i]);
        }
        for (size_t i = 0; i < out.size(); ++i) {
          if (loop.output_local[i] >= 0) out[i] = local_base(loop.output_local[i]);
        }
        const int64_t unit = p.size == rows ? 1 : row_len;
        const int64_t a = r0 * unit, z = r1 * unit;
        Task task(p, in, out, apart[k], p.reduce ? tile_bytes : 0, 0);
        task.run_range(a, z, a, z, p.reduce ? a : -1, [](int64_t, int64_t) {});
        if (!p.reduce) continue;
        const FusedReduce& r = *p.reduce;
        const DType dt = p.slots[size_t(r.slot)].dtype;
        char* dst = static_cast<char*>(out[size_t(r.output)]) + size_t(r0) * itemsize(r.out_dtype);
        reduce_rows(r.op, dt, task.tile(), size_t(r1 - r0), size_t(row_len), dst);
      }
    }
  });
}

void run_fused(const KernelContext& ctx, const FusedLoop& p, std::span<const void* const> inputs,
               std::span<void* const> outputs) {
  PAX_CHECK(int(inputs.size()) == p.num_inputs && int(outputs.size()) == p.num_outputs, "fused loop: takes ",
            p.num_inputs, " inputs and ", p.num_outputs, " outputs, got ", inputs.size(), " and ", outputs.size());
  const bool apart = outputs_apart(p, inputs, outputs);
  if (!p.reduce) return run_plain(p, inputs, outputs, apart);
  if (p.reduce->inner == 1) return run_row_reduce(ctx, p, inputs, outputs, apart);
  run_col_reduce(ctx, p, inputs, outputs, apart);
}

}  // namespace pax::cpu
