// Indexing primitives: gather and scatter_add with XLA dimension numbers (no
// batching dims; the index vector is the last axis of `indices`). Shape rules
// validate the dimension numbers; the CPU kernels are the backend's
// (kernels_indexing.cc).
#include <algorithm>
#include <string>

#include "pax/core/error.h"
#include "pax/prims/indexing_params.h"
#include "pax/prims/registry.h"

namespace pax {
namespace {

bool contains(const Ints& v, int64_t x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Checks that `dims` (named `what`) is strictly increasing within [0, bound).
void check_sorted_dims(const std::string& ctx, const char* what, const Ints& dims, int64_t bound,
                       const char* bound_name) {
  for (size_t i = 0; i < dims.size(); ++i) {
    PAX_CHECK(dims[i] >= 0 && dims[i] < bound, ctx, what, " ", ints_str(dims), " has entry ", dims[i], " outside [0, ",
              bound, ") (the ", bound_name, ")");
    PAX_CHECK(i == 0 || dims[i] > dims[i - 1], ctx, what, " ", ints_str(dims),
              " must be sorted in increasing order without repeats");
  }
}

// Checks an index-vector map: one distinct operand axis per component.
void check_index_map(const std::string& ctx, const char* what, const Ints& map, int64_t k, int64_t rank) {
  PAX_CHECK(int64_t(map.size()) == k, ctx, what, " ", ints_str(map), " has ", map.size(),
            " entries but the index vector (last axis of indices) has length ", k);
  for (size_t i = 0; i < map.size(); ++i) {
    PAX_CHECK(map[i] >= 0 && map[i] < rank, ctx, what, " ", ints_str(map), " has entry ", map[i], " outside [0, ", rank,
              ") (the operand axes)");
    PAX_CHECK(std::count(map.begin(), map.end(), map[i]) == 1, ctx, what, " ", ints_str(map), " repeats operand axis ",
              map[i]);
  }
}

void check_indices(const std::string& ctx, const AVal& indices) {
  PAX_CHECK(is_integer(indices.dtype), ctx, "indices must have an integer dtype (u8, u32, i32, i64), got ",
            dtype_name(indices.dtype));
  PAX_CHECK(indices.shape.rank() >= 1, ctx,
            "indices needs rank >= 1: its last axis is the index vector (shape (..., K))");
}

// ---------------------------------------------------------------------------
// gather

std::vector<AVal> gather_rule(std::span<const AVal> in, const Params& p) {
  const AVal& x = in[0];
  const AVal& idx = in[1];
  const std::string ctx = "gather: operand " + x.str() + ", indices " + idx.str() + ": ";
  const GatherSpec s = gather_spec(p);
  check_indices(ctx, idx);
  const int64_t rank = x.shape.rank();
  const int64_t k = idx.shape[idx.shape.rank() - 1];

  PAX_CHECK(int64_t(s.slice_sizes.size()) == rank, ctx, "slice_sizes ", ints_str(s.slice_sizes),
            " needs one entry per operand axis (", rank, ")");
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t sz = s.slice_sizes[size_t(d)];
    PAX_CHECK(sz >= 0 && sz <= x.shape[d], ctx, "slice_sizes ", ints_str(s.slice_sizes), " entry ", d, " is ", sz,
              "; it must lie in [0, ", x.shape[d], "]");
  }
  check_index_map(ctx, "start_index_map", s.start_index_map, k, rank);
  check_sorted_dims(ctx, "collapsed_slice_dims", s.collapsed_slice_dims, rank, "operand axes");
  for (int64_t d : s.collapsed_slice_dims) {
    PAX_CHECK(s.slice_sizes[size_t(d)] == 1, ctx, "collapsed_slice_dims ", ints_str(s.collapsed_slice_dims),
              " includes axis ", d, " whose slice size is ", s.slice_sizes[size_t(d)], " (must be 1)");
  }
  const int64_t num_offset = rank - int64_t(s.collapsed_slice_dims.size());
  PAX_CHECK(int64_t(s.offset_dims.size()) == num_offset, ctx, "offset_dims ", ints_str(s.offset_dims), " has ",
            s.offset_dims.size(), " entries but ", num_offset, " operand axes are not collapsed (collapsed_slice_dims ",
            ints_str(s.collapsed_slice_dims), ")");
  const int64_t out_rank = idx.shape.rank() - 1 + num_offset;
  check_sorted_dims(ctx, "offset_dims", s.offset_dims, out_rank, "output axes");

  std::vector<int64_t> out;
  size_t next_slice = 0, next_batch = 0;
  for (int64_t q = 0; q < out_rank; ++q) {
    if (contains(s.offset_dims, q)) {
      while (contains(s.collapsed_slice_dims, int64_t(next_slice))) ++next_slice;
      out.push_back(s.slice_sizes[next_slice++]);
    } else {
      out.push_back(idx.shape[int64_t(next_batch++)]);
    }
  }
  return {AVal{Shape(out), x.dtype, x.weak_type}};
}

// ---------------------------------------------------------------------------
// scatter_add

std::vector<AVal> scatter_add_rule(std::span<const AVal> in, const Params& p) {
  const AVal& x = in[0];
  const AVal& idx = in[1];
  const AVal& upd = in[2];
  const std::string ctx =
      "scatter_add: operand " + x.str() + ", indices " + idx.str() + ", updates " + upd.str() + ": ";
  const ScatterSpec s = scatter_spec(p);
  PAX_CHECK(x.dtype != DType::bool_, ctx, "operand must have a numeric dtype, got bool");
  PAX_CHECK(upd.dtype == x.dtype, ctx, "updates must have the operand's dtype ", dtype_name(x.dtype), ", got ",
            dtype_name(upd.dtype));
  check_indices(ctx, idx);
  const int64_t rank = x.shape.rank();
  const int64_t k = idx.shape[idx.shape.rank() - 1];
  const int64_t nbatch = idx.shape.rank() - 1;

  check_index_map(ctx, "scatter_dims_to_operand_dims", s.scatter_dims_to_operand_dims, k, rank);
  check_sorted_dims(ctx, "inserted_window_dims", s.inserted_window_dims, rank, "operand axes");
  const int64_t num_window = rank - int64_t(s.inserted_window_dims.size());
  PAX_CHECK(int64_t(s.update_window_dims.size()) == num_window, ctx, "update_window_dims ",
            ints_str(s.update_window_dims), " has ", s.update_window_dims.size(), " entries but ", num_window,
            " operand axes are not inserted (inserted_window_dims ", ints_str(s.inserted_window_dims), ")");
  PAX_CHECK(upd.shape.rank() == nbatch + num_window, ctx, "updates must have rank ", nbatch + num_window, " (", nbatch,
            " batch axes of indices + ", num_window, " window axes)");
  check_sorted_dims(ctx, "update_window_dims", s.update_window_dims, upd.shape.rank(), "updates axes");

  int64_t next_batch = 0, next_window = 0;
  for (int64_t q = 0; q < upd.shape.rank(); ++q) {
    if (contains(s.update_window_dims, q)) {
      while (contains(s.inserted_window_dims, next_window)) ++next_window;
      PAX_CHECK(upd.shape[q] <= x.shape[next_window], ctx, "window axis ", q, " of updates has size ", upd.shape[q],
                " but operand axis ", next_window, " only ", x.shape[next_window]);
      ++next_window;
    } else {
      PAX_CHECK(upd.shape[q] == idx.shape[next_batch], ctx, "batch axis ", q, " of updates has size ", upd.shape[q],
                " but must match indices axis ", next_batch, " (", idx.shape[next_batch], ")");
      ++next_batch;
    }
  }
  return {x};
}

}  // namespace

GatherSpec gather_spec(const Params& p) {
  GatherSpec s;
  s.offset_dims = p.ints("offset_dims");
  s.collapsed_slice_dims = p.ints("collapsed_slice_dims");
  s.start_index_map = p.ints("start_index_map");
  s.slice_sizes = p.ints("slice_sizes");
  const std::string mode = p.has("mode") ? p.s("mode") : "clip";
  PAX_CHECK(mode == "clip" || mode == "fill", "gather: mode must be \"clip\" or \"fill\", got \"", mode, "\"");
  s.fill = mode == "fill";
  s.fill_value = p.has("fill_value") ? p.f("fill_value") : 0.0;
  return s;
}

ScatterSpec scatter_spec(const Params& p) {
  return ScatterSpec{p.ints("update_window_dims"), p.ints("inserted_window_dims"),
                     p.ints("scatter_dims_to_operand_dims")};
}

void register_indexing_prims(PrimTable& table) {
  table[size_t(Prim::gather)] = PrimDef{gather_rule};
  table[size_t(Prim::scatter_add)] = PrimDef{scatter_add_rule};
}

}  // namespace pax
