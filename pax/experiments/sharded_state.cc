// Sharding plan of a run and the gather of whole arrays from blocks.
#include "pax/experiments/sharded_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>
#include <map>

#include "pax/core/error.h"
#include "pax/experiments/experiment.h"
#include "pax/experiments/mesh.h"
#include "pax/dist/mesh.h"
#include "pax/ops/lax.h"
#include "pax/ops/numpy.h"
#include "pax/train/import_params.h"

namespace pax::experiments {

namespace {

// The plan of the mesh's process at `coordinate(axis)` on each axis, data
// parallel over `process_axis` unless the mesh's axes name the batch's.
ShardingPlan plan_of(const TrainSettings& t, const std::string& process_axis,
                     const std::function<int64_t(const char*)>& coordinate) {
  ShardingPlan plan{.batch_axis = process_axis};
  const int64_t data = mesh_axis_size(t, "data"), replica = mesh_axis_size(t, "replica"),
                mdl = mesh_axis_size(t, "mdl"), stage = mesh_axis_size(t, "stage");
  if (data <= 1 && mdl <= 1 && stage <= 1) return plan;
  PAX_CHECK(t.fsdp_min_elements >= 1, "train.fsdp_min_elements must be >= 1, got ", t.fsdp_min_elements);
  if (replica > 1 || mdl > 1 || stage > 1) {
    plan.batch_axis = "replica,data";  // processes that differ in mdl or stage alone read one batch
    if (replica > 1) plan.replica_axis = "replica";
  }
  if (data > 1)
    plan.fsdp = {.axis = "data", .size = data, .index = coordinate("data"), .min_elements = t.fsdp_min_elements};
  if (mdl > 1) plan.tp = {.axis = "mdl", .size = mdl, .index = coordinate("mdl")};
  if (stage > 1) plan.stage = {.axis = "stage", .size = stage, .index = coordinate("stage")};
  return plan;
}

}  // namespace

ShardingPlan plan_sharding(const TrainSettings& t, int64_t process_count, const std::string& process_axis) {
  if (process_count <= 1) return {};
  dist::Mesh& mesh = dist::mesh();
  for (const char* axis : {"data", "mdl", "stage"}) {
    const int64_t size = mesh_axis_size(t, axis);
    PAX_CHECK(size == 1 || (mesh.has(axis) && mesh.size(axis) == size), "the mesh ", describe_mesh(t),
              " is not the job's mesh (init_process_mesh first)");
  }
  return plan_of(t, process_axis, [&mesh](const char* axis) { return mesh.coordinate(axis); });
}

ShardingPlan first_process_plan(const TrainSettings& t) {
  return plan_of(t, "processes", [](const char*) { return int64_t(0); });
}

bool splits_over(const dist::ShardSpecs& specs, const std::string& axis) {
  return std::any_of(specs.begin(), specs.end(), [&](const auto& entry) {
    const dist::ShardSpec& s = entry.second;
    return s.outer_axis == axis || std::find(s.axes.begin(), s.axes.end(), axis) != s.axes.end();
  });
}

Tree gather_whole(const Tree& tree, const dist::ShardSpecs& specs) {
  const std::vector<std::string> paths = tree_paths(tree);
  std::vector<Array> leaves = tree_leaves(tree);
  for (size_t i = 0; i < leaves.size(); ++i) {
    const auto it = specs.find(paths[i]);
    if (it == specs.end() || it->second.replicated()) continue;
    const dist::ShardSpec& spec = it->second;
    PAX_CHECK(leaves[i].shape() == spec.local() && !spec.axes.empty(), "gather_whole: ", paths[i], " is ",
              leaves[i].aval().str(), ", not a block ", spec.local(), " of ", spec.global, " split over named axes");
    for (auto axis = spec.axes.rbegin(); axis != spec.axes.rend(); ++axis)
      leaves[i] = lax::all_gather(leaves[i], *axis, spec.dim, /*tiled=*/true);
    if (spec.outer_dim >= 0) leaves[i] = lax::all_gather(leaves[i], spec.outer_axis, spec.outer_dim, /*tiled=*/true);
  }
  return tree_unflatten(tree_structure(tree), leaves);
}

Array block_of(const Array& whole, const dist::ShardSpec& spec) {
  if (spec.replicated()) return whole;
  spec.check("block_of");
  PAX_CHECK(whole.shape() == spec.global, "block_of: an array of ", whole.shape(), " for a split of ", spec.global);
  Array x = whole;
  if (spec.outer_dim >= 0) {
    const int64_t size = spec.global[spec.outer_dim] / spec.outer_count;
    x = slice_along(x, spec.outer_dim, spec.outer_index * size, (spec.outer_index + 1) * size);
  }
  return slice_along(x, spec.dim, spec.begin(), spec.end());
}

Tree params_blocks_from_checkpoint(const std::string& path, const Tree& local, const dist::ShardSpecs& specs) {
  const std::vector<std::string> paths = tree_paths(local);
  std::map<std::string, Shape> whole_shapes;
  for (const std::string& p : paths)
    if (auto it = specs.find("params/" + p); it != specs.end()) whole_shapes[p] = it->second.global;
  const Tree whole = train::params_from_checkpoint(path, local, whole_shapes);
  std::vector<Array> leaves = tree_leaves(whole);
  for (size_t i = 0; i < leaves.size(); ++i)
    if (auto it = specs.find("params/" + paths[i]); it != specs.end()) leaves[i] = block_of(leaves[i], it->second);
  return tree_unflatten(tree_structure(local), leaves);
}

std::string describe_split(const dist::ShardSpec& spec) {
  if (spec.replicated()) return "replicated";
  std::string axes;
  for (const std::string& a : spec.axes) axes += (axes.empty() ? "" : ",") + a;
  const std::string inner =
      fmt::format("dim {} in {} blocks{}", spec.dim, spec.count, axes.empty() ? "" : " over " + axes);
  if (spec.outer_dim < 0) return inner;
  return fmt::format("dim {} in {} blocks over {}, then {}", spec.outer_dim, spec.outer_count, spec.outer_axis, inner);
}

std::vector<train::ReportParameter> parameter_table(const Tree& params, const dist::ShardSpecs& specs) {
  const std::vector<std::string> paths = tree_paths(params);
  const std::vector<Array> leaves = tree_leaves(params);
  std::vector<train::ReportParameter> rows;
  rows.reserve(leaves.size());
  for (size_t i = 0; i < leaves.size(); ++i) {
    auto it = specs.find("params/" + paths[i]);
    const Shape shape = it == specs.end() ? leaves[i].shape() : it->second.global;
    rows.push_back({paths[i], shape.str(), dtype_short_name(leaves[i].dtype()), shape.numel(),
                    it == specs.end() ? "replicated" : describe_split(it->second)});
  }
  return rows;
}

}  // namespace pax::experiments
