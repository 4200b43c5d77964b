// The flax.jax_utils equivalents over processes: replicate, unreplicate (with
// its divergence check), bucketed tree psum / pmean eagerly and under jit,
// all_gather_stacked / local_slice, pad_shard_unpad, broadcast_string and
// run_on_root. Run as one process and under `mpirun -np 2`; references are
// computed from every rank's known input.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "pax/api/jit.h"
#include "pax/api/transforms.h"
#include "pax/dist/jax_utils.h"
#include "pax/dist/process_group.h"
#include "pax/ir/jaxpr.h"
#include "pax/ops/numpy.h"
#include "pax/testing/testing.h"

namespace pax::dist {
namespace {

using pax::testing::all_close;

// A tree whose values depend on the rank: f32 leaves of several shapes, an
// i32 leaf and a bf16 leaf (three dtype buckets).
Tree rank_tree(int r) {
  return Tree::dict({{"w", array(std::vector<float>{1.0f + float(r), -2.0f, 0.5f * float(r), 4.0f}, Shape{2, 2})},
                     {"b", array(std::vector<float>{float(r) - 1.0f}, Shape{1})},
                     {"s", scalar(3.0f * float(r + 1))},
                     {"n", array(std::vector<int32_t>{r, 2 * r + 1}, Shape{2})},
                     {"h", array(std::vector<float>{float(r), 1.0f, 2.0f}, Shape{3}).astype(DType::bf16)}});
}

// The elementwise sum of rank_tree over every process, computed locally.
Tree expected_sum() {
  Tree total = rank_tree(0);
  for (int r = 1; r < process_count(); ++r)
    total = tree_map([](const Array& a, const Array& b) { return (a + b).astype(a.dtype()); }, total, rank_tree(r));
  return total;
}

void expect_tree_close(const Tree& got, const Tree& want, double tol = 0) {
  check_same_structure(got, want, "test");
  const auto g = tree_leaves(got), w = tree_leaves(want);
  const auto paths = tree_paths(want);
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_EQ(g[i].dtype(), w[i].dtype()) << paths[i];
    EXPECT_EQ(g[i].shape(), w[i].shape()) << paths[i];
    EXPECT_TRUE(all_close(g[i].astype(DType::f64), w[i].astype(DType::f64).to_vector<double>(), tol, tol)) << paths[i];
  }
}

TEST(JaxUtils, ReplicateGivesRootValues) {
  const int me = process_index();
  expect_tree_close(replicate(rank_tree(me)), rank_tree(0));
  const int last = process_count() - 1;
  expect_tree_close(replicate(rank_tree(me), last), rank_tree(last));
  EXPECT_PAX_ERROR(replicate(rank_tree(me), process_count()), "is not a process in");
}

TEST(JaxUtils, UnreplicateChecksReplicas) {
  const Tree same = replicate(rank_tree(process_index()));
  expect_tree_close(unreplicate(same), rank_tree(0));
  if (process_count() == 1) return;
  // Only leaf 'b' differs on the other processes.
  Tree diverged = rank_tree(0);
  if (process_index() > 0) diverged.set("b", array(std::vector<float>{7.0f}, Shape{1}));
  EXPECT_PAX_ERROR(unreplicate(diverged), "leaf 'b' on process(es) 1");
}

TEST(JaxUtils, TreePsumAndPmean) {
  const Tree mine = rank_tree(process_index());
  expect_tree_close(psum(mine, "processes"), expected_sum());
  const Tree mean = pmean(tree_map([](const Array& x) { return x.astype(DType::f32); }, mine), "processes");
  const Tree want =
      tree_map([](const Array& x) { return (x.astype(DType::f32) / double(process_count())); }, expected_sum());
  expect_tree_close(mean, want, 1e-6);
  // Buckets of at most 8 bytes: every leaf its own collective, same result.
  expect_tree_close(psum(mine, "processes", 8), expected_sum());
  EXPECT_PAX_ERROR(psum(mine, "processes", 0), "bucket_bytes must be positive");
}

TEST(JaxUtils, TreePsumUnderJitIsOneCollectivePerBucket) {
  auto f = [](const Tree& t) { return psum(t, "processes"); };
  const Tree mine = rank_tree(process_index());
  expect_tree_close(jit(f)(mine), expected_sum());
  // Three dtypes, three psums in the program.
  auto jaxpr = make_jaxpr(f)(mine);
  int psums = 0;
  for (const Eqn& e : jaxpr->eqns) psums += e.prim == Prim::psum;
  EXPECT_EQ(psums, 3) << jaxpr->str();
}

TEST(JaxUtils, GatherStackedAndLocalSlice) {
  const int p = process_count(), me = process_index();
  const Tree stacked = all_gather_stacked(rank_tree(me));
  for (int r = 0; r < p; ++r) {
    const Array w = stacked["w"].leaf();
    EXPECT_EQ(w.shape(), (Shape{p, 2, 2}));
    EXPECT_TRUE(all_close(squeeze(slice_along(w, 0, r, r + 1), {0}), rank_tree(r)["w"].leaf()));
  }
  expect_tree_close(local_slice(stacked), rank_tree(me));
  EXPECT_PAX_ERROR(local_slice(Tree::dict({{"x", zeros({p + 1})}})), "no leading process axis");
}

TEST(JaxUtils, PadShardUnpad) {
  const int p = process_count(), me = process_index();
  // 5 rows: not a multiple of 2 processes; rows are 10 * i + column.
  std::vector<float> rows;
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j) rows.push_back(float(10 * i + j));
  const Tree batch = Tree::dict({{"x", array(rows, Shape{5, 3})}});
  int64_t shard_rows = -1;
  ShardFn row_sums = [&](const Tree& scale, const Tree& shard) {
    shard_rows = shard["x"].leaf().dim(0);
    return Tree::dict({{"sum", sum(shard["x"].leaf(), {1}) * scale.leaf()}, {"rank", full({shard_rows}, me)}});
  };
  const Tree out = pad_shard_unpad(row_sums)(scalar(2.0f), batch);
  EXPECT_EQ(shard_rows, (5 + p - 1) / p);
  std::vector<double> want;
  for (int i = 0; i < 5; ++i) want.push_back(2.0 * (30 * i + 3));
  EXPECT_TRUE(all_close(out["sum"].leaf(), want));
  // Row i was computed by the process whose contiguous shard holds it.
  std::vector<double> owner;
  for (int i = 0; i < 5; ++i) owner.push_back(double(i / shard_rows));
  EXPECT_TRUE(all_close(out["rank"].leaf(), owner));
  // min_process_batch pads further; static_return hands back fn's own result.
  const Tree local = pad_shard_unpad(row_sums, /*static_return=*/true, /*min_process_batch=*/4)(scalar(1.0f), batch);
  const int64_t padded = std::max<int64_t>((5 + p - 1) / p, 4);
  EXPECT_EQ(shard_rows, padded);
  EXPECT_EQ(local["sum"].leaf().dim(0), padded);
  EXPECT_PAX_ERROR(pad_shard_unpad(row_sums)(scalar(1.0f), Tree::dict({{"x", zeros({4})}, {"y", zeros({3})}})),
                   "same leading size");
  ShardFn reduced = [](const Tree&, const Tree& shard) { return Tree(sum(shard["x"].leaf())); };
  EXPECT_PAX_ERROR(pad_shard_unpad(reduced)(Tree(), batch), "use static_return");
}

TEST(JaxUtils, BroadcastStringAndRunOnRoot) {
  const int me = process_index();
  EXPECT_EQ(broadcast_string(me == 0 ? "from the root" : "ignored"), "from the root");
  EXPECT_EQ(broadcast_string(me == 0 ? "" : "ignored"), "");
  int ran = 0;
  run_on_root([&] { ++ran; });
  EXPECT_EQ(ran, me == 0 ? 1 : 0);
  // A failure on the root is every process's failure, with its message.
  EXPECT_PAX_ERROR(run_on_root([] { PAX_FAIL("the checkpoint is unreadable"); }), "the checkpoint is unreadable");
  run_on_root([] {});  // the group is still usable
}

}  // namespace
}  // namespace pax::dist
