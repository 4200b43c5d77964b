// Collectives over a named axis: psum, pmax, pmin, all_gather, psum_scatter,
// ppermute, axis_index.
// Under vmap(axis_name=...) the axis is the batch (the seed's BatchNorm-under-
// vmap example); bind routes a collective to the vmap level of that name.
// Outside any such level the process axis (interp/process_axis.h: the
// process group of pax/dist, named "processes" by default) runs them; any
// other name is unbound and the primitive fails with a clear error.
#include "pax/core/error.h"
#include "pax/interp/process_axis.h"
#include "pax/interp/vmap.h"
#include "pax/ops/lax.h"
#include "pax/prims/dtype_rules.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

// The process axis that `p` names (the world, a mesh axis or comma-joined
// mesh axes); otherwise the name is unbound.
ProcessAxis& named_process_axis(const Params& p, const char* op) { return bound_process_axis(p.s("axis_name"), op); }

// ---------------------------------------------------------------------------
// shape rules

template <Prim P>
std::vector<AVal> reduce_rule(std::span<const AVal> in, const Params& p) {
  p.s("axis_name");
  check_accepts(P, P == Prim::psum ? Accepts::numeric : Accepts::any, in[0]);
  return {in[0]};
}

std::vector<AVal> all_gather_rule(std::span<const AVal> in, const Params& p) {
  p.s("axis_name");
  const int64_t size = p.i("axis_size");
  AVal out = in[0];
  const int64_t axis = normalize_axis(p.i("axis"), in[0].shape.rank() + 1, "all_gather");
  if (p.b("tiled")) {
    PAX_CHECK(axis < in[0].shape.rank(), "all_gather: tiled gathering needs axis < rank of ", in[0].str());
    out.shape[axis] *= size;
  } else {
    out.shape.dims().insert(out.shape.dims().begin() + axis, size);
  }
  return {out};
}

// psum_scatter: the sum over the axis, of which member i keeps block i of
// dimension scatter_dimension (tiled: a block of size / axis_size; untiled:
// the dimension has the axis size and member i keeps index i, removed).
std::vector<AVal> psum_scatter_rule(std::span<const AVal> in, const Params& p) {
  const std::string& name = p.s("axis_name");
  const int64_t size = p.i("axis_size");
  check_accepts(Prim::psum_scatter, Accepts::numeric, in[0]);
  PAX_CHECK(size > 0, "psum_scatter: axis '", name, "' has no members (size ", size, ") to scatter over");
  PAX_CHECK(in[0].shape.rank() > 0, "psum_scatter: needs an operand of rank >= 1 to scatter, got ", in[0].str());
  const int64_t dim = normalize_axis(p.i("scatter_dimension"), in[0].shape.rank(), "psum_scatter");
  AVal out = in[0];
  if (p.b("tiled")) {
    PAX_CHECK(in[0].shape[dim] % size == 0, "psum_scatter: dimension ", dim, " of ", in[0].str(), " has size ",
              in[0].shape[dim], ", not a multiple of the size ", size, " of axis '", name,
              "' (tiled scattering splits it into equal blocks)");
    out.shape[dim] /= size;
  } else {
    PAX_CHECK(in[0].shape[dim] == size, "psum_scatter: dimension ", dim, " of ", in[0].str(), " has size ",
              in[0].shape[dim], ", not the size ", size, " of axis '", name,
              "' (untiled scattering gives member i index i; pass tiled=true to split it into blocks)");
    out.shape.dims().erase(out.shape.dims().begin() + dim);
  }
  return {out};
}

// The (source, destination) pairs of a ppermute, checked against the axis
// size: indices in range, each at most once on each side.
std::vector<std::pair<int64_t, int64_t>> permutation(const Params& p) {
  const Ints& sources = p.ints("sources");
  const Ints& destinations = p.ints("destinations");
  const int64_t size = p.i("axis_size");
  PAX_CHECK(sources.size() == destinations.size(), "ppermute: ", sources.size(), " sources but ", destinations.size(),
            " destinations");
  std::vector<std::pair<int64_t, int64_t>> pairs;
  std::vector<bool> sent(size_t(std::max<int64_t>(size, 0))), received(sent.size());
  for (size_t k = 0; k < sources.size(); ++k) {
    const int64_t s = sources[k], d = destinations[k];
    PAX_CHECK(s >= 0 && s < size && d >= 0 && d < size, "ppermute: the pair (", s, ", ", d,
              ") names a member outside the ", size, " of axis '", p.s("axis_name"), "'");
    PAX_CHECK(!sent[size_t(s)] && !received[size_t(d)], "ppermute: member ", sent[size_t(s)] ? s : d,
              " appears twice among the ", sent[size_t(s)] ? "sources" : "destinations",
              " (a permutation names each at most once)");
    sent[size_t(s)] = received[size_t(d)] = true;
    pairs.emplace_back(s, d);
  }
  return pairs;
}

std::vector<AVal> ppermute_rule(std::span<const AVal> in, const Params& p) {
  permutation(p);
  return {in[0]};
}

std::vector<AVal> axis_index_rule(std::span<const AVal>, const Params& p) {
  p.s("axis_name");
  return {AVal{Shape{}, DType::i32, false}};
}

// Eager collectives over the process axis.
template <ReduceOp Op>
std::vector<Array> reduce_impl(std::span<const Array> in, const Params& p) {
  ProcessAxis& axis = named_process_axis(p, Op == ReduceOp::sum ? "psum" : Op == ReduceOp::max ? "pmax" : "pmin");
  return {axis.all_reduce(in[0], Op)};
}

std::vector<Array> ppermute_impl(std::span<const Array> in, const Params& p) {
  ProcessAxis& axis = named_process_axis(p, "ppermute");
  PAX_CHECK(p.i("axis_size") == axis.size(), "ppermute: axis_size ", p.i("axis_size"),
            " differs from the process count ", axis.size(), " of axis '", p.s("axis_name"), "'");
  return {axis.permute(in[0], permutation(p))};
}

std::vector<Array> axis_index_impl(std::span<const Array>, const Params& p) {
  return {scalar(double(named_process_axis(p, "axis_index").index()), DType::i32)};
}

std::vector<Array> all_gather_impl(std::span<const Array> in, const Params& p) {
  ProcessAxis& axis = named_process_axis(p, "all_gather");
  PAX_CHECK(p.i("axis_size") == axis.size(), "all_gather: axis_size ", p.i("axis_size"),
            " differs from the process count ", axis.size(), " of axis '", p.s("axis_name"), "'");
  return {axis.all_gather(in[0], p.i("axis"), p.b("tiled"))};
}

// The process group's reduce-scatter keeps this process's block; untiled,
// that block (of size 1) is squeezed.
std::vector<Array> psum_scatter_impl(std::span<const Array> in, const Params& p) {
  ProcessAxis& axis = named_process_axis(p, "psum_scatter");
  PAX_CHECK(p.i("axis_size") == axis.size(), "psum_scatter: axis_size ", p.i("axis_size"),
            " differs from the process count ", axis.size(), " of axis '", p.s("axis_name"), "'");
  const int64_t dim = normalize_axis(p.i("scatter_dimension"), in[0].ndim(), "psum_scatter");
  Array block = axis.reduce_scatter_sum(in[0], dim);
  return {p.b("tiled") ? block : lax::squeeze(block, {dim})};
}

// ---------------------------------------------------------------------------
// batching: over this level's axis the collective reduces the batch axis;
// over another name it is applied per batch element.

template <Prim P>
Batched reduce_batch(std::span<const Array> values, std::span<const int64_t> bdims, const Params& p,
                     const BatchInfo& info) {
  const Array& x = values[0];
  const int64_t d = bdims[0];
  if (p.s("axis_name") != info.axis_name) return {{bind1(P, {x}, p)}, {d}};
  if (d < 0) {  // the same value on every member
    if (P != Prim::psum) return {{x}, {-1}};
    return {{lax::mul(x, lax::broadcast_in_dim(scalar(double(info.axis_size), x.dtype()), x.shape().dims(), {}))},
            {-1}};
  }
  if (P == Prim::psum) return {{lax::reduce_sum(x, {d})}, {-1}};
  if (P == Prim::pmax) return {{lax::reduce_max(x, {d})}, {-1}};
  return {{lax::reduce_min(x, {d})}, {-1}};
}

// Over this level's axis the batch dimension becomes the gathered one; over
// another name the gather applies per element, its axis counted past the
// batch dimension.
Batched all_gather_batch(std::span<const Array> values, std::span<const int64_t> bdims, const Params& p,
                         const BatchInfo& info) {
  const Array& x = values[0];
  const int64_t d = bdims[0];
  const int64_t rank = x.ndim() - (d >= 0 ? 1 : 0);
  const int64_t axis = normalize_axis(p.i("axis"), rank + 1, "all_gather");  // as the shape rule
  if (p.s("axis_name") != info.axis_name) {
    if (d < 0) return {{bind1(Prim::all_gather, {x}, p)}, {-1}};
    Params inner = p;
    const bool before = p.b("tiled") ? axis < d : axis <= d;  // the gathered axis lands before the batch one
    inner.set("axis", before ? axis : axis + 1);
    return {{bind1(Prim::all_gather, {x}, inner)}, {before && !p.b("tiled") ? d + 1 : d}};
  }
  Array stacked = move_batch_axis(x, bdims[0], axis, info.axis_size);
  if (p.b("tiled")) {
    PAX_CHECK(axis < rank, "all_gather: tiled gathering needs axis < rank (", rank, "), got ", axis);
    Ints shape = stacked.shape().dims();
    shape[size_t(axis)] *= shape[size_t(axis) + 1];
    shape.erase(shape.begin() + axis + 1);
    stacked = lax::reshape(stacked, shape);
  }
  return {{stacked}, {-1}};
}

// Over this level's axis: the sum over the batch dimension, whose block i
// member i gets (the blocks become the batch dimension, where the scatter
// dimension was). Over another name: per element, the scatter dimension
// counted past the batch dimension.
Batched psum_scatter_batch(std::span<const Array> values, std::span<const int64_t> bdims, const Params& p,
                           const BatchInfo& info) {
  const Array& x = values[0];
  const int64_t d = bdims[0];
  const bool tiled = p.b("tiled");
  const int64_t rank = x.ndim() - (d >= 0 ? 1 : 0);
  const int64_t dim = normalize_axis(p.i("scatter_dimension"), rank, "psum_scatter");
  if (p.s("axis_name") != info.axis_name) {
    if (d < 0) return {{bind1(Prim::psum_scatter, {x}, p)}, {-1}};
    Params inner = p;
    const int64_t scatter = dim + (dim >= d ? 1 : 0);  // in x's dimensions, never the batch one
    inner.set("scatter_dimension", scatter);
    return {{bind1(Prim::psum_scatter, {x}, inner)}, {!tiled && scatter < d ? d - 1 : d}};
  }
  // The shape rule has checked dimension dim against the axis size.
  Array total =
      d >= 0 ? lax::reduce_sum(x, {d})
             : lax::mul(x, lax::broadcast_in_dim(scalar(double(info.axis_size), x.dtype()), x.shape().dims(), {}));
  if (!tiled) return {{total}, {dim}};  // dimension dim has the axis size: member i reads index i
  Ints blocks = total.shape().dims();   // dim of size axis_size * block -> (axis_size, block)
  blocks[size_t(dim)] /= info.axis_size;
  blocks.insert(blocks.begin() + dim, info.axis_size);
  return {{lax::reshape(total, blocks)}, {dim}};
}

// Over this level's axis member d takes the batch slice of the member that
// sends to it (zeros when none does); over another name, per element.
Batched ppermute_batch(std::span<const Array> values, std::span<const int64_t> bdims, const Params& p,
                       const BatchInfo& info) {
  Array x = values[0];
  int64_t d = bdims[0];
  if (p.s("axis_name") != info.axis_name) return {{bind1(Prim::ppermute, {x}, p)}, {d}};
  if (d < 0) {  // the same value on every member
    Ints dims = x.shape().dims();
    dims.insert(dims.begin(), info.axis_size);
    Ints kept(size_t(x.ndim()));
    for (size_t k = 0; k < kept.size(); ++k) kept[k] = int64_t(k) + 1;
    x = lax::broadcast_in_dim(x, dims, kept);
    d = 0;
  }
  std::vector<int64_t> source_of(size_t(info.axis_size), -1);
  for (const auto& [source, destination] : permutation(p)) source_of[size_t(destination)] = source;
  std::vector<Array> members;
  for (int64_t m = 0; m < info.axis_size; ++m) {
    const int64_t s = source_of[size_t(m)];
    Ints start(size_t(x.ndim()), 0), limit = x.shape().dims();
    start[size_t(d)] = std::max<int64_t>(s, 0), limit[size_t(d)] = std::max<int64_t>(s, 0) + 1;
    Array slice = lax::slice(x, start, limit);
    // A member no one sends to gets zeros (not its own value times zero,
    // which would keep a non-finite value's NaN).
    if (s < 0) slice = lax::broadcast_in_dim(scalar(0.0, x.dtype()), slice.shape().dims(), {});
    members.push_back(slice);
  }
  return {{lax::concatenate(members, d)}, {d}};
}

Batched axis_index_batch(std::span<const Array>, std::span<const int64_t>, const Params& p, const BatchInfo& info) {
  if (p.s("axis_name") != info.axis_name) return {{bind1(Prim::axis_index, {}, p)}, {-1}};
  return {{lax::iota(DType::i32, {info.axis_size}, 0)}, {0}};
}

// ---------------------------------------------------------------------------
// derivatives

// d psum_j(x_j) / d x_i = 1 for every output j: the cotangent is psum(ct).
std::vector<Array> psum_vjp(std::span<const Array>, std::span<const Array>, std::span<const Array> cts, const Params& p,
                            const CotangentMask& needs) {
  return {bind1(Prim::psum, {cts[0]}, p)};
}
std::vector<Array> psum_jvp(std::span<const Array>, std::span<const Array> t, std::span<const Array>, const Params& p) {
  return {bind1(Prim::psum, {t[0]}, p)};
}

// pmax / pmin: the gradient flows to the members holding the extreme.
std::vector<Array> pext_vjp(std::span<const Array> in, std::span<const Array> out, std::span<const Array> cts,
                            const Params& p, const CotangentMask& needs) {
  Array mask = lax::convert_element_type(lax::eq(in[0], out[0]), in[0].dtype());
  return {lax::mul(bind1(Prim::psum, {cts[0]}, p), mask)};
}
std::vector<Array> pext_jvp(std::span<const Array> in, std::span<const Array> t, std::span<const Array> out,
                            const Params& p) {
  // The tangent of the member that holds the extreme (the first, if tied).
  Array mask = lax::convert_element_type(lax::eq(in[0], out[0]), in[0].dtype());
  Array count = bind1(Prim::psum, {mask}, p);
  return {lax::div(bind1(Prim::psum, {lax::mul(t[0], mask)}, p), count)};
}

// all_gather and psum_scatter are each other's transposes: a member's
// cotangent of all_gather is its block of the members' summed cotangents
// (psum_scatter, moving one block per member), and psum_scatter's is every
// member's cotangent gathered into its blocks.
// `other` of the pair applied to ct, with p's axis, tiling and size, along
// dimension `dim` (its parameter `dim_param`).
Array transpose_collective(Prim other, const Array& ct, const Params& p, const char* dim_param, int64_t dim) {
  if (!ct.defined()) return Array();
  return bind1(
      other, {ct},
      Params{
          {"axis_name", p.s("axis_name")}, {dim_param, dim}, {"tiled", p.b("tiled")}, {"axis_size", p.i("axis_size")}});
}
std::vector<Array> all_gather_vjp(std::span<const Array> in, std::span<const Array>, std::span<const Array> cts,
                                  const Params& p, const CotangentMask& needs) {
  const int64_t axis = normalize_axis(p.i("axis"), in[0].ndim() + (p.b("tiled") ? 0 : 1), "all_gather");
  return {transpose_collective(Prim::psum_scatter, cts[0], p, "scatter_dimension", axis)};
}
std::vector<Array> psum_scatter_vjp(std::span<const Array> in, std::span<const Array>, std::span<const Array> cts,
                                    const Params& p, const CotangentMask& needs) {
  const int64_t dim = normalize_axis(p.i("scatter_dimension"), in[0].ndim(), "psum_scatter");
  return {transpose_collective(Prim::all_gather, cts[0], p, "axis", dim)};
}

// ppermute's transpose sends every cotangent back to the member it came from.
std::vector<Array> ppermute_vjp(std::span<const Array>, std::span<const Array>, std::span<const Array> cts,
                                const Params& p, const CotangentMask&) {
  if (!cts[0].defined()) return {Array()};
  Params inverse = p;
  inverse.set("sources", p.ints("destinations"));
  inverse.set("destinations", p.ints("sources"));
  return {bind1(Prim::ppermute, {cts[0]}, inverse)};
}

// all_gather and psum_scatter are linear: the tangent goes through the same collective.
template <Prim P>
std::vector<Array> linear_jvp(std::span<const Array>, std::span<const Array> t, std::span<const Array>,
                              const Params& p) {
  return {t[0].defined() ? bind1(P, {t[0]}, p) : Array()};
}

}  // namespace

void register_collective_prims(PrimTable& t) {
  auto def = [&](Prim p, ShapeRule rule, ImplRule impl, BatchRule batch) {
    t[size_t(p)] = PrimDef{rule};
    t[size_t(p)].impl = impl;
    t[size_t(p)].batch = batch;
  };
  def(Prim::psum, reduce_rule<Prim::psum>, reduce_impl<ReduceOp::sum>, reduce_batch<Prim::psum>);
  def(Prim::pmax, reduce_rule<Prim::pmax>, reduce_impl<ReduceOp::max>, reduce_batch<Prim::pmax>);
  def(Prim::pmin, reduce_rule<Prim::pmin>, reduce_impl<ReduceOp::min>, reduce_batch<Prim::pmin>);
  def(Prim::all_gather, all_gather_rule, all_gather_impl, all_gather_batch);
  def(Prim::psum_scatter, psum_scatter_rule, psum_scatter_impl, psum_scatter_batch);
  def(Prim::ppermute, ppermute_rule, ppermute_impl, ppermute_batch);
  def(Prim::axis_index, axis_index_rule, axis_index_impl, axis_index_batch);
  t[size_t(Prim::psum)].vjp = psum_vjp;
  t[size_t(Prim::psum)].jvp = psum_jvp;
  t[size_t(Prim::pmax)].vjp = pext_vjp;
  t[size_t(Prim::pmax)].jvp = pext_jvp;
  t[size_t(Prim::pmin)].vjp = pext_vjp;
  t[size_t(Prim::pmin)].jvp = pext_jvp;
  t[size_t(Prim::all_gather)].vjp = all_gather_vjp;
  t[size_t(Prim::all_gather)].jvp = linear_jvp<Prim::all_gather>;
  t[size_t(Prim::psum_scatter)].vjp = psum_scatter_vjp;
  t[size_t(Prim::psum_scatter)].jvp = linear_jvp<Prim::psum_scatter>;
  t[size_t(Prim::ppermute)].vjp = ppermute_vjp;
  t[size_t(Prim::ppermute)].jvp = linear_jvp<Prim::ppermute>;
}

}  // namespace pax
