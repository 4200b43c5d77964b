// The mesh in the train settings: axis names, the process count it asks for,
// and the check that refuses a mismatch or a model / stage axis with the
// command or the mesh to use instead.
#include "pax/experiments/mesh.h"

#include <gtest/gtest.h>

#include "pax/dist/mesh.h"
#include "pax/experiments/experiment.h"
#include "pax/interp/interpreter.h"
#include "pax/testing/testing.h"

namespace pax::experiments {
namespace {

TrainSettings settings(std::vector<int64_t> ici, std::vector<int64_t> dcn = {}) {
  TrainSettings t;
  t.ici_mesh_shape = std::move(ici);
  t.dcn_mesh_shape = std::move(dcn);
  return t;
}

TEST(Mesh, ProcessesAreTheProductOfBothMeshes) {
  EXPECT_EQ(mesh_processes(settings({})), 1);
  EXPECT_EQ(mesh_processes(settings({1, 4, 1})), 4);
  EXPECT_EQ(mesh_processes(settings({1, 64, 1}, {2, 1, 1})), 128);
  EXPECT_EQ(mesh_processes(settings({}, {2, 1, 1})), 2);
  EXPECT_EQ(describe_mesh(settings({1, 64, 1}, {2, 1, 1})),
            "ICI [1, 64, 1] x DCN [2, 1, 1] = [2, 64, 1] (replica, data, mdl): 128 processes");
  EXPECT_EQ(mesh_axes(settings({4, 1, 4, 4})), (std::vector<std::string>{"stage", "replica", "data", "mdl"}));
}

TEST(Mesh, BadShapesAreErrors) {
  EXPECT_PAX_ERROR(mesh_axes(settings({1, 4})), "must have 3 axes [replica, data, mdl] or 4");
  EXPECT_PAX_ERROR(mesh_axes(settings({1, 0, 1})), "every axis must be >= 1");
  EXPECT_PAX_ERROR(mesh_axes(settings({1, 4, 1}, {2, 1, 1, 1})), "must have the same axes");
}

TEST(Mesh, AMismatchNamesTheProcessCountToUse) {
  EXPECT_NO_THROW(check_mesh(settings({}), 3));  // not set: any count
  EXPECT_NO_THROW(check_mesh(settings({1, 4, 1}), 4));
  EXPECT_NO_THROW(check_mesh(settings({1, 2, 1}, {2, 1, 1}), 4));
  EXPECT_PAX_ERROR(check_mesh(settings({1, 4, 1}), 1),
                   "needs 4 processes, but this run has 1: run it as mpirun -np 4 paxcc");
  EXPECT_PAX_ERROR(check_mesh(settings({1, 4, 1}), 1),
                   "--set train.ici_mesh_shape=[1,1,1] --set train.dcn_mesh_shape=[]");
  EXPECT_PAX_ERROR(check_mesh(settings({1, 64, 1}, {2, 1, 1}), 64), "needs 128 processes, but this run has 64");
}

// The mdl axis (tensor parallelism) and the stage axis (pipeline
// parallelism) run with the processes they ask for.
TEST(Mesh, ModelAndStageAxesRun) {
  EXPECT_NO_THROW(check_mesh(settings({1, 16, 2}), 32));
  EXPECT_NO_THROW(check_mesh(settings({4, 1, 4, 4}), 64));
  EXPECT_NO_THROW(check_mesh(settings({2, 1, 1, 1}, {1, 2, 1, 1}), 4));
  EXPECT_PAX_ERROR(check_mesh(settings({4, 1, 4, 4}), 16), "needs 64 processes, but this run has 16");
}

// The run's mesh becomes the process mesh: its axes are bound names of the
// collectives (one process here, so every axis has size 1); an unset DCN
// shape is all ones, and no mesh leaves the world mesh.
TEST(Mesh, InitProcessMeshBindsTheAxes) {
  init_process_mesh(settings({}));
  EXPECT_FALSE(dist::mesh_initialized());
  init_process_mesh(settings({1, 1, 1}));
  EXPECT_EQ(dist::mesh().axis_names(), (std::vector<std::string>{"replica", "data", "mdl"}));
  EXPECT_EQ(dist::mesh().dcn(), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(axis_size("data"), 1);
  EXPECT_EQ(axis_size("replica,data"), 1);
  EXPECT_EQ(dist::data_shard().count, 1);
}

}  // namespace
}  // namespace pax::experiments
