// The vmap level.
#include "pax/interp/vmap.h"

#include "pax/ir/executable.h"
#include "pax/core/error.h"
#include "pax/interp/custom_vjp.h"
#include "pax/ir/jaxpr.h"
#include "pax/ops/lax.h"
#include "pax/prims/registry.h"

namespace pax {

namespace {
AVal unbatched_aval(const Array& value, int64_t bdim) {
  AVal a = value.aval();
  a.shape.dims().erase(a.shape.dims().begin() + bdim);
  return a;
}
}  // namespace

Array VmapTrace::batched(const Array& value, int64_t bdim) {
  return Array(unbatched_aval(value, bdim), std::make_shared<VmapTracer>(shared_from_this(), value, bdim));
}

std::pair<Array, int64_t> VmapTrace::unpack(const Array& x) const {
  if (trace_of(x) == this) {
    const auto* t = static_cast<const VmapTracer*>(x.tracer());
    return {t->value, t->bdim};
  }
  return {x, -1};
}

std::vector<Array> VmapTrace::process(Prim prim, std::span<const Array> inputs, const Params& params) {
  // A primitive without a batching rule that expands (jit_call) is batched
  // through its body.
  if (const PrimDef& def = prim_def(prim); def.expand && !def.batch) return def.expand(inputs, params);
  std::vector<Array> values;
  std::vector<int64_t> bdims;
  bool any = false;
  for (const Array& x : inputs) {
    auto [v, d] = unpack(x);
    values.push_back(v);
    bdims.push_back(d);
    any = any || d >= 0;
  }
  // Collectives over this level's axis apply even to unbatched values; so
  // does a custom_vjp_call under a named axis, whose bwd may hold one (it
  // must run under this level when the backward pass calls it).
  const bool own_collective = is_collective(prim) && params.s("axis_name") == axis_name_;
  const bool named_custom_vjp = prim == Prim::custom_vjp_call && !axis_name_.empty() &&
                                !params.object<CustomVjpRule>("rule")->batched_over(axis_name_);
  if (!any && !own_collective && !named_custom_vjp) return bind(prim, values, params);
  const PrimDef& def = prim_def(prim);
  PAX_CHECK(def.batch, "vmap: primitive ", prim_name(prim), " has no batching rule");
  BatchInfo info{axis_size_, axis_name_, {}, {}};
  for (size_t i = 0; i < values.size(); ++i) {
    info.in_avals.push_back(bdims[i] >= 0 ? unbatched_aval(values[i], bdims[i]) : values[i].aval());
  }
  info.out_avals = infer_avals(prim, info.in_avals, params);
  Batched out = def.batch(values, bdims, params, info);
  PAX_CHECK(out.values.size() == out.bdims.size(), "vmap: the batching rule of ", prim_name(prim),
            " returned mismatched outputs");
  std::vector<Array> result;
  for (size_t i = 0; i < out.values.size(); ++i) {
    if (out.bdims[i] < 0) {
      result.push_back(out.values[i]);
      continue;
    }
    PAX_CHECK(out.bdims[i] < out.values[i].ndim() && out.values[i].dim(out.bdims[i]) == axis_size_,
              "vmap: the batching rule of ", prim_name(prim), " returned ", out.values[i].aval().str(),
              " with batch axis ", out.bdims[i], " (axis size ", axis_size_, ")");
    result.push_back(batched(out.values[i], out.bdims[i]));
  }
  return result;
}

Array move_batch_axis(const Array& x, int64_t from, int64_t to, int64_t size) {
  if (from < 0) {
    Ints shape = x.shape().dims();
    shape.insert(shape.begin() + to, size);
    Ints bdims;
    for (int64_t i = 0; i < x.ndim(); ++i) bdims.push_back(i < to ? i : i + 1);
    return lax::broadcast_in_dim(x, shape, bdims);
  }
  if (from == to) return x;
  Ints perm;
  for (int64_t i = 0; i < x.ndim(); ++i) {
    if (i != from) perm.push_back(i);
  }
  perm.insert(perm.begin() + to, from);
  return lax::transpose(x, perm);
}

std::vector<Array> vmap_flat(const FlatFn& f, std::span<const Array> args,
                             std::span<const std::optional<int64_t>> in_axes, std::span<const int64_t> out_axes,
                             const std::string& axis_name) {
  const std::vector<int64_t> axes(out_axes.begin(), out_axes.end());
  return vmap_flat(
      f, args, in_axes,
      [axes](size_t j, size_t n) -> std::optional<int64_t> {
        PAX_CHECK(axes.size() == 1 || axes.size() == n, "vmap: out_axes has ", axes.size(), " entries for ", n,
                  " outputs");
        return axes.size() == 1 ? axes[0] : axes[j];
      },
      axis_name);
}

std::vector<Array> vmap_flat(const FlatFn& f, std::span<const Array> args,
                             std::span<const std::optional<int64_t>> in_axes, const OutAxisFn& out_axes,
                             const std::string& axis_name) {
  PAX_CHECK(in_axes.size() == args.size(), "vmap: in_axes has ", in_axes.size(), " entries for ", args.size(),
            " arguments");
  int64_t size = -1;
  for (size_t i = 0; i < args.size(); ++i) {
    if (!in_axes[i]) continue;
    PAX_CHECK(args[i].ndim() > 0, "vmap: in_axes ", *in_axes[i], " given for argument ", i, " of rank 0 ",
              args[i].aval().str(), "; scalars cannot be mapped (use no axis for them)");
    int64_t axis = normalize_axis(*in_axes[i], args[i].ndim(), "vmap in_axes");
    int64_t n = args[i].dim(axis);
    PAX_CHECK(size < 0 || n == size, "vmap: inconsistent sizes for the mapped axis: argument ", i, " ",
              args[i].aval().str(), " has size ", n, " at axis ", axis, " but an earlier argument has ", size);
    size = n;
  }
  PAX_CHECK(size >= 0, "vmap: no argument is mapped; give at least one in_axes entry that is not none");
  auto trace = std::make_shared<VmapTrace>(size, axis_name);
  std::vector<Array> results;
  {
    TraceScope scope(trace, /*dynamic=*/false);
    std::vector<Array> inputs;
    for (size_t i = 0; i < args.size(); ++i) {
      if (!in_axes[i]) {
        inputs.push_back(args[i]);
      } else {
        inputs.push_back(trace->batched(args[i], normalize_axis(*in_axes[i], args[i].ndim(), "vmap in_axes")));
      }
    }
    std::vector<Array> outs = f(inputs);
    for (size_t j = 0; j < outs.size(); ++j) {
      auto [v, d] = trace->unpack(outs[j]);
      const std::optional<int64_t> axis = out_axes(j, outs.size());
      if (!axis) {
        // jax.vmap's out_axes=None: the value is the same for every index
        // of the mapped axis (a psum / pmean over it, or no dependence).
        PAX_CHECK(d < 0, "vmap: output ", j, " ", outs[j].aval().str(),
                  " has out_axes None but depends on the "
                  "mapped axis (reduce it over the axis first, e.g. lax::pmean(x, axis_name), or give it an out "
                  "axis)");
        results.push_back(v);
        continue;
      }
      const int64_t rank = outs[j].ndim() + 1;
      results.push_back(move_batch_axis(v, d, normalize_axis(*axis, rank, "vmap out_axes"), size));
    }
  }
  return results;
}

}  // namespace pax
