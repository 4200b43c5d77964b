// Type-erased transforms over lists of Trees.
#include "pax/api/transform_core.h"

#include "pax/backend/backend.h"
#include "pax/core/error.h"
#include "pax/interp/jvp.h"
#include "pax/interp/vjp.h"
#include "pax/interp/vmap.h"
#include "pax/ops/lax.h"

namespace pax::detail {

std::vector<Array> flatten_trees(const std::vector<Tree>& trees, std::vector<TreeDef>* defs) {
  std::vector<Array> leaves;
  for (const Tree& t : trees) {
    auto [l, d] = tree_flatten(t);
    leaves.insert(leaves.end(), l.begin(), l.end());
    if (defs) defs->push_back(std::move(d));
  }
  return leaves;
}

std::vector<Tree> unflatten_trees(const std::vector<TreeDef>& defs, std::span<const Array> leaves) {
  std::vector<Tree> out;
  size_t k = 0;
  for (const TreeDef& d : defs) {
    out.push_back(tree_unflatten(d, leaves.subspan(k, d.num_leaves())));
    k += d.num_leaves();
  }
  return out;
}

FlatFn flatten_fn(TreeFn f, std::vector<TreeDef> in_defs, std::shared_ptr<TreeDef> out_def) {
  return [f = std::move(f), in_defs = std::move(in_defs), out_def](std::span<const Array> leaves) {
    Tree out = f(unflatten_trees(in_defs, leaves));
    auto [out_leaves, def] = tree_flatten(out);
    *out_def = def;
    return out_leaves;
  };
}

// ---------------------------------------------------------------------------
// grad / vjp / jvp

namespace {

void check_differentiable(const std::vector<Array>& leaves, const char* op) {
  for (const Array& x : leaves) {
    PAX_CHECK(is_floating(x.dtype()), op, ": cannot differentiate with respect to an input of dtype ",
              dtype_name(x.dtype()), " (", x.aval().str(),
              "); integer and bool inputs have no gradient — "
              "differentiate with respect to floating arrays only (convert with astype)");
  }
}

}  // namespace

GradResult value_and_grad_trees(const TreeFn& f, const std::vector<Tree>& args, bool has_aux) {
  std::vector<TreeDef> defs;
  std::vector<Array> leaves = flatten_trees(args, &defs);
  check_differentiable(leaves, "grad");
  auto out_def = std::make_shared<TreeDef>();
  // The flat function returns [value, *aux leaves].
  auto aux_def = std::make_shared<TreeDef>();
  FlatFn flat = [&](std::span<const Array> xs) {
    Tree out = f(unflatten_trees(defs, xs));
    Tree value = out;
    std::vector<Array> result;
    if (has_aux) {
      PAX_CHECK(out.is_list() && out.size() == 2, "grad with has_aux: the function must return (value, aux), got ",
                out.str());
      value = out[0];
      auto [aux_leaves, ad] = tree_flatten(out[1]);
      *aux_def = ad;
      result = aux_leaves;
    }
    PAX_CHECK(value.is_leaf() && value.leaf().ndim() == 0 && is_floating(value.leaf().dtype()),
              "grad: the function must return a scalar floating array, got ", value.str(),
              " (use vjp for non-scalar outputs)");
    result.insert(result.begin(), value.leaf());
    return result;
  };
  size_t num_aux = 0;
  FlatVjp vjp;
  {
    // The aux count is only known after the call; trace with a counting wrapper.
    FlatFn counted = [&](std::span<const Array> xs) {
      std::vector<Array> r = flat(xs);
      num_aux = r.size() - 1;
      return r;
    };
    vjp = vjp_flat(counted, leaves, 0);
  }
  // vjp_flat treated every output as differentiable; only the value gets a cotangent.
  std::vector<Array> cts(vjp.outputs.size());
  cts[0] = scalar(1.0, vjp.outputs[0].dtype());
  std::vector<Array> g = vjp.backward(cts);
  for (size_t i = 0; i < g.size(); ++i) {
    if (!g[i].defined()) g[i] = zeros_like_aval(leaves[i]);
  }
  GradResult result;
  result.value = Tree(vjp.outputs[0]);
  if (has_aux) {
    result.aux = tree_unflatten(*aux_def, std::span<const Array>(vjp.outputs).subspan(1, num_aux));
  }
  result.grads = unflatten_trees(defs, g);
  return result;
}

VjpTrees vjp_trees(const TreeFn& f, const std::vector<Tree>& primals) {
  std::vector<TreeDef> defs;
  std::vector<Array> leaves = flatten_trees(primals, &defs);
  check_differentiable(leaves, "vjp");
  auto out_def = std::make_shared<TreeDef>();
  FlatVjp vjp = vjp_flat(flatten_fn(f, defs, out_def), leaves, 0);
  VjpTrees result;
  result.out = tree_unflatten(*out_def, vjp.outputs);
  result.backward = [vjp, out_def, defs, outputs = vjp.outputs, leaves](const Tree& ct) {
    auto [ct_leaves, ct_def] = tree_flatten(ct);
    PAX_CHECK(ct_def == *out_def, "vjp: the cotangent has structure ", ct_def.str(), " but the output has ",
              out_def->str());
    for (size_t i = 0; i < ct_leaves.size(); ++i) {
      PAX_CHECK(ct_leaves[i].shape() == outputs[i].shape() && ct_leaves[i].dtype() == outputs[i].dtype(),
                "vjp: cotangent ", ct_leaves[i].aval().str(), " does not match the output ", outputs[i].aval().str());
    }
    std::vector<Array> g = vjp.backward(ct_leaves);
    for (size_t i = 0; i < g.size(); ++i) {
      if (!g[i].defined()) g[i] = zeros_like_aval(leaves[i]);
    }
    return unflatten_trees(defs, g);
  };
  return result;
}

std::pair<Tree, Tree> jvp_trees(const TreeFn& f, const std::vector<Tree>& primals, const std::vector<Tree>& tangents) {
  PAX_CHECK(primals.size() == tangents.size(), "jvp: ", primals.size(), " primals but ", tangents.size(), " tangents");
  std::vector<TreeDef> defs, tdefs;
  std::vector<Array> p = flatten_trees(primals, &defs);
  std::vector<Array> t = flatten_trees(tangents, &tdefs);
  for (size_t i = 0; i < defs.size(); ++i) {
    PAX_CHECK(defs[i] == tdefs[i], "jvp: tangent ", i, " has structure ", tdefs[i].str(), " but its primal has ",
              defs[i].str());
  }
  auto out_def = std::make_shared<TreeDef>();
  auto [outs, touts] = jvp_flat(flatten_fn(f, defs, out_def), p, t);
  return {tree_unflatten(*out_def, outs), tree_unflatten(*out_def, touts)};
}

// ---------------------------------------------------------------------------
// vmap

Tree vmap_trees(const TreeFn& f, const std::vector<Tree>& args, const std::vector<std::optional<int64_t>>& in_axes,
                const std::vector<std::optional<int64_t>>& out_axes, const std::string& axis_name) {
  PAX_CHECK(in_axes.size() == 1 || in_axes.size() == args.size(), "vmap: in_axes has ", in_axes.size(),
            " entries but the function has ", args.size(),
            " traced arguments (give one entry per argument, "
            "or one for all)");
  std::vector<TreeDef> defs;
  std::vector<Array> leaves;
  std::vector<std::optional<int64_t>> leaf_axes;
  for (size_t i = 0; i < args.size(); ++i) {
    auto [l, d] = tree_flatten(args[i]);
    const std::optional<int64_t> axis = in_axes.size() == 1 ? in_axes[0] : in_axes[i];
    for (const Array& x : l) {
      leaves.push_back(x);
      leaf_axes.push_back(axis);
    }
    defs.push_back(std::move(d));
  }
  auto out_def = std::make_shared<TreeDef>();
  // out_axes: one entry for every output leaf, one per element of the
  // output (a tuple's, a list's or a dict's: all the leaves of element i
  // take entry i, as a prefix of the output tree in JAX), or one per leaf.
  std::vector<std::optional<int64_t>> leaf_out_axes;
  auto out_axis = [&](size_t leaf, size_t num_leaves) -> std::optional<int64_t> {
    if (out_axes.size() == 1) return out_axes[0];
    if (leaf_out_axes.empty()) {
      const std::vector<size_t> counts = out_def->child_leaf_counts();
      if (out_axes.size() == counts.size()) {
        for (size_t c = 0; c < counts.size(); ++c) leaf_out_axes.insert(leaf_out_axes.end(), counts[c], out_axes[c]);
      } else {
        PAX_CHECK(out_axes.size() == num_leaves, "vmap: out_axes has ", out_axes.size(), " entries but the output ",
                  out_def->str(), " has ", counts.size(), " elements and ", num_leaves,
                  " leaves (give one entry, one per element, or one per leaf)");
        leaf_out_axes = out_axes;
      }
    }
    return leaf_out_axes[leaf];
  };
  std::vector<Array> outs = vmap_flat(flatten_fn(f, defs, out_def), leaves, leaf_axes, out_axis, axis_name);
  return tree_unflatten(*out_def, outs);
}

// ---------------------------------------------------------------------------
// make_jaxpr / eval_shape

namespace {

std::vector<AVal> avals_of(const std::vector<Array>& leaves) {
  std::vector<AVal> out;
  for (const Array& x : leaves) out.push_back(x.aval());
  return out;
}

// The (never active) level that owns eval_shape's abstract results.
class ShapeTrace : public Trace {
 public:
  std::vector<Array> process(Prim prim, std::span<const Array>, const Params&) override {
    PAX_FAIL(prim_name(prim), ": the result of eval_shape has shapes and dtypes only, no values");
  }
  std::string name() const override { return "eval_shape"; }
};

}  // namespace

std::shared_ptr<Jaxpr> make_jaxpr_trees(const TreeFn& f, const std::vector<Tree>& args) {
  std::vector<TreeDef> defs;
  std::vector<Array> leaves = flatten_trees(args, &defs);
  auto out_def = std::make_shared<TreeDef>();
  std::vector<AVal> avals = avals_of(leaves);
  return trace_to_jaxpr(flatten_fn(f, defs, out_def), avals);
}

Tree eval_shape_trees(const TreeFn& f, const std::vector<Tree>& args) {
  std::vector<TreeDef> defs;
  std::vector<Array> leaves = flatten_trees(args, &defs);
  auto out_def = std::make_shared<TreeDef>();
  std::vector<AVal> avals = avals_of(leaves);
  std::shared_ptr<Jaxpr> jaxpr = trace_to_jaxpr(flatten_fn(f, defs, out_def), avals);
  std::vector<Array> abstract;
  for (const AVal& a : jaxpr->out_avals()) abstract.push_back(shape_dtype_array(a));
  return tree_unflatten(*out_def, abstract);
}

Array shape_dtype_array(const AVal& aval) {
  static const std::shared_ptr<Trace> shapes = std::make_shared<ShapeTrace>();
  return Array(aval, std::make_shared<LevelTracer>(shapes));
}

// ---------------------------------------------------------------------------
// jit

bool JitKey::operator==(const JitKey& o) const {
  if (device != o.device) return false;
  if (statics.size() != o.statics.size() || in_defs != o.in_defs || avals != o.avals) return false;
  for (size_t i = 0; i < statics.size(); ++i) {
    if (!statics[i]->equals(*o.statics[i])) return false;
  }
  return true;
}

size_t JitKey::hash() const {
  size_t h = 0;
  auto mix = [&h](size_t v) { h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  mix(size_t(device.kind) * 1024 + size_t(device.index));
  for (const auto& s : statics) mix(s->hash());
  for (const TreeDef& d : in_defs) mix(d.hash());
  for (const AVal& a : avals) {
    mix(size_t(a.dtype) * 2 + a.weak_type);
    for (int64_t d : a.shape) mix(std::hash<int64_t>{}(d));
  }
  return h;
}

std::string JitKey::str() const {
  std::string out = "(";
  size_t k = 0;
  for (size_t i = 0; i < in_defs.size(); ++i) {
    if (i) out += ", ";
    out += in_defs[i].str() + " with leaves [";
    for (size_t j = 0; j < in_defs[i].num_leaves(); ++j) out += (j ? ", " : "") + avals[k++].str();
    out += "]";
  }
  return out + ") on " + device.str();
}

size_t JitCache::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

std::shared_ptr<const JitEntry> JitCache::find(const JitKey& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = entries_.find(key);
  return it != entries_.end() ? it->second : nullptr;
}

std::shared_ptr<const JitEntry> JitCache::trace(const JitKey& key, const TreeFn& tree_fn, const std::string& name,
                                                const std::vector<bool>& donate_leaf) {
  // Constants made while tracing live where the program runs.
  const DefaultDeviceScope on_device(key.device);
  auto out_def = std::make_shared<TreeDef>();
  std::shared_ptr<Jaxpr> jaxpr = trace_to_jaxpr(flatten_fn(tree_fn, key.in_defs, out_def), key.avals);
  auto entry = std::make_shared<JitEntry>();
  entry->device = key.device;
  entry->consts = jaxpr->consts;
  entry->out_def = *out_def;
  CompileOptions options;
  options.donate.assign(entry->consts.size(), false);
  options.donate.insert(options.donate.end(), donate_leaf.begin(), donate_leaf.end());
  bool cacheable = true;
  for (const Array& c : entry->consts) cacheable = cacheable && !c.is_tracer();
  // Concrete constants are compiled in, so the passes see their values.
  if (cacheable) options.constant_args = entry->consts;
  entry->program = std::make_shared<Program>(convert_constvars(*jaxpr), name, options);
  std::lock_guard<std::mutex> lock(mu_);
  ++num_traces_;
  if (cacheable) entries_.emplace(key, entry);
  return entry;
}

Device jit_device(std::vector<Array>& leaves, const std::string& name) { return place_operands(leaves, name.c_str()); }

std::vector<Array> run_jit_entry(const JitEntry& entry, std::vector<Array> leaves) {
  std::vector<Array> inputs = entry.consts;
  inputs.reserve(inputs.size() + leaves.size());
  bool traced = dynamic_trace() != nullptr;
  for (Array& x : leaves) {
    traced = traced || x.is_tracer();
    inputs.push_back(std::move(x));
  }
  leaves.clear();
  for (const Array& c : entry.consts) traced = traced || c.is_tracer();
  if (!traced) return entry.program->executable(entry.device)->run(std::move(inputs));
  Params params{{"program", std::static_pointer_cast<const ParamObject>(entry.program)}};
  return bind(Prim::jit_call, inputs, params);
}

}  // namespace pax::detail
