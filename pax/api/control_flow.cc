// The tree-level cores of cond, while_loop, fori_loop, scan and checkpoint:
// flatten the operands, trace the callables to closed jaxprs, check what
// they return, and bind the primitives (pax/prims/control_flow.h).
#include "pax/api/control_flow.h"

#include <algorithm>
#include <cstdint>

#include "pax/core/error.h"
#include "pax/ops/lax.h"

namespace pax::detail {
namespace {

// "(f32[3], i32[])" for the jaxpr's outputs.
std::string outs_str(const cf::ClosedFn& fn) { return cf::avals_str(fn.program->jaxpr()->out_avals()); }

// The flat carry of a loop body must keep the structure, shapes and dtypes of
// the initial carry (`init` names it in the message).
void check_carry(const char* op, const char* fn_name, const TreeDef& want_def, const TreeDef& got_def,
                 const std::vector<Array>& init, std::span<const AVal> got, const std::vector<std::string>& paths) {
  PAX_CHECK(got_def == want_def, op, ": ", fn_name, " must return a carry with the structure of the initial carry ",
            want_def.str(), ", got ", got_def.str());
  for (size_t i = 0; i < init.size(); ++i) {
    PAX_CHECK(cf::same_type(init[i].aval(), got[i]), op, ": ", fn_name, " returns the carry leaf '", paths[i], "' as ",
              got[i].str(), " but it enters as ", init[i].aval().str(),
              "; a loop carry must keep its shape and dtype (cast it with astype if needed)");
  }
}

}  // namespace

Tree cond_trees(const Array& index, const std::vector<BranchTreeFn>& branches, const std::vector<Tree>& operands,
                const std::vector<std::string>& names) {
  PAX_CHECK(index.defined() && index.ndim() == 0 && (index.dtype() == DType::bool_ || is_integer(index.dtype())),
            "cond: the predicate / index must be a bool or integer scalar, got ",
            index.defined() ? index.aval().str() : "an empty Array");
  PAX_CHECK(!branches.empty(), "cond: needs at least one branch");
  PAX_CHECK(index.dtype() != DType::bool_ || branches.size() == 2,
            "cond: a bool predicate selects between 2 branches, got ", branches.size(), "; use an integer index");
  std::vector<TreeDef> defs;
  std::vector<Array> leaves = flatten_trees(operands, &defs);
  std::vector<AVal> avals = cf::avals_of(leaves);
  auto name = [&](size_t k) { return names.empty() ? "branch " + std::to_string(k) : names[k]; };
  std::vector<cf::ClosedFn> traced;
  TreeDef out_def;
  for (size_t k = 0; k < branches.size(); ++k) {
    auto def = std::make_shared<TreeDef>();
    traced.push_back(cf::trace_closed(flatten_fn(branches[k], defs, def), avals, "branch"));
    if (k == 0) {
      out_def = *def;
      continue;
    }
    const bool same = *def == out_def &&
                      cf::same_types(traced[0].program->jaxpr()->out_avals(), traced[k].program->jaxpr()->out_avals());
    PAX_CHECK(same, "cond: ", name(0), " returns ", out_def.str(), " with leaves ", outs_str(traced[0]), " but ",
              name(k), " returns ", def->str(), " with leaves ", outs_str(traced[k]),
              "; every branch must return the same structure, shapes and dtypes");
  }
  const bool direct = index.dtype() == DType::i32 || index.dtype() == DType::bool_;
  Array i = direct ? index : lax::convert_element_type(index, DType::i32);
  return tree_unflatten(out_def, cf::cond(i, traced, leaves));
}

Tree while_trees(const std::function<Array(const Tree&)>& cond_fn, const std::function<Tree(const Tree&)>& body_fn,
                 const Tree& init) {
  auto [leaves, def] = tree_flatten(init);
  std::vector<AVal> avals = cf::avals_of(leaves);
  cf::ClosedFn cond = cf::trace_closed(
      [&](std::span<const Array> xs) {
        Array pred = cond_fn(tree_unflatten(def, xs));
        PAX_CHECK(pred.defined() && pred.ndim() == 0 && pred.dtype() == DType::bool_,
                  "while_loop: cond_fn must return a bool scalar, got ",
                  pred.defined() ? pred.aval().str() : "an empty Array");
        return std::vector<Array>{pred};
      },
      avals, "while_cond");
  TreeDef body_def;
  cf::ClosedFn body = cf::trace_closed(
      [&](std::span<const Array> xs) {
        auto [out, d] = tree_flatten(body_fn(tree_unflatten(def, xs)));
        body_def = d;
        return out;
      },
      avals, "while_body");
  check_carry("while_loop", "body_fn", def, body_def, leaves, body.program->jaxpr()->out_avals(), tree_paths(init));
  return tree_unflatten(def, cf::while_loop(cond, body, leaves));
}

Tree fori_static_trees(int64_t lower, int64_t upper, const ForiBody& body, const Tree& init) {
  PAX_CHECK(lower >= INT32_MIN && upper <= INT32_MAX, "fori_loop: bounds [", lower, ", ", upper,
            ") do not fit the int32 loop counter");
  // A scan over (i, carry) with no xs.
  Tree carry = Tree::list({scalar(int32_t(lower)), init});
  ScanBody step = [&](const Tree& c, const Tree&) {
    const Array& i = c[0].leaf();
    Tree next = body(i, c[1]);
    return std::make_pair(Tree::list({lax::add(i, scalar(int32_t(1))), next}), Tree());
  };
  return scan_trees(step, carry, Tree(), std::max<int64_t>(upper - lower, 0), false).first[1];
}

Tree fori_trees(const Array& lower, const Array& upper, const ForiBody& body, const Tree& init) {
  for (const Array* b : {&lower, &upper}) {
    PAX_CHECK(b->defined() && b->ndim() == 0 && is_integer(b->dtype()),
              "fori_loop: bounds must be integer scalars, got ", b->defined() ? b->aval().str() : "an empty Array");
  }
  if (lower.is_concrete() && upper.is_concrete()) {
    return fori_static_trees(lower.item<int64_t>(), upper.item<int64_t>(), body, init);
  }
  // Traced bounds: a while_loop over (i, upper, carry).
  Tree carry = Tree::list({lower.astype(DType::i32), upper.astype(DType::i32), init});
  auto cond_fn = [](const Tree& c) { return lax::lt(c[0].leaf(), c[1].leaf()); };
  auto body_fn = [&](const Tree& c) {
    const Array& i = c[0].leaf();
    return Tree::list({lax::add(i, scalar(int32_t(1))), c[1], body(i, c[2])});
  };
  return while_trees(cond_fn, body_fn, carry)[2];
}

std::pair<Tree, Tree> scan_trees(const ScanBody& f, const Tree& init, const Tree& xs, std::optional<int64_t> length,
                                 bool reverse) {
  auto [carry, carry_def] = tree_flatten(init);
  auto [x_leaves, x_def] = tree_flatten(xs);
  int64_t n = -1;
  for (size_t i = 0; i < x_leaves.size(); ++i) {
    const Array& x = x_leaves[i];
    PAX_CHECK(x.ndim() >= 1, "scan: every leaf of xs needs a leading axis to scan over, but leaf '", tree_paths(xs)[i],
              "' is ", x.aval().str());
    PAX_CHECK(n < 0 || x.dim(0) == n, "scan: the leaves of xs must share their leading axis length: leaf '",
              tree_paths(xs)[i], "' is ", x.aval().str(), " but an earlier one has length ", n);
    n = x.dim(0);
  }
  if (length) {
    PAX_CHECK(*length >= 0, "scan: length must be >= 0, got ", *length);
    PAX_CHECK(n < 0 || n == *length, "scan: length ", *length, " does not match the leading axis ", n, " of xs");
    n = *length;
  }
  PAX_CHECK(n >= 0, "scan: with no xs, give the number of iterations as `length`");
  std::vector<AVal> avals = cf::avals_of(carry);
  for (const Array& x : x_leaves) {
    AVal a = x.aval();
    a.shape.dims().erase(a.shape.dims().begin());
    avals.push_back(a);
  }
  TreeDef body_carry_def, y_def;
  const size_t ncar = carry.size();
  cf::ClosedFn body = cf::trace_closed(
      [&](std::span<const Array> in) {
        auto [c, y] = f(tree_unflatten(carry_def, in.first(ncar)), tree_unflatten(x_def, in.subspan(ncar)));
        auto [out, cd] = tree_flatten(c);
        auto [ys, yd] = tree_flatten(y);
        body_carry_def = cd;
        y_def = yd;
        out.insert(out.end(), ys.begin(), ys.end());
        return out;
      },
      avals, "scan_body");
  std::vector<AVal> outs = body.program->jaxpr()->out_avals();
  check_carry("scan", "f", carry_def, body_carry_def, carry, outs, tree_paths(init));
  cf::ScanSpec spec{body.program, int64_t(body.consts.size()), int64_t(ncar), n, reverse};
  std::vector<Array> out = cf::scan(spec, cf::concat({body.consts, carry, x_leaves}));
  std::span<const Array> o(out);
  return {tree_unflatten(carry_def, o.first(ncar)), tree_unflatten(y_def, o.subspan(ncar))};
}

Tree checkpoint_trees(const TreeFn& f, const std::vector<Tree>& args, RematPolicy policy) {
  std::vector<TreeDef> defs;
  std::vector<Array> leaves = flatten_trees(args, &defs);
  auto out_def = std::make_shared<TreeDef>();
  cf::ClosedFn fn = cf::trace_closed(flatten_fn(f, defs, out_def), cf::avals_of(leaves), "checkpoint");
  return tree_unflatten(*out_def, cf::remat(fn.program, policy, cf::concat({fn.consts, leaves})));
}

}  // namespace pax::detail
