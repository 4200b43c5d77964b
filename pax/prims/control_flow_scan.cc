// scan: loop a body over the leading axis of xs, threading a carry and
// stacking the per-iteration outputs ys. The eager implementation runs the
// body's compiled program per iteration, copying x_t rows out of xs and y_t
// rows into preallocated outputs. Rules: JVP as a scan over primal and
// tangent carries; VJP as the classic reverse scan (the carries entering each
// iteration are the residuals; each backward step recomputes its forward step
// and applies the body's VJP); batching batches the body with a fixed point
// on which carries are batched (the scan axis stays at 0, the batch axis of
// xs and ys at 1).
#include "pax/backend/backend.h"
#include "pax/core/error.h"
#include "pax/interp/collective_thread.h"
#include "pax/interp/process_axis.h"
#include "pax/interp/vjp.h"
#include "pax/interp/vmap.h"
#include "pax/ops/lax.h"
#include "pax/prims/ad_util.h"
#include "pax/interp/jvp.h"
#include "pax/prims/control_flow.h"
#include "pax/prims/scan_pipeline.h"

namespace pax::cf {
namespace {

AVal row_aval(const AVal& stacked) {
  AVal a = stacked;
  a.shape.dims().erase(a.shape.dims().begin());
  return a;
}

AVal stacked_aval(const AVal& row, int64_t length) {
  AVal a = row;
  a.shape.dims().insert(a.shape.dims().begin(), length);
  return a;
}

// The pieces of a scan's operands.
struct ScanOperands {
  std::span<const Array> consts, init, xs;
};
ScanOperands split(std::span<const Array> in, const ScanSpec& s) {
  const size_t nc = size_t(s.num_consts), ncar = size_t(s.num_carry);
  return {in.first(nc), in.subspan(nc, ncar), in.subspan(nc + ncar)};
}

std::vector<AVal> scan_rule(std::span<const AVal> in, const Params& p) {
  const ScanSpec s = scan_spec(p);
  const Jaxpr& j = *s.body->jaxpr();
  const int64_t nc = s.num_consts, ncar = s.num_carry;
  PAX_CHECK(nc >= 0 && ncar >= 0 && size_t(nc + ncar) <= in.size(), "scan: num_consts ", nc, " + num_carry ", ncar,
            " exceed the ", in.size(), " operands");
  PAX_CHECK(s.length >= 0, "scan: length must be >= 0, got ", s.length);
  std::vector<AVal> want = j.in_avals();
  PAX_CHECK(want.size() == in.size(), "scan: the body takes ", want.size(), " inputs ", avals_str(want), " but ",
            in.size(), " operands were given");
  for (size_t i = 0; i < in.size(); ++i) {
    if (i < size_t(nc + ncar)) {
      PAX_CHECK(same_type(in[i], want[i]), "scan: operand ", i, " is ", in[i].str(), " but the body takes ",
                want[i].str());
      continue;
    }
    PAX_CHECK(in[i].shape.rank() >= 1 && in[i].shape[0] == s.length && same_type(row_aval(in[i]), want[i]),
              "scan: xs operand ", i - size_t(nc + ncar), " is ", in[i].str(), " but must be the body's x ",
              want[i].str(), " stacked along a leading axis of length ", s.length);
  }
  std::vector<AVal> body_out = j.out_avals();
  PAX_CHECK(body_out.size() >= size_t(ncar), "scan: the body returns ", body_out.size(), " values but the carry has ",
            ncar);
  std::vector<AVal> out;
  for (int64_t i = 0; i < ncar; ++i) {
    const AVal& carry = in[size_t(nc + i)];
    PAX_CHECK(same_type(body_out[size_t(i)], carry), "scan: the body returns carry ", i, " as ",
              body_out[size_t(i)].str(), " but it enters as ", carry.str(),
              "; the carry must keep its shape and dtype");
    out.push_back(carry);
  }
  for (size_t k = size_t(ncar); k < body_out.size(); ++k) out.push_back(stacked_aval(body_out[k], s.length));
  if (p.b("save_carries")) {
    for (int64_t i = 0; i < ncar; ++i) out.push_back(stacked_aval(in[size_t(nc + i)], s.length));
  }
  return out;
}

}  // namespace

RowWriter::RowWriter(const AVal& row, int64_t length)
    : aval_(stacked_aval(row, length)),
      row_bytes_(size_t(row.shape.numel()) * itemsize(row.dtype)),
      buffer_(Buffer::allocate_on(default_device(), row_bytes_ * size_t(length))) {}

void RowWriter::put(int64_t t, const Array& row) const {
  PAX_CHECK(row.device() == buffer_->device(), "scan: a row on ", row.device(), " for stacked rows on ",
            buffer_->device());
  device_memory(buffer_->device().kind).copy(buffer_, size_t(t) * row_bytes_, row.buffer(), 0, row_bytes_);
}

Array read_row(const Array& xs, int64_t t) {
  AVal a = row_aval(xs.aval());
  const size_t nbytes = size_t(a.shape.numel()) * itemsize(a.dtype);
  std::shared_ptr<Buffer> buf = Buffer::allocate_on(xs.device(), nbytes);
  device_memory(xs.device().kind).copy(buf, 0, xs.buffer(), size_t(t) * nbytes, nbytes);
  return Array(a, buf, xs.committed());
}

namespace {

std::vector<Array> scan_impl(std::span<const Array> in, const Params& p) {
  const ScanSpec s = scan_spec(p);
  const bool save = p.b("save_carries");
  ScanOperands ops = split(in, s);
  // A body with collectives over several processes overlaps them with the
  // neighbouring iterations (scan_pipeline.h).
  if (s.length > 1 && overlap_collectives() && process_axis().size() > 1) {
    if (auto pipeline = scan_pipeline(s.body, s.num_consts, s.num_carry))
      return run_scan_pipeline(*pipeline, ops.consts, ops.init, ops.xs, s.length, s.reverse, save);
  }
  auto body = s.body->executable();
  const Jaxpr& j = *s.body->jaxpr();
  const size_t ncar = ops.init.size();
  std::vector<RowWriter> ys, carries;
  for (size_t k = ncar; k < j.outvars.size(); ++k) ys.emplace_back(j.aval(j.outvars[k]), s.length);
  if (save) {
    for (const Array& c : ops.init) carries.emplace_back(c.aval(), s.length);
  }
  std::vector<Array> carry(ops.init.begin(), ops.init.end());
  std::vector<Array> args;
  for (int64_t i = 0; i < s.length; ++i) {
    const int64_t t = s.reverse ? s.length - 1 - i : i;
    args.assign(ops.consts.begin(), ops.consts.end());
    for (size_t k = 0; k < ncar; ++k) {
      if (save) carries[k].put(t, carry[k]);
      args.push_back(std::move(carry[k]));
    }
    for (const Array& x : ops.xs) args.push_back(read_row(x, t));
    std::vector<Array> out = body->run(std::move(args));
    args.clear();
    for (size_t k = 0; k < ncar; ++k) carry[k] = std::move(out[k]);
    for (size_t k = 0; k < ys.size(); ++k) ys[k].put(t, out[ncar + k]);
  }
  for (RowWriter& y : ys) carry.push_back(y.finish());
  for (RowWriter& c : carries) carry.push_back(c.finish());
  return carry;
}

std::vector<AVal> row_avals(std::span<const Array> xs) {
  std::vector<AVal> out;
  for (const Array& x : xs) out.push_back(row_aval(x.aval()));
  return out;
}

// Reads consecutive groups off a span of traced inputs.
class Cursor {
 public:
  explicit Cursor(std::span<const Array> xs) : xs_(xs) {}
  std::span<const Array> next(size_t n) {
    std::span<const Array> out = xs_.subspan(pos_, n);
    pos_ += n;
    return out;
  }

 private:
  std::span<const Array> xs_;
  size_t pos_ = 0;
};

std::vector<Array> scan_jvp(std::span<const Array> primals, std::span<const Array> tangents,
                            std::span<const Array> primals_out, const Params& p) {
  const ScanSpec s = scan_spec(p);
  const bool save = p.b("save_carries");
  ScanOperands ops = split(primals, s);
  ScanOperands tan = split(tangents, s);
  const size_t nc = ops.consts.size(), ncar = ops.init.size(), nx = ops.xs.size();
  const size_t ny = s.body->jaxpr()->outvars.size() - ncar;
  // Tangents travel for the consts and xs that have one and every floating carry.
  const std::vector<size_t> const_t = defined_positions(tan.consts), x_t = defined_positions(tan.xs),
                            carry_t = floating_positions(ops.init);
  const size_t nct = carry_t.size(), nyt = floating_positions(primals_out.subspan(ncar, ny)).size();
  std::vector<Array> init_t;
  for (size_t i : carry_t) init_t.push_back(ad::instantiate(tan.init[i], ops.init[i]));
  const std::vector<Array> consts_t = pick(tan.consts, const_t), xs_t = pick(tan.xs, x_t);
  std::vector<AVal> avals = avals_of(concat({ops.consts, consts_t, ops.init, init_t}));
  for (const AVal& a : row_avals(concat({ops.xs, xs_t}))) avals.push_back(a);
  // body: [consts, const tangents, carry, carry tangents, x, x tangents]
  //    -> [carry, carry tangents, y, y tangents]
  ClosedFn body = trace_closed(
      [&](std::span<const Array> in) {
        Cursor c(in);
        std::span<const Array> consts = c.next(nc), ct = c.next(const_t.size()), carry = c.next(ncar),
                               cart = c.next(carry_t.size()), x = c.next(nx), xt = c.next(x_t.size());
        auto [outs, touts] =
            jvp_flat([&](std::span<const Array> a) { return call(*s.body, a); }, concat({consts, carry, x}),
                     concat({place(nc, const_t, ct), place(ncar, carry_t, cart), place(nx, x_t, xt)}), false);
        std::span<const Array> o(outs), t(touts);
        return concat({o.first(ncar), floating_tangents(o.first(ncar), t.first(ncar)), o.subspan(ncar),
                       floating_tangents(o.subspan(ncar), t.subspan(ncar))});
      },
      avals, "scan_body_jvp");
  ScanSpec spec{body.program, int64_t(body.consts.size() + nc + const_t.size()), int64_t(ncar + carry_t.size()),
                s.length, s.reverse};
  std::vector<Array> out =
      cf::scan(spec, concat({body.consts, ops.consts, consts_t, ops.init, init_t, ops.xs, xs_t}), save);
  // out: [carry, carry tangents, ys, y tangents, (stacked carries, stacked carry tangents)]
  std::span<const Array> o(out);
  std::vector<Array> result = concat({place(ncar, carry_t, o.subspan(ncar, nct)),
                                      spread_floating(primals_out.subspan(ncar, ny), o.subspan(ncar + nct + ny, nyt))});
  if (save) {
    std::vector<Array> stacked = place(ncar, carry_t, o.subspan(ncar + nct + ny + nyt + ncar, nct));
    result.insert(result.end(), stacked.begin(), stacked.end());
  }
  return result;
}

std::vector<Array> scan_vjp(std::span<const Array> primals_in, std::span<const Array> primals_out,
                            std::span<const Array> cts_out, const Params& p, const CotangentMask& needs) {
  const ScanSpec s = scan_spec(p);
  ScanOperands ops = split(primals_in, s);
  const size_t nc = ops.consts.size(), ncar = ops.init.size(), nx = ops.xs.size();
  const size_t ny = s.body->jaxpr()->outvars.size() - ncar;
  // The carries that entered each iteration: saved by the forward pass, or recomputed.
  std::vector<Array> stacked;
  if (p.b("save_carries")) {
    stacked.assign(primals_out.begin() + ptrdiff_t(ncar + ny), primals_out.end());
  } else {
    std::vector<Array> fwd = cf::scan(s, primals_in, /*want_carries=*/true);
    stacked.assign(fwd.begin() + ptrdiff_t(ncar + ny), fwd.end());
  }
  std::span<const Array> ct_carry = cts_out.first(ncar), ct_ys = cts_out.subspan(ncar, ny);
  std::span<const Array> ct_stacked = cts_out.size() > ncar + ny ? cts_out.subspan(ncar + ny)
                                                                 : std::span<const Array>();
  const std::vector<size_t> const_f = floating_positions(ops.consts), carry_f = floating_positions(ops.init),
                            x_f = floating_positions(ops.xs), y_ct = defined_positions(ct_ys),
                            stacked_ct = defined_positions(ct_stacked);
  const std::vector<Array> cty = pick(ct_ys, y_ct), cts = pick(ct_stacked, stacked_ct);
  // Backward scan, in the opposite direction:
  //   consts [consts]; carry [const cotangent sums, carry cotangents];
  //   xs [stacked carries, xs, y cotangents, stacked-carry cotangents] -> ys [x cotangents]
  std::vector<Array> carry0;
  for (size_t i : const_f) carry0.push_back(zeros_like_aval(ops.consts[i]));
  for (size_t i : carry_f) carry0.push_back(ad::instantiate(ct_carry[i], ops.init[i]));
  std::vector<Array> xs_b = concat({stacked, ops.xs, cty, cts});
  std::vector<AVal> avals = avals_of(concat({ops.consts, carry0}));
  for (const AVal& a : row_avals(xs_b)) avals.push_back(a);
  // Positions of the stacked-carry cotangents by carry.
  std::vector<int64_t> stacked_pos(ncar, -1);
  for (size_t k = 0; k < stacked_ct.size(); ++k) stacked_pos[stacked_ct[k]] = int64_t(k);
  ClosedFn back = trace_closed(
      [&](std::span<const Array> in) {
        Cursor c(in);
        std::span<const Array> consts = c.next(nc), acc = c.next(const_f.size()), ctc = c.next(carry_f.size()),
                               carry = c.next(ncar), x = c.next(nx), ct_y = c.next(y_ct.size()),
                               ct_s = c.next(stacked_ct.size());
        FlatVjp v = vjp_flat([&](std::span<const Array> a) { return call(*s.body, a); }, concat({consts, carry, x}));
        std::vector<Array> g = v.backward(concat({place(ncar, carry_f, ctc), place(ny, y_ct, ct_y)}));
        std::vector<Array> result;
        for (size_t k = 0; k < const_f.size(); ++k) {
          const Array& gi = g[const_f[k]];
          result.push_back(gi.defined() ? lax::add(acc[k], gi) : acc[k]);
        }
        for (size_t i : carry_f) {
          Array gi = ad::instantiate(g[nc + i], carry[i]);
          if (stacked_pos[i] >= 0) gi = lax::add(gi, ct_s[size_t(stacked_pos[i])]);
          result.push_back(gi);
        }
        for (size_t i : x_f) result.push_back(ad::instantiate(g[nc + ncar + i], x[i]));
        return result;
      },
      avals, "scan_body_vjp");
  ScanSpec spec{back.program, int64_t(back.consts.size() + nc), int64_t(carry0.size()), s.length, !s.reverse};
  std::vector<Array> out = cf::scan(spec, concat({back.consts, ops.consts, carry0, xs_b}));
  // out: [const cotangents, init cotangents, xs cotangents]
  std::vector<Array> result(primals_in.size());
  size_t k = 0;
  for (size_t i : const_f) result[i] = out[k++];
  for (size_t i : carry_f) result[nc + i] = out[k++];
  for (size_t i : x_f) result[nc + ncar + i] = out[k++];
  return result;
}

Batched scan_batch(std::span<const Array> values, std::span<const int64_t> bdims, const Params& p,
                   const BatchInfo& info) {
  const ScanSpec s = scan_spec(p);
  const bool save = p.b("save_carries");
  ScanOperands ops = split(values, s);
  const size_t nc = ops.consts.size(), ncar = ops.init.size(), nx = ops.xs.size();
  const size_t ny = s.body->jaxpr()->outvars.size() - ncar;
  const int64_t size = info.axis_size;
  std::vector<bool> carry_b(ncar);
  for (size_t i = 0; i < ncar; ++i) carry_b[i] = bdims[nc + i] >= 0;
  auto in_batched = [&] {
    std::vector<bool> b;
    for (size_t i = 0; i < nc; ++i) b.push_back(bdims[i] >= 0);
    b.insert(b.end(), carry_b.begin(), carry_b.end());
    for (size_t i = 0; i < nx; ++i) b.push_back(bdims[nc + ncar + i] >= 0);
    return b;
  };
  // Fixed point: a carry that the body makes batched is batched from the start.
  BatchedFn body;
  for (;;) {
    std::vector<bool> force(carry_b);
    force.resize(ncar + ny, false);
    body = batch_program(*s.body, in_batched(), force, info);
    bool changed = false;
    for (size_t i = 0; i < ncar; ++i) {
      if (body.out_batched[i] && !carry_b[i]) {
        carry_b[i] = true;
        changed = true;
      }
    }
    if (!changed) break;
  }
  std::vector<Array> operands = body.fn.consts;
  for (size_t i = 0; i < nc; ++i) {
    operands.push_back(bdims[i] >= 0 ? move_batch_axis(values[i], bdims[i], 0, size) : values[i]);
  }
  for (size_t i = 0; i < ncar; ++i) {
    operands.push_back(carry_b[i] ? move_batch_axis(values[nc + i], bdims[nc + i], 0, size) : values[nc + i]);
  }
  for (size_t i = 0; i < nx; ++i) {
    const int64_t d = bdims[nc + ncar + i];
    operands.push_back(d >= 0 ? move_batch_axis(values[nc + ncar + i], d, 1, size) : values[nc + ncar + i]);
  }
  ScanSpec spec{body.fn.program, int64_t(body.fn.consts.size() + nc), int64_t(ncar), s.length, s.reverse};
  Batched result;
  result.values = cf::scan(spec, operands, save);
  for (size_t i = 0; i < ncar; ++i) result.bdims.push_back(carry_b[i] ? 0 : -1);
  for (size_t k = 0; k < ny; ++k) result.bdims.push_back(body.out_batched[ncar + k] ? 1 : -1);
  if (save) {
    for (size_t i = 0; i < ncar; ++i) result.bdims.push_back(carry_b[i] ? 1 : -1);
  }
  return result;
}

}  // namespace

ScanSpec scan_spec(const Params& p) {
  return ScanSpec{p.object<Program>("body"), p.i("num_consts"), p.i("num_carry"), p.i("length"), p.b("reverse")};
}

Params scan_params(const ScanSpec& s, bool save_carries) {
  return Params{{"body", std::static_pointer_cast<const ParamObject>(s.body)},
                {"num_consts", s.num_consts},
                {"num_carry", s.num_carry},
                {"length", s.length},
                {"reverse", s.reverse},
                {"save_carries", save_carries}};
}

std::vector<Array> scan(const ScanSpec& spec, std::span<const Array> operands, bool want_carries) {
  const bool save = want_carries || differentiated_here(Prim::scan, operands);
  std::vector<Array> out = bind(Prim::scan, operands, scan_params(spec, save));
  if (save && !want_carries) out.resize(out.size() - size_t(spec.num_carry));
  return out;
}

void register_scan(PrimTable& t) {
  t[size_t(Prim::scan)] =
      PrimDef{.shape_rule = scan_rule, .impl = scan_impl, .vjp = scan_vjp, .jvp = scan_jvp, .batch = scan_batch};
}

}  // namespace pax::cf
