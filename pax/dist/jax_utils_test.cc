// The flax.jax_utils equivalents over processes: replicate, unreplicate (with
// its divergence check), bucketed tree psum / pmean / psum_scatter eagerly,
// under jit and (psum_scatter) over a vmap axis, all_gather_stacked /
// local_slice, pad_shard_unpad, broadcast_string, run_on_root and
// run_on_every_process. Run as one
// process and under `mpirun -np 2` and `-np 4`; references are computed from
// every rank's known input.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "pax/api/jit.h"
#include "pax/api/transforms.h"
#include "pax/dist/jax_utils.h"
#include "pax/dist/process_group.h"
#include "pax/ir/jaxpr.h"
#include "pax/ops/lax.h"
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

// A tree to reduce-scatter over n members, of rank-dependent small integers
// (exact in every dtype): dimensions 0 and -1 of every leaf are multiples of
// n (untiled: dimension 0 is n), in three dtypes.
Tree scatter_tree(int r, int64_t n, bool untiled = false) {
  auto leaf = [&](const Shape& s, DType dt, int salt) {
    std::vector<double> v(size_t(s.numel()));
    for (size_t i = 0; i < v.size(); ++i) v[i] = double((int64_t(i) * (salt + 2) + r * 7 + salt) % 11 - 5);
    return array(v, s).astype(dt);
  };
  Tree t = Tree::dict({{"v", leaf(Shape{n, 3 * n}, DType::f32, 1)},
                       {"b", leaf(Shape{n}, DType::f32, 2)},
                       {"n", leaf(Shape{n, 2 * n}, DType::i32, 3)},
                       {"h", leaf(Shape{n, 2, n}, DType::bf16, 4)}});
  if (!untiled) t.set("w", leaf(Shape{2 * n, n}, DType::f32, 5));
  return t;
}

// Bucketed, the tree psum_scatter gives each leaf what lax::psum_scatter of
// that leaf alone gives, whatever the bucket size.
TEST(JaxUtils, TreePsumScatterMatchesEachLeafsOwn) {
  const int64_t p = process_count();
  for (auto [dim, tiled] : std::vector<std::pair<int64_t, bool>>{{0, true}, {-1, true}, {0, false}}) {
    const Tree mine = scatter_tree(process_index(), p, !tiled);
    const Tree want = tree_map([&](const Array& x) { return lax::psum_scatter(x, "processes", dim, tiled); }, mine);
    for (int64_t bucket : {kDefaultBucketBytes, int64_t(8), int64_t(64)}) {
      SCOPED_TRACE(::testing::Message() << "dim " << dim << " tiled " << tiled << " bucket " << bucket);
      expect_tree_close(psum_scatter(mine, "processes", dim, tiled, bucket), want);
    }
  }
}

TEST(JaxUtils, TreePsumScatterUnderJitIsOneCollectivePerBucket) {
  const int64_t p = process_count();
  auto f = [](const Tree& t) { return psum_scatter(t, "processes", 0, true); };
  const Tree mine = scatter_tree(process_index(), p);
  expect_tree_close(jit(f)(mine), f(mine));
  auto jaxpr = make_jaxpr(f)(mine);
  int scatters = 0;
  for (const Eqn& e : jaxpr->eqns) scatters += e.prim == Prim::psum_scatter;
  EXPECT_EQ(scatters, 3) << jaxpr->str();  // f32, i32, bf16
}

// Over a vmap axis of 3 members (in any process count) the packed buckets
// (three f32 leaves in one) give every member its blocks.
TEST(JaxUtils, TreePsumScatterOverAVmapAxis) {
  const int64_t n = 3;
  std::vector<Tree> members;
  for (int m = 0; m < n; ++m) members.push_back(scatter_tree(m, n));
  const Tree stacked = tree_map_n([](std::span<const Array> xs) { return stack({xs.begin(), xs.end()}); }, members);
  for (int64_t dim : {0, 1, -1}) {
    SCOPED_TRACE(::testing::Message() << "dim " << dim);
    auto tree_version = vmap([&](const Tree& t) { return psum_scatter(t, "m", dim, true); }, {.axis_name = "m"});
    auto per_leaf = vmap(
        [&](const Tree& t) {
          return tree_map([&](const Array& x) { return lax::psum_scatter(x, "m", dim, true); }, t);
        },
        {.axis_name = "m"});
    if (dim == 1) {  // "b" has no dimension 1
      EXPECT_PAX_ERROR(tree_version(stacked), "dist::psum_scatter");
      continue;
    }
    expect_tree_close(tree_version(stacked), per_leaf(stacked));
  }
}

TEST(JaxUtils, TreePsumScatterErrorsNameTheLeaf) {
  const int64_t p = process_count();
  const std::string axis = " the size " + std::to_string(p) + " of axis 'processes'";
  EXPECT_PAX_ERROR(psum_scatter(Tree::dict({{"a", zeros({2})}, {"s", zeros({p, 3})}}), "processes", 1),
                   "leaf 'a' f32[2] has no dimension 1 (valid: -1 to 0)");
  EXPECT_PAX_ERROR(psum_scatter(Tree::dict({{"x", zeros({p})}, {"s", scalar(1.0f)}}), "processes"),
                   "leaf 's' is f32[]; scattering needs a dimension");
  EXPECT_PAX_ERROR(psum_scatter(Tree::dict({{"x", zeros({p + 1, 2})}}), "processes"),
                   "leaf 'x' f32[" + std::to_string(p + 1) + ",2] has size " + std::to_string(p + 1) +
                       " in dimension 0; untiled scattering needs exactly" + axis);
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

// 5 rows (not a multiple of 2 processes) of 3 columns: row i is 10 * i + column.
Array five_rows() {
  std::vector<float> rows;
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 3; ++j) rows.push_back(float(10 * i + j));
  return array(rows, Shape{5, 3});
}

TEST(JaxUtils, PadShardUnpad) {
  const int p = process_count(), me = process_index();
  const Tree batch = Tree::dict({{"x", five_rows()}});
  int64_t shard_rows = -1;
  PaddedFn row_sums = [&](const std::vector<Tree>& a) {
    shard_rows = a[1]["x"].leaf().dim(0);
    return Tree::dict({{"sum", sum(a[1]["x"].leaf(), {1}) * a[0].leaf()}, {"rank", full({shard_rows}, me)}});
  };
  // static_argnums defaults to flax's (0,): the scale is passed as it is.
  const Tree out = pad_shard_unpad(row_sums)({scalar(2.0f), batch});
  EXPECT_EQ(shard_rows, (5 + p - 1) / p);
  std::vector<double> want;
  for (int i = 0; i < 5; ++i) want.push_back(2.0 * (30 * i + 3));
  EXPECT_TRUE(all_close(out["sum"].leaf(), want));
  // Row i was computed by the process whose contiguous shard holds it.
  std::vector<double> owner;
  for (int i = 0; i < 5; ++i) owner.push_back(double(i / shard_rows));
  EXPECT_TRUE(all_close(out["rank"].leaf(), owner));
  // A per-call min_device_batch pads further (the rows come back unpadded);
  // static_return hands back fn's own result.
  EXPECT_TRUE(all_close(pad_shard_unpad(row_sums)({scalar(2.0f), batch}, /*min_device_batch=*/8)["sum"].leaf(), want));
  EXPECT_EQ(shard_rows, 8);
  const Tree local = pad_shard_unpad(row_sums, {.static_return = true})({scalar(1.0f), batch}, 8);
  EXPECT_EQ(local["sum"].leaf().dim(0), 8);
  // The next call without it pads only as far as the batch needs.
  pad_shard_unpad(row_sums)({scalar(1.0f), batch});
  EXPECT_EQ(shard_rows, (5 + p - 1) / p);
}

TEST(JaxUtils, PadShardUnpadStaticArgnums) {
  const int p = process_count();
  // Arguments 0 and 2 static: a bias of another leading size and a matrix
  // pass as they are; arguments 1 and 3, two batches of 5 rows, are sharded.
  std::vector<size_t> seen;
  PaddedFn fn = [&](const std::vector<Tree>& a) {
    seen.clear();
    for (const Tree& t : a) seen.push_back(size_t(tree_leaves(t)[0].dim(0)));
    Array y = matmul(a[1].leaf(), a[2].leaf()) + a[3].leaf();  // (rows, 3) @ (3, 2) + (rows, 2)
    return Tree(y + a[0].leaf());                              // + (2,)
  };
  const Array bias = array(std::vector<float>{100.0f, 200.0f}, Shape{2});
  const Array w = array(std::vector<float>{1, 0, 0, 1, 0, 0}, Shape{3, 2});
  const Array extra = ones({5, 2});
  const Tree out = pad_shard_unpad(fn, {.static_argnums = {0, 2}})({bias, five_rows(), w, extra});
  const size_t per = size_t((5 + p - 1) / p);
  EXPECT_EQ(seen, (std::vector<size_t>{2, per, 3, per}));
  std::vector<double> want;
  for (int i = 0; i < 5; ++i) {
    want.push_back(10.0 * i + 0 + 1 + 100);
    want.push_back(10.0 * i + 1 + 1 + 200);
  }
  EXPECT_TRUE(all_close(out.leaf(), want));
  // No static arguments: every argument is a batch.
  PaddedFn first = [](const std::vector<Tree>& a) { return a[0]; };
  EXPECT_TRUE(all_close(pad_shard_unpad(first, {.static_argnums = {}})({five_rows()}).leaf(), five_rows()));
}

TEST(JaxUtils, PadShardUnpadErrors) {
  PaddedFn first = [](const std::vector<Tree>& a) { return a[1]; };
  const Tree batch = Tree::dict({{"x", five_rows()}});
  EXPECT_PAX_ERROR(pad_shard_unpad(first)({Tree(), Tree::dict({{"x", zeros({4})}, {"y", zeros({3})}})}),
                   "every padded leaf needs the same leading size; got argument 1's f32[3] beside argument 1's f32[4]");
  EXPECT_PAX_ERROR(pad_shard_unpad(first)({Tree(), batch, zeros({2})}), "argument 2's f32[2] beside argument 1's");
  EXPECT_PAX_ERROR(pad_shard_unpad(first)({Tree(), scalar(1.0f)}), "argument 1's f32[] has no batch axis");
  EXPECT_PAX_ERROR(pad_shard_unpad(first)({batch}), "no argument outside static_argnums holds an array");
  EXPECT_PAX_ERROR(pad_shard_unpad(first, {.static_argnums = {0, 2}})({Tree(), batch}),
                   "static_argnums entry 2 is out of range for 2 arguments");
  EXPECT_PAX_ERROR(pad_shard_unpad(first, {.static_argnums = {-1}}), "argument positions (>= 0), got -1");
  EXPECT_PAX_ERROR(pad_shard_unpad(first)({Tree(), batch}, -1), "min_device_batch must be >= 0, got -1");
  PaddedFn reduced = [](const std::vector<Tree>& a) { return Tree(sum(a[1]["x"].leaf())); };
  EXPECT_PAX_ERROR(pad_shard_unpad(reduced)({Tree(), batch}), "use static_return");
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

TEST(JaxUtils, RunOnEveryProcessSharesTheLowestFailure) {
  const int me = process_index(), count = process_count();
  int ran = 0;
  run_on_every_process([&] { ++ran; }, "a test phase");
  EXPECT_EQ(ran, 1);
  // The last process fails (alone, or with process 0 on several): every
  // process throws the lowest-ranked failure's message.
  EXPECT_PAX_ERROR(run_on_every_process(
                       [&] {
                         if (me == count - 1) PAX_FAIL("last process: its blocks are unreadable");
                         if (me == 0) PAX_FAIL("process 0: its blocks are unreadable");
                       },
                       "a test phase"),
                   count == 1 ? "last process" : "process 0: its blocks");
  run_on_every_process([] {}, "a test phase");  // the group is still usable
}

}  // namespace
}  // namespace pax::dist
