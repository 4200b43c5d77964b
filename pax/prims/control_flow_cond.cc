// cond: apply one of several branches, chosen by an int32 index (clamped) or
// a bool predicate (false: branch 0), to the operands. Rules: JVP through the branches' JVPs; VJP through the
// selected branch (a concrete index differentiates that branch directly, a
// traced one builds a cond of the branches' backward passes); batching
// evaluates every branch and selects when the index is batched, and batches
// the branches otherwise.
#include <algorithm>

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

const BranchList& branch_list(const Params& p) { return *p.object<BranchList>("branches"); }

int64_t clamp_index(const Array& index, size_t num_branches) {
  return std::clamp<int64_t>(index.item<int32_t>(), 0, int64_t(num_branches) - 1);
}

// The branch's jaxpr taking the consts of every branch (its own at slot k)
// before the operands.
std::shared_ptr<const Program> widen(std::span<const ClosedFn> branches, size_t k) {
  const Jaxpr& src = *branches[k].program->jaxpr();
  auto j = std::make_shared<Jaxpr>(src);
  const size_t own = branches[k].consts.size();
  std::vector<Var> invars;
  for (size_t b = 0; b < branches.size(); ++b) {
    if (b == k) {
      invars.insert(invars.end(), src.invars.begin(), src.invars.begin() + ptrdiff_t(own));
      continue;
    }
    for (const Array& c : branches[b].consts) invars.push_back(j->new_var(c.aval()));
  }
  invars.insert(invars.end(), src.invars.begin() + ptrdiff_t(own), src.invars.end());
  j->invars = std::move(invars);
  return std::make_shared<Program>(j, "branch" + std::to_string(k));
}

std::vector<AVal> cond_rule(std::span<const AVal> in, const Params& p) {
  const BranchList& list = branch_list(p);
  PAX_CHECK(!list.branches.empty(), "cond: needs at least one branch");
  PAX_CHECK(!in.empty() && in[0].shape.rank() == 0 && (in[0].dtype == DType::i32 || in[0].dtype == DType::bool_),
            "cond: the index (operand 0) must be an int32 scalar or a bool predicate, got ",
            in.empty() ? "nothing" : in[0].str());
  PAX_CHECK(in[0].dtype != DType::bool_ || list.branches.size() == 2,
            "cond: a bool predicate selects between 2 "
            "branches, got ",
            list.branches.size());
  std::span<const AVal> ops = in.subspan(1);
  std::vector<AVal> out;
  for (size_t k = 0; k < list.branches.size(); ++k) {
    const Jaxpr& j = *list.branches[k]->jaxpr();
    std::vector<AVal> want = j.in_avals();
    PAX_CHECK(same_types(want, ops), "cond: branch ", k, " takes ", avals_str(want), " but the operands are ",
              avals_str(ops));
    std::vector<AVal> got = j.out_avals();
    if (k == 0) {
      out = got;
      continue;
    }
    PAX_CHECK(same_types(got, out), "cond: branch 0 returns ", avals_str(out), " but branch ", k, " returns ",
              avals_str(got), "; every branch must return the same shapes and dtypes");
  }
  return out;
}

// Runs on the operands' device (eager_apply makes it the default); a device
// that reads its own index picks the branch itself (Backend::run_cond).
std::vector<Array> cond_impl(std::span<const Array> in, const Params& p) {
  const BranchList& list = branch_list(p);
  const Device device = default_device();
  if (const Backend& backend = backend_for(device); backend.run_cond) {
    std::vector<std::shared_ptr<Executable>> branches;
    for (const auto& b : list.branches) branches.push_back(b->executable(device));
    return backend.run_cond(device.index, in[0], std::move(branches), std::vector<Array>(in.begin() + 1, in.end()));
  }
  const int64_t k = clamp_index(in[0], list.branches.size());
  return list.branches[size_t(k)]->executable()->run(std::vector<Array>(in.begin() + 1, in.end()));
}

std::vector<Array> cond_jvp(std::span<const Array> primals, std::span<const Array> tangents,
                            std::span<const Array> primals_out, const Params& p) {
  const BranchList& list = branch_list(p);
  std::span<const Array> ops = primals.subspan(1);
  const std::vector<size_t> with_t = defined_positions(tangents.subspan(1));
  const std::vector<Array> op_tangents = pick(tangents.subspan(1), with_t);
  const std::vector<Array> inputs = concat({ops, op_tangents});
  // Each branch: [ops, tangents of with_t] -> tangents of the floating outputs.
  std::vector<ClosedFn> jvps;
  for (const auto& branch : list.branches) {
    FlatFn f = [&](std::span<const Array> xs) {
      auto [outs, touts] = jvp_flat([&](std::span<const Array> a) { return call(*branch, a); }, xs.first(ops.size()),
                                    place(ops.size(), with_t, xs.subspan(ops.size())), false);
      return floating_tangents(outs, touts);
    };
    jvps.push_back(trace_closed(f, avals_of(inputs), "branch_jvp"));
  }
  return spread_floating(primals_out, cf::cond(primals[0], jvps, inputs));
}

std::vector<Array> cond_vjp(std::span<const Array> primals_in, std::span<const Array>, std::span<const Array> cts_out,
                            const Params& p, const CotangentMask& needs) {
  const BranchList& list = branch_list(p);
  std::span<const Array> ops = primals_in.subspan(1);
  const std::vector<size_t> floats = floating_positions(ops);
  std::vector<Array> g;
  if (primals_in[0].is_concrete()) {
    // The branch is known: differentiate it alone.
    const Program& branch = *list.branches[size_t(clamp_index(primals_in[0], list.branches.size()))];
    g = pick(vjp_flat([&](std::span<const Array> a) { return call(branch, a); }, ops).backward(cts_out), floats);
  } else {
    // A traced index: a cond over the branches' backward passes,
    // [ops, defined cotangents] -> cotangents of the floating operands.
    const std::vector<size_t> with_ct = defined_positions(cts_out);
    const std::vector<Array> inputs = concat({ops, pick(cts_out, with_ct)});
    std::vector<ClosedFn> backs;
    for (const auto& branch : list.branches) {
      FlatFn f = [&](std::span<const Array> xs) {
        std::span<const Array> primals = xs.first(ops.size());
        FlatVjp v = vjp_flat([&](std::span<const Array> a) { return call(*branch, a); }, primals);
        std::vector<Array> cts = v.backward(place(cts_out.size(), with_ct, xs.subspan(ops.size())));
        std::vector<Array> out;
        for (size_t i : floats) out.push_back(ad::instantiate(cts[i], primals[i]));
        return out;
      };
      backs.push_back(trace_closed(f, avals_of(inputs), "branch_vjp"));
    }
    g = cf::cond(primals_in[0], backs, inputs);
  }
  // No cotangent for the index.
  std::vector<Array> result = place(ops.size(), floats, g);
  result.insert(result.begin(), Array());
  return result;
}

Batched cond_batch(std::span<const Array> values, std::span<const int64_t> bdims, const Params& p,
                   const BatchInfo& info) {
  const BranchList& list = branch_list(p);
  std::span<const Array> ops = values.subspan(1);
  std::span<const int64_t> op_bdims = bdims.subspan(1);
  const size_t n = list.branches.size();
  if (bdims[0] < 0) {
    // One branch for the whole batch: batch every branch, outputs at axis 0.
    std::vector<Array> moved;
    std::vector<bool> in_batched;
    for (size_t i = 0; i < ops.size(); ++i) {
      moved.push_back(op_bdims[i] >= 0 ? move_batch_axis(ops[i], op_bdims[i], 0, info.axis_size) : ops[i]);
      in_batched.push_back(op_bdims[i] >= 0);
    }
    const size_t num_out = list.branches[0]->jaxpr()->outvars.size();
    std::vector<bool> all(num_out, true);
    std::vector<ClosedFn> batched;
    for (const auto& branch : list.branches) batched.push_back(batch_program(*branch, in_batched, all, info).fn);
    std::vector<Array> out = cf::cond(values[0], batched, moved);
    return {out, std::vector<int64_t>(out.size(), 0)};
  }
  // A batched index: run every branch on the whole batch and select per example.
  std::vector<std::vector<Array>> outs;
  for (const auto& branch : list.branches) {
    Batched r = batch_fn([&](std::span<const Array> a) { return call(*branch, a); }, ops, op_bdims, info);
    for (size_t j = 0; j < r.values.size(); ++j) {
      r.values[j] = move_batch_axis(r.values[j], r.bdims[j], 0, info.axis_size);
    }
    outs.push_back(std::move(r.values));
  }
  Array index = move_batch_axis(values[0], bdims[0], 0, info.axis_size);  // i32[B] or bool[B]
  if (index.dtype() == DType::bool_) index = lax::convert_element_type(index, DType::i32);
  auto full = [&](int64_t v) { return lax::broadcast_in_dim(scalar(double(v), DType::i32), index.shape().dims(), {}); };
  index = lax::max(lax::min(index, full(int64_t(n) - 1)), full(0));
  Batched result;
  for (size_t j = 0; j < outs[0].size(); ++j) {
    std::vector<Array> cases;
    for (size_t k = 0; k < n; ++k) cases.push_back(outs[k][j]);
    Array which = lax::broadcast_in_dim(index, cases[0].shape().dims(), {0});
    result.values.push_back(n == 1 ? cases[0] : lax::select_n(which, cases));
    result.bdims.push_back(0);
  }
  return result;
}

}  // namespace

std::vector<Array> cond(const Array& index, std::span<const ClosedFn> branches, std::span<const Array> operands) {
  PAX_CHECK(!branches.empty(), "cond: needs at least one branch");
  auto list = std::make_shared<BranchList>();
  std::vector<Array> inputs{index};
  for (size_t k = 0; k < branches.size(); ++k) {
    list->branches.push_back(widen(branches, k));
    inputs.insert(inputs.end(), branches[k].consts.begin(), branches[k].consts.end());
  }
  inputs.insert(inputs.end(), operands.begin(), operands.end());
  return bind(Prim::cond, inputs, Params{{"branches", std::static_pointer_cast<const ParamObject>(list)}});
}

void register_cond(PrimTable& t) {
  t[size_t(Prim::cond)] =
      PrimDef{.shape_rule = cond_rule, .impl = cond_impl, .vjp = cond_vjp, .jvp = cond_jvp, .batch = cond_batch};
}

}  // namespace pax::cf
