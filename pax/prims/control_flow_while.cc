// while: apply body to the carry while cond holds. Rules: JVP as a while
// over (primal, tangent) carries; no VJP (the trip count is only known at run
// time: reverse mode needs scan, or fori_loop with static bounds); batching
// with a fixed point on which carries are batched, and, when the predicate is
// batched, a loop that runs while any example continues and keeps the
// finished examples' carries.
#include "pax/backend/backend.h"
#include "pax/core/error.h"
#include "pax/interp/vjp.h"
#include "pax/interp/vmap.h"
#include "pax/ops/lax.h"
#include "pax/prims/ad_util.h"
#include "pax/interp/jvp.h"
#include "pax/prims/control_flow.h"

namespace pax::cf {
namespace {

struct WhileParts {
  std::shared_ptr<const Program> cond, body;
  std::span<const Array> cond_consts, body_consts, carry;
};

WhileParts while_parts(std::span<const Array> in, const Params& p) {
  const size_t ncc = size_t(p.i("cond_nconsts")), nbc = size_t(p.i("body_nconsts"));
  return {p.object<Program>("cond"), p.object<Program>("body"), in.first(ncc), in.subspan(ncc, nbc),
          in.subspan(ncc + nbc)};
}

std::vector<AVal> while_rule(std::span<const AVal> in, const Params& p) {
  const int64_t ncc = p.i("cond_nconsts"), nbc = p.i("body_nconsts");
  PAX_CHECK(ncc >= 0 && nbc >= 0 && size_t(ncc + nbc) <= in.size(), "while: cond_nconsts ", ncc, " + body_nconsts ",
            nbc, " exceed the ", in.size(), " operands");
  std::span<const AVal> cc = in.first(size_t(ncc)), bc = in.subspan(size_t(ncc), size_t(nbc)),
                        carry = in.subspan(size_t(ncc + nbc));
  auto check_inputs = [](const Jaxpr& j, std::span<const AVal> consts, std::span<const AVal> carry, const char* what) {
    std::vector<AVal> want = j.in_avals();
    std::vector<AVal> have(consts.begin(), consts.end());
    have.insert(have.end(), carry.begin(), carry.end());
    PAX_CHECK(same_types(want, have), "while: the ", what, " function takes ", avals_str(want), " but is given ",
              avals_str(have));
  };
  const Jaxpr& cj = *p.object<Program>("cond")->jaxpr();
  const Jaxpr& bj = *p.object<Program>("body")->jaxpr();
  check_inputs(cj, cc, carry, "cond");
  check_inputs(bj, bc, carry, "body");
  std::vector<AVal> pred = cj.out_avals();
  PAX_CHECK(pred.size() == 1 && pred[0].shape.rank() == 0 && pred[0].dtype == DType::bool_,
            "while: the cond function must return one bool scalar, got ", avals_str(pred));
  std::vector<AVal> out = bj.out_avals();
  PAX_CHECK(same_types(out, carry), "while: the body function returns ", avals_str(out), " but the carry is ",
            avals_str(carry), "; the body must return a carry of the same shapes and dtypes");
  return std::vector<AVal>(carry.begin(), carry.end());
}

// Runs on the operands' device (eager_apply makes it the default): a device
// that reads its own predicates runs the whole loop (Backend::run_while);
// otherwise the host reads each one.
std::vector<Array> while_impl(std::span<const Array> in, const Params& p) {
  WhileParts w = while_parts(in, p);
  const Device device = default_device();
  auto cond = w.cond->executable(device);
  auto body = w.body->executable(device);
  std::vector<Array> carry(w.carry.begin(), w.carry.end());
  if (const Backend& backend = backend_for(device); backend.run_while) {
    return backend.run_while(device.index, cond, body, std::vector<Array>(w.cond_consts.begin(), w.cond_consts.end()),
                             std::vector<Array>(w.body_consts.begin(), w.body_consts.end()), std::move(carry));
  }
  while (cond->run(concat({w.cond_consts, carry}))[0].item<bool>()) carry = body->run(concat({w.body_consts, carry}));
  return carry;
}

std::vector<Array> while_jvp(std::span<const Array> primals, std::span<const Array> tangents, std::span<const Array>,
                             const Params& p) {
  WhileParts w = while_parts(primals, p);
  const size_t ncc = w.cond_consts.size(), nbc = w.body_consts.size(), n = w.carry.size();
  // Tangents travel for the body consts that have one and every floating carry.
  const std::vector<size_t> const_t = defined_positions(tangents.subspan(ncc, nbc)),
                            carry_t = floating_positions(w.carry);
  const std::vector<Array> const_tangents = pick(tangents.subspan(ncc, nbc), const_t);
  std::vector<Array> init_tangents;
  for (size_t i : carry_t) init_tangents.push_back(ad::instantiate(tangents[ncc + nbc + i], w.carry[i]));
  // cond: [cond_consts, carry, carry tangents] -> pred
  ClosedFn cond = trace_closed([&](std::span<const Array> xs) { return call(*w.cond, xs.first(ncc + n)); },
                               avals_of(concat({w.cond_consts, w.carry, init_tangents})), "while_cond");
  // body: [body_consts, their tangents, carry, carry tangents] -> [carry, carry tangents]
  ClosedFn body = trace_closed(
      [&](std::span<const Array> xs) {
        const size_t nct = const_t.size();
        std::vector<Array> t = place(nbc, const_t, xs.subspan(nbc, nct));
        std::vector<Array> ct = place(n, carry_t, xs.subspan(nbc + nct + n));
        t.insert(t.end(), ct.begin(), ct.end());
        auto [outs, touts] = jvp_flat([&](std::span<const Array> a) { return call(*w.body, a); },
                                      concat({xs.first(nbc), xs.subspan(nbc + nct, n)}), t, false);
        std::vector<Array> tangents_out = floating_tangents(outs, touts);
        outs.insert(outs.end(), tangents_out.begin(), tangents_out.end());
        return outs;
      },
      avals_of(concat({w.body_consts, const_tangents, w.carry, init_tangents})), "while_body_jvp");
  cond.consts = concat({cond.consts, w.cond_consts});
  body.consts = concat({body.consts, w.body_consts, const_tangents});
  std::vector<Array> out = cf::while_loop(cond, body, concat({w.carry, init_tangents}));
  return place(n, carry_t, std::span<const Array>(out).subspan(n));
}

std::vector<Array> while_vjp(std::span<const Array>, std::span<const Array>, std::span<const Array>, const Params&,
                             const CotangentMask& needs) {
  PAX_FAIL(
      "while: reverse-mode differentiation (grad / vjp) of a while_loop is not supported, because its trip "
      "count is only known at run time; use scan, or fori_loop with static (int) bounds, which becomes a "
      "differentiable scan (forward mode, jvp, of a while_loop works)");
}

Batched while_batch(std::span<const Array> values, std::span<const int64_t> bdims, const Params& p,
                    const BatchInfo& info) {
  WhileParts w = while_parts(values, p);
  const size_t ncc = w.cond_consts.size(), nbc = w.body_consts.size(), n = w.carry.size();
  const int64_t size = info.axis_size;
  auto batched_at = [&](size_t i) { return bdims[i] >= 0; };
  std::vector<bool> cc_b, bc_b, carry_b;
  for (size_t i = 0; i < ncc; ++i) cc_b.push_back(batched_at(i));
  for (size_t i = 0; i < nbc; ++i) bc_b.push_back(batched_at(ncc + i));
  for (size_t i = 0; i < n; ++i) carry_b.push_back(batched_at(ncc + nbc + i));
  auto join = [](std::vector<bool> a, const std::vector<bool>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  // Fixed point: a carry the body makes batched is batched from the start.
  auto batch_body = [&] {
    for (;;) {
      BatchedFn b = batch_program(*w.body, join(bc_b, carry_b), carry_b, info);
      bool changed = false;
      for (size_t i = 0; i < n; ++i) {
        if (b.out_batched[i] && !carry_b[i]) {
          carry_b[i] = true;
          changed = true;
        }
      }
      if (!changed) return b;
    }
  };
  BatchedFn body = batch_body();
  BatchedFn cond = batch_program(*w.cond, join(cc_b, carry_b), {}, info);
  const bool pred_batched = cond.out_batched[0];
  if (pred_batched) {
    // Examples finish at different iterations: every carry is per example.
    bool all = true;
    for (bool b : carry_b) all = all && b;
    if (!all) {
      carry_b.assign(n, true);
      body = batch_body();
      cond = batch_program(*w.cond, join(cc_b, carry_b), {}, info);
    }
  }
  auto moved = [&](size_t i, bool batched) {
    if (!batched) return values[i];
    return move_batch_axis(values[i], bdims[i], 0, size);
  };
  std::vector<Array> cc, bc, init;
  for (size_t i = 0; i < ncc; ++i) cc.push_back(moved(i, cc_b[i]));
  for (size_t i = 0; i < nbc; ++i) bc.push_back(moved(ncc + i, bc_b[i]));
  for (size_t i = 0; i < n; ++i) init.push_back(moved(ncc + nbc + i, carry_b[i]));
  Batched result;
  if (!pred_batched) {
    cond.fn.consts = concat({cond.fn.consts, cc});
    body.fn.consts = concat({body.fn.consts, bc});
    result.values = cf::while_loop(cond.fn, body.fn, init);
  } else {
    // cond: any example continues; body: advance the examples that continue.
    std::vector<AVal> cond_avals = avals_of(concat({cc, init}));
    ClosedFn any = trace_closed(
        [&](std::span<const Array> xs) {
          Array pred = call(cond.fn, xs)[0];  // bool[B]
          return std::vector<Array>{lax::reduce_or(pred, {0})};
        },
        cond_avals, "while_cond_any");
    std::vector<AVal> body_avals = avals_of(concat({cc, bc, init}));
    ClosedFn step = trace_closed(
        [&](std::span<const Array> xs) {
          std::span<const Array> c = xs.first(ncc), b = xs.subspan(ncc, nbc), carry = xs.subspan(ncc + nbc);
          Array pred = call(cond.fn, concat({c, carry}))[0];
          std::vector<Array> next = call(body.fn, concat({b, carry}));
          for (size_t i = 0; i < n; ++i) {
            Array which = lax::broadcast_in_dim(pred, carry[i].shape().dims(), {0});
            next[i] = lax::select_n(which, {carry[i], next[i]});
          }
          return next;
        },
        body_avals, "while_body_masked");
    any.consts = concat({any.consts, cc});
    step.consts = concat({step.consts, cc, bc});
    result.values = cf::while_loop(any, step, init);
  }
  for (size_t i = 0; i < n; ++i) result.bdims.push_back(carry_b[i] ? 0 : -1);
  return result;
}

}  // namespace

std::vector<Array> while_loop(const ClosedFn& cond, const ClosedFn& body, std::span<const Array> init) {
  Params params{{"cond", std::static_pointer_cast<const ParamObject>(cond.program)},
                {"body", std::static_pointer_cast<const ParamObject>(body.program)},
                {"cond_nconsts", int64_t(cond.consts.size())},
                {"body_nconsts", int64_t(body.consts.size())}};
  return bind(Prim::while_loop, concat({cond.consts, body.consts, init}), params);
}

void register_while(PrimTable& t) {
  t[size_t(Prim::while_loop)] =
      PrimDef{.shape_rule = while_rule, .impl = while_impl, .vjp = while_vjp, .jvp = while_jvp, .batch = while_batch};
}

}  // namespace pax::cf
