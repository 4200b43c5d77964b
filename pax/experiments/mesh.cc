// The mesh of an experiment: axis names, the process count it asks for, and
// the check against the processes of the run.
#include "pax/experiments/mesh.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "pax/core/error.h"
#include "pax/dist/mesh.h"
#include "pax/experiments/experiment.h"

namespace pax::experiments {
namespace {

std::string list_text(const std::vector<int64_t>& v, const char* separator = ", ") {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? separator : "") + std::to_string(v[i]);
  return s + "]";
}

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

}  // namespace

std::vector<std::string> mesh_axes(const TrainSettings& t) {
  const std::vector<int64_t>& ici = t.ici_mesh_shape;
  const std::vector<int64_t>& dcn = t.dcn_mesh_shape;
  PAX_CHECK(ici.empty() || dcn.empty() || ici.size() == dcn.size(), "train.ici_mesh_shape ", list_text(ici),
            " and train.dcn_mesh_shape ", list_text(dcn), " must have the same axes (the same length)");
  for (const auto* mesh : {&ici, &dcn}) {
    const char* field = mesh == &ici ? "train.ici_mesh_shape" : "train.dcn_mesh_shape";
    PAX_CHECK(mesh->empty() || mesh->size() == 3 || mesh->size() == 4, field, " ", list_text(*mesh),
              " must have 3 axes [replica, data, mdl] or 4 [stage, replica, data, mdl] ([]: not set)");
    for (int64_t n : *mesh) PAX_CHECK(n >= 1, field, " ", list_text(*mesh), ": every axis must be >= 1");
  }
  const size_t rank = std::max(ici.size(), dcn.size());
  if (rank == 4) return {"stage", "replica", "data", "mdl"};
  return {"replica", "data", "mdl"};
}

std::vector<int64_t> mesh_shape(const TrainSettings& t) {
  std::vector<int64_t> shape(mesh_axes(t).size(), 1);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (!t.ici_mesh_shape.empty()) shape[i] *= t.ici_mesh_shape[i];
    if (!t.dcn_mesh_shape.empty()) shape[i] *= t.dcn_mesh_shape[i];
  }
  return shape;
}

int64_t mesh_processes(const TrainSettings& t) { return product(mesh_shape(t)); }

std::string describe_mesh(const TrainSettings& t) {
  const std::vector<std::string> axes = mesh_axes(t);
  std::string names;
  for (const std::string& a : axes) names += (names.empty() ? "" : ", ") + a;
  const int64_t n = mesh_processes(t);
  return "ICI " + list_text(t.ici_mesh_shape) + " x DCN " + list_text(t.dcn_mesh_shape) + " = " +
         list_text(mesh_shape(t)) + " (" + names + "): " + std::to_string(n) + (n == 1 ? " process" : " processes");
}

int64_t mesh_axis_size(const TrainSettings& t, const std::string& name) {
  const std::vector<std::string> axes = mesh_axes(t);
  const auto it = std::find(axes.begin(), axes.end(), name);
  return it == axes.end() ? 1 : mesh_shape(t)[size_t(it - axes.begin())];
}

void check_mesh(const TrainSettings& t, int64_t process_count) {
  if (t.ici_mesh_shape.empty() && t.dcn_mesh_shape.empty()) return;
  const std::string mesh = describe_mesh(t);
  const size_t data_axis = mesh_axes(t).size() - 2;
  const int64_t wanted = mesh_processes(t);
  if (wanted == process_count) return;
  std::vector<int64_t> fit(mesh_axes(t).size(), 1);
  fit[data_axis] = process_count;
  PAX_FAIL("the mesh ", mesh, " needs ", wanted, wanted == 1 ? " process" : " processes", ", but this run has ",
           process_count, ": run it as mpirun -np ", wanted,
           " paxcc ... (devices are processes here), or set a mesh for this run with --set train.ici_mesh_shape=",
           list_text(fit, ","), " --set train.dcn_mesh_shape=[]");
}

std::string describe_placement(const TrainSettings& t, int64_t max_ranks) {
  if (t.ici_mesh_shape.empty() && t.dcn_mesh_shape.empty()) return "";
  const std::vector<std::string> axes = mesh_axes(t);
  const std::vector<int64_t> ones(axes.size(), 1);
  const std::vector<int64_t>& ici = t.ici_mesh_shape.empty() ? ones : t.ici_mesh_shape;
  const std::vector<int64_t>& dcn = t.dcn_mesh_shape.empty() ? ones : t.dcn_mesh_shape;
  int64_t slice = 1, slices = 1;
  for (size_t k = 0; k < axes.size(); ++k) slice *= ici[k], slices *= dcn[k];
  // Each process a host of its own slice's consecutive ranks, as mpirun
  // places them on one machine.
  auto coordinates = [&](int64_t rank) { return dist::mesh_coordinates(rank, rank % slice, slice, ici, dcn); };
  std::string out;
  for (int64_t s = 0; s < slices && s < max_ranks; ++s) {
    const std::vector<int64_t> first = coordinates(s * slice), last = coordinates(s * slice + slice - 1);
    std::vector<std::string> span, dcn_coord;
    for (size_t k = 0; k < axes.size(); ++k) {
      span.push_back(first[k] == last[k] ? std::to_string(first[k])
                                         : std::to_string(first[k]) + ".." + std::to_string(last[k]));
      dcn_coord.push_back(std::to_string(first[k] / ici[k]));
    }
    out += fmt::format("slice {} (DCN [{}]): ranks {}-{} at [{}]\n", s, fmt::join(dcn_coord, ", "), s * slice,
                       s * slice + slice - 1, fmt::join(span, ", "));
  }
  if (slices > max_ranks) out += fmt::format("... {} slices in all\n", slices);
  const int64_t total = slice * slices;
  for (int64_t rank = 0; rank < total && rank < max_ranks; ++rank) {
    const std::vector<int64_t> c = coordinates(rank);
    std::vector<std::string> parts;
    for (size_t k = 0; k < axes.size(); ++k) parts.push_back(axes[k] + " " + std::to_string(c[k]));
    out += fmt::format("rank {}: {}\n", rank, fmt::join(parts, ", "));
  }
  if (total > max_ranks) out += fmt::format("... {} ranks in all\n", total);
  return out;
}

void init_process_mesh(const TrainSettings& t) {
  if (t.ici_mesh_shape.empty() && t.dcn_mesh_shape.empty()) return;
  const std::vector<std::string> axes = mesh_axes(t);
  const std::vector<int64_t> ones(axes.size(), 1);
  dist::init_mesh(axes, t.ici_mesh_shape.empty() ? ones : t.ici_mesh_shape,
                  t.dcn_mesh_shape.empty() ? ones : t.dcn_mesh_shape);
}

}  // namespace pax::experiments
