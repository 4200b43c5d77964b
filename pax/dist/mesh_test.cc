// The process mesh: the hybrid layout's coordinate arithmetic (pure, any
// process count), the checks of init_mesh, and, under `mpirun -np 4`
// (tests/CMakeLists.txt, one launch per mesh since a job's mesh is set
// once), collectives over mesh axes compared with references computed from
// every rank's gathered coordinates.
#include "pax/dist/mesh.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "pax/api/jit.h"
#include "pax/interp/interpreter.h"
#include "pax/ops/lax.h"
#include "pax/ops/numpy.h"
#include "pax/testing/testing.h"

namespace pax::dist {
namespace {

using pax::testing::all_close;
using Coords = std::vector<int64_t>;

// Every rank's coordinates from the arithmetic alone, consecutive hosts of `local_size`.
std::vector<Coords> layout(int64_t n, int64_t local_size, const Coords& ici, const Coords& dcn) {
  std::vector<Coords> out;
  for (int64_t r = 0; r < n; ++r) out.push_back(mesh_coordinates(r, r % local_size, local_size, ici, dcn));
  return out;
}

TEST(MeshLayout, IciOnlyIsRowMajor) {
  EXPECT_EQ(layout(4, 4, {2, 2}, {1, 1}), (std::vector<Coords>{{0, 0}, {0, 1}, {1, 0}, {1, 1}}));
  EXPECT_EQ(layout(6, 6, {1, 3, 2}, {1, 1, 1})[5], (Coords{0, 2, 1}));
}

// Pax's hybrid mesh: coordinate k = dcn_coord_k * ici_k + ici_coord_k, with
// consecutive ranks filling one slice (host).
TEST(MeshLayout, HybridPlacesSlicesAlongTheDcnAxes) {
  // DCN over replica, ICI over data: slices are rows.
  EXPECT_EQ(layout(4, 2, {1, 2}, {2, 1}), (std::vector<Coords>{{0, 0}, {0, 1}, {1, 0}, {1, 1}}));
  // DCN over data, ICI over replica: slices are columns, so consecutive
  // ranks differ in replica, not data (a plain row-major layout would not).
  EXPECT_EQ(layout(4, 2, {2, 1}, {1, 2}), (std::vector<Coords>{{0, 0}, {1, 0}, {0, 1}, {1, 1}}));
  // Both at once: ICI [1, 2, 2] within each of DCN [2, 1, 1] slices.
  EXPECT_EQ(mesh_coordinates(6, 2, 4, {1, 2, 2}, {2, 1, 1}), (Coords{1, 1, 0}));
  EXPECT_EQ(mesh_coordinates(5, 1, 4, {1, 2, 2}, {2, 1, 1}), (Coords{1, 0, 1}));
  // ICI [2, 1] tiled by DCN [2, 2]: rank 7 is slice 3 = dcn (1, 1), position 1 = ici (1, 0).
  EXPECT_EQ(mesh_coordinates(7, 1, 2, {2, 1}, {2, 2}), (Coords{3, 1}));
  // A host holding two slices, and slices of two hosts, lay out the same.
  EXPECT_EQ(layout(8, 4, {1, 2}, {4, 1}), layout(8, 2, {1, 2}, {4, 1}));
  EXPECT_EQ(layout(8, 2, {2, 2}, {2, 1}), layout(8, 4, {2, 2}, {2, 1}));
}

TEST(MeshLayout, EveryCoordinateOnce) {
  const std::vector<Coords> all = layout(12, 6, {1, 3, 2}, {2, 1, 1});
  std::vector<Coords> sorted = all;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end());
  for (const Coords& c : all) EXPECT_TRUE(c[0] < 2 && c[1] < 3 && c[2] < 2);
}

TEST(MeshLayout, BadPlacementsThrow) {
  EXPECT_PAX_ERROR(mesh_coordinates(1, 1, 3, {2, 1}, {1, 2}), "hosts run 3 processes each, but an ICI slice");
  EXPECT_PAX_ERROR(mesh_coordinates(1, 0, 2, {2, 1}, {1, 2}), "needs consecutive ranks on each host");
  EXPECT_PAX_ERROR(mesh_coordinates(4, 0, 2, {2, 1}, {1, 2}), "rank 4 is outside the mesh of 4 processes");
  EXPECT_PAX_ERROR(mesh_coordinates(0, 0, 1, {2}, {1, 2}), "need the same number of axes");
}

TEST(Mesh, ShapeMustMatchTheProcessCount) {
  const int64_t n = process_count();
  EXPECT_PAX_ERROR(Mesh({"replica", "data"}, {1, n}, {2, 1}),
                   "has " + std::to_string(2 * n) + " processes, but the job runs " + std::to_string(n) +
                       ": choose shapes whose product is " + std::to_string(n));
  EXPECT_PAX_ERROR(Mesh({"replica", "data"}, {1, n}, {1}), "one entry per axis");
  EXPECT_PAX_ERROR(Mesh({"data", "data"}, {1, n}, {1, 1}), "'data' appears twice");
  EXPECT_PAX_ERROR(Mesh({"replica", "data"}, {0, n}, {1, 1}), "every axis must be >= 1");
}

TEST(Mesh, NamesAndSizes) {
  const int64_t n = process_count();
  Mesh m({"replica", "data", "mdl"}, {1, n, 1}, {1, 1, 1});
  EXPECT_EQ(m.shape(), (Coords{1, n, 1}));
  EXPECT_EQ(m.size("data"), n);
  EXPECT_EQ(m.size("replica,data"), n);
  EXPECT_EQ(m.coordinate("data"), process_index());
  EXPECT_TRUE(m.has("replica,mdl"));
  EXPECT_FALSE(m.has("data,replica"));
  EXPECT_PAX_ERROR(m.size("data,replica"), "not an axis or axes comma-joined in mesh order (axes: 'replica', 'data'");
  EXPECT_PAX_ERROR(m.size("batch"), "'batch' is not an axis");
}

// One process: no init_mesh means the world mesh; init_mesh binds the names.
TEST(Mesh, SingleProcessMesh) {
  if (process_count() != 1) GTEST_SKIP() << "one process";
  EXPECT_EQ(mesh().axis_names(), (std::vector<std::string>{"processes"}));
  EXPECT_EQ(data_shard().count, 1);
  EXPECT_PAX_ERROR(lax::psum(scalar(1.0f), "data"), "psum: unbound axis name 'data'");
  init_mesh({"replica", "data", "mdl"}, {1, 1, 1}, {1, 1, 1});
  EXPECT_TRUE(mesh_initialized());
  EXPECT_TRUE(all_close(lax::psum(scalar(2.0f), "data"), {2}));
  EXPECT_TRUE(all_close(lax::psum(scalar(2.0f), "replica,data"), {2}));
  EXPECT_EQ(axis_size("mdl"), 1);
  EXPECT_PAX_ERROR(lax::psum(scalar(1.0f), "batch"),
                   "process axis (now named 'processes', 'replica', 'data', 'mdl' or 'replica,data')");
  // One process shares no group: a new shape replaces the mesh.
  init_mesh({"stage", "replica", "data", "mdl"}, {1, 1, 1, 1}, {1, 1, 1, 1});
  EXPECT_EQ(mesh().axis_names().size(), 4u);
}

// ---------------------------------------------------------------------------
// Under mpirun -np 4: one launch per test below.

// Every rank's coordinates, gathered over the world (not computed here).
std::vector<Coords> gathered_coordinates() {
  const Coords& mine = mesh().coordinates();
  std::vector<double> v(mine.begin(), mine.end());
  // [processes, axes]
  const std::vector<double> all = process_group().all_gather(array(v, Shape{int64_t(v.size())})).to_vector<double>();
  std::vector<Coords> out;
  for (size_t r = 0; r < size_t(process_count()); ++r)
    out.emplace_back(all.begin() + long(r * v.size()), all.begin() + long((r + 1) * v.size()));
  return out;
}

// The world ranks in the group of `axes` (mesh positions) of world rank `me`,
// in the group's order: those equal to it off `axes`, ordered row-major on them.
std::vector<int> group_of(const std::vector<Coords>& coords, int me, const std::vector<size_t>& axes) {
  std::vector<int> members;
  for (int r = 0; r < int(coords.size()); ++r) {
    bool same = true;
    for (size_t k = 0; k < coords[size_t(r)].size(); ++k)
      if (std::find(axes.begin(), axes.end(), k) == axes.end() && coords[size_t(r)][k] != coords[size_t(me)][k])
        same = false;
    if (same) members.push_back(r);
  }
  std::sort(members.begin(), members.end(), [&](int a, int b) {
    for (size_t k : axes)
      if (coords[size_t(a)][k] != coords[size_t(b)][k]) return coords[size_t(a)][k] < coords[size_t(b)][k];
    return false;
  });
  return members;
}

// A value per world rank whose sums identify the ranks summed.
double rank_value(int r) { return double(1 << r); }

// psum, pmax, axis_index and all_gather over `name` (mesh positions `axes`),
// eagerly and inside jit, against the gathered coordinates.
void check_axis(const std::string& name, const std::vector<size_t>& axes, const std::vector<Coords>& coords) {
  SCOPED_TRACE(name);
  const int me = process_index();
  const std::vector<int> members = group_of(coords, me, axes);
  double sum = 0, hi = 0;
  std::vector<double> order;
  for (int r : members) {
    sum += rank_value(r);
    hi = std::max(hi, rank_value(r));
    order.push_back(rank_value(r));
  }
  const int64_t position = std::find(members.begin(), members.end(), me) - members.begin();
  Array x = scalar(rank_value(me)).astype(DType::f32);
  EXPECT_TRUE(all_close(lax::psum(x, name), {sum}));
  EXPECT_TRUE(all_close(lax::pmax(x, name), {hi}));
  EXPECT_EQ(lax::axis_index(name).item<int32_t>(), position);
  EXPECT_EQ(axis_size(name), int64_t(members.size()));
  EXPECT_EQ(mesh().size(name), int64_t(members.size()));
  EXPECT_TRUE(all_close(lax::all_gather(x, name), order));
  auto f = [name](const Array& v) { return lax::psum(v, name) * 10.0 + lax::axis_index(name).astype(DType::f32); };
  EXPECT_TRUE(all_close(jit(f)(x), {sum * 10 + double(position)}));
}

// Every axis and every pair in mesh order (callers skip unless 4 processes run).
void check_mesh_collectives(const std::vector<std::string>& names, const Coords& ici, const Coords& dcn) {
  init_mesh(names, ici, dcn);
  init_mesh(names, ici, dcn);  // the same shape again: nothing happens
  const std::vector<Coords> coords = gathered_coordinates();
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(coords[size_t(r)], mesh_coordinates(r, r, 4, ici, dcn)) << "rank " << r;  // one host, consecutive
  for (size_t a = 0; a < names.size(); ++a) {
    check_axis(names[a], {a}, coords);
    for (size_t b = a + 1; b < names.size(); ++b) check_axis(names[a] + "," + names[b], {a, b}, coords);
  }
  // The world stays bound, and other names are listed when unbound.
  EXPECT_TRUE(all_close(lax::psum(scalar(1.0f), "processes"), {4}));
  EXPECT_PAX_ERROR(lax::psum(scalar(1.0f), "batch"), "now named 'processes', '" + names[0] + "'");
  EXPECT_PAX_ERROR(init_mesh(names, dcn, ici), "the job's mesh is already");
}

TEST(MeshMpi, Grid2x2) {
  if (process_count() != 4) GTEST_SKIP() << "run under mpirun -np 4";
  check_mesh_collectives({"replica", "data"}, {2, 2}, {1, 1});
  // Replica and data both read data: 4 shards, in row-major order.
  EXPECT_EQ(data_shard().index, process_index());
  EXPECT_EQ(data_shard().count, 4);
}

TEST(MeshMpi, HybridDcnReplica) {
  if (process_count() != 4) GTEST_SKIP() << "run under mpirun -np 4";
  check_mesh_collectives({"replica", "data"}, {1, 2}, {2, 1});
}

// Slices along data: consecutive ranks differ in replica.
TEST(MeshMpi, HybridDcnData) {
  if (process_count() != 4) GTEST_SKIP() << "run under mpirun -np 4";
  check_mesh_collectives({"replica", "data"}, {2, 1}, {1, 2});
  EXPECT_EQ(mesh().coordinates(), (Coords{process_index() % 2, process_index() / 2}));
}

// Processes that differ only in mdl read the same shard.
TEST(MeshMpi, ModelAxisSharesInputs) {
  if (process_count() != 4) GTEST_SKIP() << "run under mpirun -np 4";
  check_mesh_collectives({"replica", "data", "mdl"}, {1, 1, 2}, {1, 2, 1});
  EXPECT_EQ(data_shard().count, 2);
  EXPECT_EQ(data_shard().index, process_index() / 2);
}

// World rank 3 never calls its "data" collective: rank 2, its partner on that
// axis, times out naming it by group and world rank; ranks 0 and 1, in the
// other data group, are unaffected, and the world group stays usable.
TEST(MeshTimeout, SubgroupNamesTheMissingRank) {
  if (process_count() != 4) GTEST_SKIP() << "run under mpirun -np 4";
  init_mesh({"replica", "data"}, {2, 2}, {1, 1});
  process_group().set_timeout_seconds(2);
  const int me = process_index();
  if (me < 2) EXPECT_TRUE(all_close(lax::psum(scalar(1.0f), "data"), {2}));
  if (me == 2) {
    std::string message;
    try {
      lax::psum(scalar(1.0f), "data");
      ADD_FAILURE() << "expected a timeout";
    } catch (const Error& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("all_reduce over 'data': timed out after 2 s: rank 1 (world rank 3) of 2 never arrived"),
              std::string::npos)
        << message;
    EXPECT_PAX_ERROR(mesh().group("data").barrier(), "an earlier all_reduce timed out");
  }
  process_group().barrier(/*timeout_seconds=*/30);
  process_group().set_timeout_seconds(60);  // bounds MPI_Finalize at exit
}

}  // namespace
}  // namespace pax::dist
