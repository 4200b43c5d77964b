// The process mesh: coordinates of the hybrid (ICI x DCN) layout, a process
// group per axis or axis set, and the resolver that binds the array core's
// named-axis collectives to them (see mesh.h).
#include "pax/dist/mesh.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "pax/core/error.h"
#include "pax/interp/process_axis.h"

namespace pax::dist {
namespace {

std::string list_text(const std::vector<int64_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t x : v) p *= x;
  return p;
}

// `flat` unravelled row-major over `shape`.
std::vector<int64_t> unravel(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> out(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    out[k] = flat % shape[k];
    flat /= shape[k];
  }
  return out;
}

// The row-major index of `coords` at `positions` over `shape` at the same positions.
int64_t ravel(const std::vector<int64_t>& coords, const std::vector<int64_t>& shape,
              const std::vector<size_t>& positions) {
  int64_t flat = 0;
  for (size_t k : positions) flat = flat * shape[k] + coords[k];
  return flat;
}

// Throws pax::Error unless ici and dcn have one entry >= 1 per axis each.
void check_shapes(const std::vector<int64_t>& ici, const std::vector<int64_t>& dcn) {
  PAX_CHECK(ici.size() == dcn.size(), "pax::dist mesh: ICI ", list_text(ici), " and DCN ", list_text(dcn),
            " need the same number of axes");
  for (int64_t n : ici) PAX_CHECK(n >= 1, "pax::dist mesh: ICI ", list_text(ici), ": every axis must be >= 1");
  for (int64_t n : dcn) PAX_CHECK(n >= 1, "pax::dist mesh: DCN ", list_text(dcn), ": every axis must be >= 1");
}

// A non-negative integer from environment variable `name`, or -1 when unset.
int64_t env_int(const char* name) {
  const char* env = std::getenv(name);
  if (env == nullptr) return -1;
  char* end = nullptr;
  const long long v = std::strtoll(env, &end, 10);
  PAX_CHECK(end != env && *end == '\0' && v >= 0, "pax::dist mesh: $", name, "=\"", env,
            "\" is not a non-negative integer");
  return int64_t(v);
}

// A process group as the array core's process axis (interp/process_axis.h).
class GroupAxis final : public ProcessAxis {
 public:
  explicit GroupAxis(ProcessGroup& group) : group_(group) {}
  const std::string& name() override { return group_.axis_name(); }
  int64_t size() override { return group_.process_count(); }
  int64_t index() override { return group_.process_index(); }
  Array all_reduce(const Array& x, ::pax::ReduceOp op) override {
    PAX_CHECK(op == ::pax::ReduceOp::sum || op == ::pax::ReduceOp::max || op == ::pax::ReduceOp::min,
              "process axis: reductions are sum, max or min");
    return group_.all_reduce(x, op == ::pax::ReduceOp::sum   ? ReduceOp::sum
                                : op == ::pax::ReduceOp::max ? ReduceOp::max
                                                             : ReduceOp::min);
  }
  Array all_gather(const Array& x, int64_t axis, bool tiled) override { return group_.all_gather(x, axis, tiled); }
  Array reduce_scatter_sum(const Array& x, int64_t axis) override {
    return group_.reduce_scatter(x, ReduceOp::sum, axis);
  }
  Array permute(const Array& x, const std::vector<std::pair<int64_t, int64_t>>& pairs) override {
    return group_.permute(x, pairs);
  }

 private:
  ProcessGroup& group_;
};

// init_mesh's mesh; replaced meshes stay alive (axes handed out may be in use).
std::vector<std::unique_ptr<Mesh>>& initialized_meshes() {
  static std::vector<std::unique_ptr<Mesh>> meshes;
  return meshes;
}

ProcessAxis& world_axis() {
  static GroupAxis axis(process_group());
  return axis;
}

// The resolver: the world's name first, then the job's mesh (if initialized).
ProcessAxis* find_axis(const std::string& name) {
  if (name == process_group().axis_name()) return &world_axis();
  if (!mesh_initialized() || !mesh().has(name)) return nullptr;
  return &mesh().axis(name);
}

std::vector<std::string> bound_names() {
  std::vector<std::string> names{process_group().axis_name()};
  if (!mesh_initialized()) return names;
  for (const std::string& n : mesh().axis_names())
    if (n != names[0]) names.push_back(n);
  for (const std::string& n : mesh().group_names())
    if (n.find(',') != std::string::npos) names.push_back(n);
  return names;
}

// Loading the library binds the world and the mesh's axes by name; a static
// link must keep this object (whole archive).
[[maybe_unused]] const bool kInstalled = (install_process_axes({world_axis, find_axis, bound_names}), true);

}  // namespace

std::vector<int64_t> mesh_coordinates(int64_t rank, int64_t local_rank, int64_t local_size,
                                      const std::vector<int64_t>& ici, const std::vector<int64_t>& dcn) {
  check_shapes(ici, dcn);
  const int64_t slice = product(ici), total = slice * product(dcn);
  PAX_CHECK(rank >= 0 && rank < total, "pax::dist mesh: rank ", rank, " is outside the mesh of ", total, " processes");
  PAX_CHECK(local_size >= 1 && local_rank >= 0 && local_rank < local_size, "pax::dist mesh: local rank ", local_rank,
            " of ", local_size, " is not a position on a host");
  PAX_CHECK(local_size % slice == 0 || slice % local_size == 0, "pax::dist mesh: hosts run ", local_size,
            " processes each, but an ICI slice ", list_text(ici), " has ", slice,
            ": a slice must be whole hosts or fit several times in one (choose ICI so that its product divides or "
            "is a multiple of the processes per host)");
  PAX_CHECK(local_rank == rank % local_size, "pax::dist mesh: rank ", rank, " is process ", local_rank,
            " of its host, but a mesh needs consecutive ranks on each host (rank % ", local_size,
            "); launch with mpirun --map-by slot");
  const std::vector<int64_t> outer = unravel(rank / slice, dcn), inner = unravel(rank % slice, ici);
  std::vector<int64_t> coords(ici.size());
  for (size_t k = 0; k < coords.size(); ++k) coords[k] = outer[k] * ici[k] + inner[k];
  return coords;
}

Mesh::Mesh(std::vector<std::string> names, std::vector<int64_t> ici, std::vector<int64_t> dcn)
    : names_(std::move(names)), ici_(std::move(ici)), dcn_(std::move(dcn)) {
  PAX_CHECK(!names_.empty(), "pax::dist mesh: needs at least one axis name");
  for (size_t k = 0; k < names_.size(); ++k) {
    PAX_CHECK(!names_[k].empty() && names_[k].find(',') == std::string::npos, "pax::dist mesh: axis name '", names_[k],
              "' must be non-empty and without commas");
    for (size_t j = 0; j < k; ++j)
      PAX_CHECK(names_[j] != names_[k], "pax::dist mesh: axis name '", names_[k], "' appears twice");
  }
  PAX_CHECK(ici_.size() == names_.size() && dcn_.size() == names_.size(), "pax::dist mesh: ", names_.size(),
            " axis names but ICI ", list_text(ici_), " and DCN ", list_text(dcn_), " (one entry per axis)");
  ProcessGroup& world = process_group();
  const int64_t count = world.process_count(), rank = world.process_index();
  check_shapes(ici_, dcn_);
  const int64_t slice = product(ici_);
  PAX_CHECK(slice * product(dcn_) == count, "pax::dist mesh: ICI ", list_text(ici_), " x DCN ", list_text(dcn_),
            " has ", slice * product(dcn_), " processes, but the job runs ", count, ": choose shapes whose product is ",
            count, " or run mpirun -np ", slice * product(dcn_));
  // Without OpenMPI's host placement, consecutive ranks form hosts of one slice.
  const int64_t local_size = env_int("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int64_t local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK");
  coords_ = local_size > 0 && local_rank >= 0 ? mesh_coordinates(rank, local_rank, local_size, ici_, dcn_)
                                              : mesh_coordinates(rank, rank % slice, slice, ici_, dcn_);
  shape_.resize(names_.size());
  for (size_t k = 0; k < shape_.size(); ++k) shape_[k] = ici_[k] * dcn_[k];
}

Mesh::Mesh(World) : world_(true) {
  names_ = {"processes"};
  const int64_t count = process_group().process_count();
  ici_ = {count};
  dcn_ = {1};
  shape_ = {count};
  coords_ = {process_group().process_index()};
}

Mesh::~Mesh() = default;

std::string Mesh::str() const {
  std::string names;
  for (const std::string& n : names_) names += (names.empty() ? "" : ", ") + n;
  return list_text(shape_) + " (" + names + ") = ICI " + list_text(ici_) + " x DCN " + list_text(dcn_);
}

std::vector<size_t> Mesh::positions(const std::string& axes) const {
  std::vector<size_t> out;
  size_t start = 0;
  for (;;) {
    const size_t comma = axes.find(',', start);
    const std::string name = axes.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    size_t k = 0;
    while (k < names_.size() && names_[k] != name) ++k;
    if (k == names_.size() || (!out.empty() && k <= out.back())) {
      std::string valid;
      for (const std::string& n : names_) valid += (valid.empty() ? "'" : "', '") + n;
      PAX_FAIL("pax::dist mesh ", str(), ": '", axes,
               "' is not an axis or axes comma-joined in mesh order (axes: ", valid, "')");
    }
    out.push_back(k);
    if (comma == std::string::npos) return out;
    start = comma + 1;
  }
}

bool Mesh::has(const std::string& axes) const {
  try {
    positions(axes);
    return true;
  } catch (const Error&) {
    return false;
  }
}

int64_t Mesh::size(const std::string& axes) const {
  int64_t n = 1;
  for (size_t k : positions(axes)) n *= shape_[k];
  return n;
}

int64_t Mesh::coordinate(const std::string& axes) const { return ravel(coords_, shape_, positions(axes)); }

ProcessGroup& Mesh::group(const std::string& axes) {
  const std::vector<size_t> in = positions(axes);
  if (world_) return process_group();
  auto it = groups_.find(axes);
  if (it != groups_.end()) return *it->second;
  std::vector<size_t> rest;
  for (size_t k = 0; k < names_.size(); ++k)
    if (std::find(in.begin(), in.end(), k) == in.end()) rest.push_back(k);
  // One group per combination of the other coordinates, ranked along `axes`.
  const int color = int(ravel(coords_, shape_, rest)), key = int(ravel(coords_, shape_, in));
  return *groups_.emplace(axes, process_group().split(color, key, axes)).first->second;
}

ProcessAxis& Mesh::axis(const std::string& axes) {
  ProcessGroup& g = group(axes);
  if (world_) return world_axis();
  std::unique_ptr<ProcessAxis>& a = axes_[axes];
  if (!a) a = std::make_unique<GroupAxis>(g);
  return *a;
}

std::vector<std::string> Mesh::group_names() const {
  std::vector<std::string> out;
  for (const auto& [name, group] : groups_) out.push_back(name);
  return out;
}

void init_mesh(const std::vector<std::string>& names, const std::vector<int64_t>& ici,
               const std::vector<int64_t>& dcn) {
  auto& meshes = initialized_meshes();
  if (!meshes.empty()) {
    const Mesh& m = *meshes.back();
    if (m.axis_names() == names && m.ici() == ici && m.dcn() == dcn) return;
    PAX_CHECK(process_group().process_count() == 1, "pax::dist init_mesh: the job's mesh is already ", m.str(),
              "; it is set once per job (its groups are split from every process), so it cannot become ICI ",
              list_text(ici), " x DCN ", list_text(dcn));
  }
  auto mesh = std::make_unique<Mesh>(names, ici, dcn);
  for (const std::string& n : names) mesh->group(n);
  if (mesh->has("replica,data")) mesh->group("replica,data");
  meshes.push_back(std::move(mesh));
}

bool mesh_initialized() { return !initialized_meshes().empty(); }

Mesh& mesh() {
  if (mesh_initialized()) return *initialized_meshes().back();
  static Mesh world{Mesh::World{}};
  return world;
}

DataShard data_shard() {
  if (!mesh_initialized()) return {process_index(), process_count()};
  const Mesh& m = mesh();
  std::vector<size_t> readers;
  for (size_t k = 0; k < m.axis_names().size(); ++k)
    if (m.axis_names()[k] != "mdl" && m.axis_names()[k] != "stage") readers.push_back(k);
  DataShard shard;
  shard.index = ravel(m.coordinates(), m.shape(), readers);
  for (size_t k : readers) shard.count *= m.shape()[k];
  return shard;
}

}  // namespace pax::dist
