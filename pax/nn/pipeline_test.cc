// Pipeline parallelism in the layers: the stage blocks init holds and their
// errors, and a pipelined Repeat of Transformers whose repetitions split over
// a named axis (a vmap axis standing in for the processes of "stage"): every
// member computes the whole stack's output on the whole batch, microbatch by
// microbatch, and its gradients are the whole stack's (its own layers of the
// stacks, all of the rest). With a second vmap axis standing in for "mdl",
// the stages' layers are split by heads and widths too; with one for
// "data", by fsdp, whose blocks a stage gathers once per step (a traced
// program over two process axes shows where). Each with the stage shift
// delayed by an iteration too.
#include "pax/nn/pipeline.h"

#include <gtest/gtest.h>

#include "pax/api/transforms.h"
#include "pax/interp/process_axis.h"
#include "pax/ir/jaxpr.h"
#include "pax/prims/control_flow.h"
#include "pax/nn/attention.h"
#include "pax/nn/layer.h"
#include "pax/nn/transformers.h"
#include "pax/ops/numpy.h"
#include "pax/ops/random.h"
#include "pax/testing/blocks.h"
#include "pax/testing/testing.h"
#include "pax/train/common_utils.h"

namespace pax::nn {
namespace {

PipelineOptions stages(int64_t size, int64_t index = 0) {
  return PipelineOptions{.axis = "stage", .size = size, .index = index};
}

TEST(Pipeline, StageBlocksAndTheirErrors) {
  const WeightHParams w{.shape = Shape{4, 8, 2}, .repeat_prefix_axes = 1, .mdl_dim = 1, .stage_dim = 0};
  EXPECT_EQ(stage_held_spec(w, stages(2), "w").shape, (Shape{2, 8, 2}));
  EXPECT_FALSE(stage_held_spec(w, stages(2), "w").stage_dim.has_value());
  EXPECT_EQ(stage_held_spec(w, PipelineOptions{}, "w").shape, (Shape{4, 8, 2}));  // off
  EXPECT_PAX_ERROR(stage_held_spec(w, stages(3), "sub/w"),
                   "sub/w (4, 8, 2): the 4 repetitions do not split over the 3 processes of the mesh axis 'stage'");
  const Array full = testing::random_array({4, 8, 2}, DType::f32, 1);
  EXPECT_TRUE(testing::all_close(stage_block(full, w, stages(2, 1)), slice_along(full, 0, 2, 4), 0, 0));
  EXPECT_PAX_ERROR(microbatch_count(6, 4, 0, "R: "), "R: the batch of 6 rows does not split into 4 microbatches");
  EXPECT_PAX_ERROR(microbatch_count(6, 0, 4, "R: "), "does not split into microbatches of 4");
  EXPECT_EQ(microbatch_count(6, 0, 2, "R: "), 3);
  EXPECT_EQ(microbatch_count(6, 2, 0, "R: "), 2);
}

Repeat::HParams pipelined_stack(int64_t layers, int64_t microbatches, double dropout = 0.0, bool delay = false) {
  auto sub = testing::f64_transformer(4);
  sub->residual_dropout_prob = dropout;
  Repeat::HParams hp = testing::repeat_of(sub, layers);
  hp.num_microbatches = microbatches;
  hp.delay_activation_forwarding = delay;
  return hp;
}

TEST(Pipeline, ScheduleLengths) {
  EXPECT_EQ(pipeline_iterations(3, 4, false), 6);  // M + S - 1
  EXPECT_EQ(pipeline_iterations(3, 4, true), 9);   // M + 2 (S - 1)
  EXPECT_EQ(pipeline_iterations(5, 1, true), 5);
}

// Member k's slice of a stacked-over-members tree or array.
Array member(const Array& stacked, int64_t k) { return squeeze(slice_along(stacked, 0, k, k + 1), Axes{0}); }

using testing::block_of;

TEST(Pipeline, PipelinedStackMatchesTheWholeOne) {
  const int64_t layers = 4, B = 6, T = 5;
  const Array x = testing::random_array({B, T, 8}, DType::f64, 5);
  // Rows pad different tails, so that a microbatch's paddings must be its own.
  const Array paddings =
      (reshape(arange(int64_t(0), T).astype(DType::f64), {1, T}) >= array<double>({5, 4, 3, 5, 2, 1}, Shape{B, 1}))
          .astype(DType::f64);
  // 2 stages (where the previous stage is also the next) and 4 (one layer each).
  struct Case {
    int64_t members, microbatches;
    bool delay;
  };
  for (const auto& [members, microbatches, delay] :
       std::vector<Case>{{2, 1, false}, {2, 2, false}, {2, 3, false}, {4, 3, false}, {2, 3, true}, {4, 3, true}}) {
    const int64_t per = layers / members;
    for (bool per_example_mask : {false, true}) {
      SCOPED_TRACE(::testing::Message() << members << " stages, " << microbatches << " microbatches, delayed " << delay
                                        << ", a mask per example " << per_example_mask);
      auto stack = build<Repeat>(pipelined_stack(layers, microbatches, 0.0, delay));
      const Tree full = init(*stack, random::key(3));
      std::vector<Tree> blocks;
      for (int64_t k = 0; k < members; ++k) {
        blocks.push_back(init_sharded(*stack, random::key(3), {.stage = stages(members, k)}));
        const std::vector<Array> f = tree_leaves(full), b = tree_leaves(blocks.back());
        ASSERT_EQ(f.size(), b.size());
        for (size_t i = 0; i < f.size(); ++i) {
          EXPECT_EQ(b[i].dim(0), layers / members);
          EXPECT_TRUE(testing::all_close(b[i], slice_along(f[i], 0, k * per, (k + 1) * per), 0, 0)) << i;
        }
      }
      Array mask = causal_mask(T, DType::f64);  // (1, 1, T, T)
      if (per_example_mask) {
        // Example b cannot see position b % T either (before or after it).
        const Array hidden = equal(reshape(arange(int64_t(0), T), {1, 1, 1, T}),
                                   reshape(remainder(arange(int64_t(0), B), int(T)), {B, 1, 1, 1}));
        mask = combine_masks(mask, where(hidden, large_negative_number(DType::f64), 0.0).astype(DType::f64));
      }
      auto member_out = [&](const Tree& vars) {
        return apply(*stack, vars, ApplyOptions{.sharding = {.stage = stages(members)}}, x, paddings, mask).output;
      };
      const Array want = apply(*stack, full, x, paddings, mask).output;
      const Tree stacked = train::stack_forest(blocks);
      const Array outs = vmap(member_out, {.in_axes = {0}, .axis_name = "stage"})(stacked);
      for (int64_t k = 0; k < members; ++k) EXPECT_TRUE(testing::all_close(member(outs, k), want, 1e-12, 1e-12)) << k;
      // Every member's loss is the whole stack's; each differentiates its own
      // layers, and the input's gradient is whole on every member.
      const Array weights = testing::random_array({B, T, 8}, DType::f64, 6);
      auto split_loss = [&](const Tree& vars, const Array& inputs) {
        auto out = [&](const Tree& v) {
          return apply(*stack, v, ApplyOptions{.sharding = {.stage = stages(members)}}, inputs, paddings, mask).output;
        };
        return sum(vmap(out, {.in_axes = {0}, .axis_name = "stage"})(vars) * weights) / double(members);
      };
      auto full_loss = [&](const Tree& vars, const Array& inputs) {
        return sum(apply(*stack, vars, inputs, paddings, mask).output * weights);
      };
      const auto [g_blocks, g_x_split] = grad<0, 1>(split_loss)(stacked, x);
      const auto [g_full, g_x] = grad<0, 1>(full_loss)(full, x);
      EXPECT_TRUE(testing::all_close(g_x_split, g_x, 1e-10, 1e-10));
      const std::vector<Array> gb = tree_leaves(g_blocks), gf = tree_leaves(g_full);
      const std::vector<std::string> paths = tree_paths(full);
      for (int64_t k = 0; k < members; ++k) {
        for (size_t i = 0; i < gf.size(); ++i) {
          // Divided by members above: each member's loss is the whole one.
          const Array mine = member(gb[i], k) * double(members);
          EXPECT_TRUE(testing::all_close(mine, slice_along(gf[i], 0, k * per, (k + 1) * per), 1e-10, 1e-10))
              << paths[i] << " member " << k;
        }
      }
    }
  }
}

// Stages whose layers are split by heads and widths over "mdl" too: two
// nested vmap axes stand in for the 2 x 2 processes.
TEST(Pipeline, StagesSplitOverMdlMatchTheWholeStack) {
  const int64_t layers = 4, B = 4, T = 3;
  auto stack = build<Repeat>(pipelined_stack(layers, 2));
  const Tree full = init(*stack, random::key(8));
  std::vector<Tree> per_stage;
  for (int64_t s = 0; s < 2; ++s) {
    std::vector<Tree> per_mdl;
    for (int64_t m = 0; m < 2; ++m)
      per_mdl.push_back(
          init_sharded(*stack, random::key(8), {.tp = TensorParallelOptions{"mdl", 2, m}, .stage = stages(2, s)}));
    per_stage.push_back(train::stack_forest(per_mdl));
  }
  const Tree blocks = train::stack_forest(per_stage);  // leaves (stage, mdl, ...)
  const Array x = testing::random_array({B, T, 8}, DType::f64, 2);
  const Array paddings = zeros({B, T}, DType::f64);
  const Array mask = causal_mask(T, DType::f64);
  const ApplyOptions options{.sharding = {.tp = TensorParallelOptions{"mdl", 2, 0}, .stage = stages(2)}};
  auto loss_of = [&](const Tree& vars) {
    auto one = [&](const Tree& v) { return apply(*stack, v, options, x, paddings, mask).output; };
    auto over_mdl = [&](const Tree& v) { return vmap(one, {.in_axes = {0}, .axis_name = "mdl"})(v); };
    const Array outs = vmap(over_mdl, {.in_axes = {0}, .axis_name = "stage"})(vars);  // (2, 2, B, T, 8)
    return std::make_pair(sum(square(outs)) / 4.0, outs);
  };
  const Array want = apply(*stack, full, x, paddings, mask).output;
  const Array outs = loss_of(blocks).second;
  for (int64_t s = 0; s < 2; ++s)
    for (int64_t m = 0; m < 2; ++m) EXPECT_TRUE(testing::all_close(member(member(outs, s), m), want, 1e-12, 1e-12));
  const std::vector<Array> g = tree_leaves(grad([&](const Tree& v) { return loss_of(v).first; })(blocks));
  const std::vector<Array> g_full =
      tree_leaves(grad([&](const Tree& v) { return sum(square(apply(*stack, v, x, paddings, mask).output)); })(full));
  const std::vector<Array> held = tree_leaves(blocks);
  const std::vector<std::string> paths = tree_paths(full);
  for (int64_t s = 0; s < 2; ++s) {
    for (int64_t m = 0; m < 2; ++m) {
      for (size_t i = 0; i < g_full.size(); ++i) {
        const Array mine = member(member(g[i], s), m) * 4.0;
        const Array stage_full = slice_along(g_full[i], 0, s * 2, s * 2 + 2);
        EXPECT_TRUE(testing::all_close(mine, block_of(stage_full, member(member(held[i], s), m), m), 1e-10, 1e-10))
            << paths[i] << " stage " << s << " mdl " << m;
      }
    }
  }
}

// Stages whose layers fsdp splits over "data" (min_elements 1: every
// weight): two nested vmap axes stand in for the 2 x 2 processes; the
// outputs and each process's gradient blocks are the whole stack's.
TEST(Pipeline, StagesSplitOverDataMatchTheWholeStack) {
  const int64_t layers = 4, B = 4, T = 3;
  for (bool delay : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "delayed " << delay);
    auto stack = build<Repeat>(pipelined_stack(layers, 2, 0.0, delay));
    const Tree full = init(*stack, random::key(8));
    auto plan = [](int64_t s, int64_t d) {
      return ShardingPlan{.fsdp = {.axis = "data", .size = 2, .index = d, .min_elements = 1}, .stage = stages(2, s)};
    };
    std::vector<Tree> per_stage;
    for (int64_t s = 0; s < 2; ++s) {
      std::vector<Tree> per_data;
      for (int64_t d = 0; d < 2; ++d) per_data.push_back(init_sharded(*stack, random::key(8), plan(s, d)));
      per_stage.push_back(train::stack_forest(per_data));
    }
    const Tree blocks = train::stack_forest(per_stage);  // leaves (stage, data, ...)
    const Array x = testing::random_array({B, T, 8}, DType::f64, 2);
    const Array paddings = zeros({B, T}, DType::f64);
    const Array mask = causal_mask(T, DType::f64);
    const ApplyOptions options{.sharding = plan(0, 0)};
    auto loss_of = [&](const Tree& vars) {
      auto one = [&](const Tree& v) { return apply(*stack, v, options, x, paddings, mask).output; };
      auto over_data = [&](const Tree& v) { return vmap(one, {.in_axes = {0}, .axis_name = "data"})(v); };
      const Array outs = vmap(over_data, {.in_axes = {0}, .axis_name = "stage"})(vars);  // (2, 2, B, T, 8)
      return std::make_pair(sum(square(outs)) / 4.0, outs);
    };
    const Array want = apply(*stack, full, x, paddings, mask).output;
    const Array outs = loss_of(blocks).second;
    for (int64_t s = 0; s < 2; ++s)
      for (int64_t d = 0; d < 2; ++d)
        EXPECT_TRUE(testing::all_close(member(member(outs, s), d), want, 1e-12, 1e-12)) << s << " " << d;
    const std::vector<Array> g = tree_leaves(grad([&](const Tree& v) { return loss_of(v).first; })(blocks));
    const std::vector<Array> g_full =
        tree_leaves(grad([&](const Tree& v) { return sum(square(apply(*stack, v, x, paddings, mask).output)); })(full));
    const std::vector<Array> held = tree_leaves(blocks);
    const std::vector<std::string> paths = tree_paths(full);
    int64_t split = 0;
    for (int64_t s = 0; s < 2; ++s) {
      for (int64_t d = 0; d < 2; ++d) {
        for (size_t i = 0; i < g_full.size(); ++i) {
          // Each process's loss is the whole one, and the data axis sums
          // the two processes' gradients into each block.
          const Array mine = member(member(g[i], s), d) * 2.0;
          const Array stage_full = slice_along(g_full[i], 0, s * 2, s * 2 + 2);
          const Array block = member(member(held[i], s), d);
          split += block.shape() != stage_full.shape();
          EXPECT_TRUE(testing::all_close(mine, block_of(stage_full, block, d), 1e-10, 1e-10))
              << paths[i] << " stage " << s << " data " << d;
        }
      }
    }
    EXPECT_GT(split, 0) << "fsdp split none of the stage's weights";
  }
}

// Process axes only traced (make_jaxpr), never run: "stage" and "data" of
// 2 processes each, this process first on both.
class TracedAxis final : public ProcessAxis {
 public:
  explicit TracedAxis(std::string name) : name_(std::move(name)) {}
  const std::string& name() override { return name_; }
  int64_t size() override { return 2; }
  int64_t index() override { return 0; }
  Array all_reduce(const Array&, ReduceOp) override { PAX_FAIL("TracedAxis: traced only"); }
  Array all_gather(const Array&, int64_t, bool) override { PAX_FAIL("TracedAxis: traced only"); }
  Array reduce_scatter_sum(const Array&, int64_t) override { PAX_FAIL("TracedAxis: traced only"); }
  Array permute(const Array&, const std::vector<std::pair<int64_t, int64_t>>&) override {
    PAX_FAIL("TracedAxis: traced only");
  }

 private:
  std::string name_;
};

class TracedMesh {
 public:
  TracedMesh() : saved_(current_process_axes()) { install_process_axes({world, find, names}); }
  ~TracedMesh() { install_process_axes(saved_); }
  TracedMesh(const TracedMesh&) = delete;
  TracedMesh& operator=(const TracedMesh&) = delete;

 private:
  static TracedAxis& stage() {
    static TracedAxis axis("stage");
    return axis;
  }
  static TracedAxis& data() {
    static TracedAxis axis("data");
    return axis;
  }
  static ProcessAxis& world() { return stage(); }
  static ProcessAxis* find(const std::string& name) {
    return name == "stage" ? static_cast<ProcessAxis*>(&stage()) : name == "data" ? &data() : nullptr;
  }
  static std::vector<std::string> names() { return {"stage", "data"}; }
  ProcessAxes saved_;
};

// The equations of `prim` in `j` and in the programs nested in its
// equations (scan and cond bodies, rematerialised calls).
int64_t count_prim(const Jaxpr& j, Prim prim) {
  int64_t n = 0;
  for (const Eqn& e : j.eqns) {
    n += e.prim == prim;
    for (const auto& [name, value] : e.params.items()) {
      const auto* object = std::get_if<ParamObjectPtr>(&value);
      if (!object) continue;
      if (const auto* program = dynamic_cast<const Program*>(object->get())) n += count_prim(*program->jaxpr(), prim);
      if (const auto* inner = dynamic_cast<const Jaxpr*>(object->get())) n += count_prim(*inner, prim);
    }
  }
  return n;
}

// `gathered`: the dtype the weights are gathered in (the fprop dtype).
void expect_gathers_outside_the_schedule(const std::unique_ptr<Repeat>& stack, DType inputs, DType gathered) {
  const ShardingPlan plan{.fsdp = {.axis = "data", .size = 2, .index = 0, .min_elements = 1}, .stage = stages(2, 0)};
  const Tree vars = init_sharded(*stack, random::key(8), plan);
  const Array x = testing::random_array({6, 3, 8}, inputs, 2);
  auto loss = [&](const Tree& v) {
    return sum(square(
        apply(*stack, v, ApplyOptions{.sharding = plan}, x, zeros({6, 3}, inputs), causal_mask(3, inputs)).output));
  };
  std::shared_ptr<const Jaxpr> jaxpr;
  {
    TracedMesh mesh;
    jaxpr = make_jaxpr(grad(loss))(vars);
  }
  int64_t pipelines = 0;
  for (const Eqn& e : jaxpr->eqns) {
    if (e.prim != Prim::scan) continue;
    const Jaxpr& body = *cf::scan_spec(e.params).body->jaxpr();
    if (count_prim(body, Prim::ppermute) == 0) continue;
    ++pipelines;
    EXPECT_EQ(count_prim(body, Prim::all_gather), 0) << body.str();
    EXPECT_EQ(count_prim(body, Prim::psum_scatter), 0) << body.str();
  }
  EXPECT_EQ(pipelines, 2) << "a forward and a backward schedule";
  int64_t gathers = 0;
  for (const Eqn& e : jaxpr->eqns) {
    if (e.prim != Prim::all_gather) continue;
    ++gathers;
    EXPECT_EQ(jaxpr->aval(e.inputs[0]).dtype, gathered) << jaxpr->aval(e.inputs[0]).str();
  }
  EXPECT_GE(gathers, int64_t(tree_leaves(vars).size()) / 2) << jaxpr->str();
}

// Under fsdp a stage's weights are gathered before the schedule's scan and
// their gradients reduce-scattered after it: the scans that shift between
// stages (forward and backward) hold no all_gather and no psum_scatter.
TEST(Pipeline, AStageGathersItsFsdpBlocksOncePerStep) {
  for (bool delay : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "delayed " << delay);
    expect_gathers_outside_the_schedule(build<Repeat>(pipelined_stack(4, 3, 0.0, delay)), DType::f64, DType::f64);
  }
  // f32 variables computed in bf16: the blocks are gathered in bf16 (half
  // the bytes), as Layer::theta gathers them.
  Repeat::HParams mixed = pipelined_stack(4, 3);
  auto sub = testing::f64_transformer(4);
  sub->dtype = DType::f32;
  sub->fprop_dtype = DType::bf16;
  mixed.sub_tpl = sub;
  mixed.dtype = DType::f32;
  mixed.fprop_dtype = DType::bf16;
  expect_gathers_outside_the_schedule(build<Repeat>(mixed), DType::f32, DType::bf16);
}

// Dropout under the pipeline: every member (stage) computes one output, and
// each microbatch draws its own masks.
TEST(Pipeline, DropoutDrawsPerMicrobatchAndAgreesAcrossStages) {
  const int64_t B = 4, T = 3;
  auto stack = build<Repeat>(pipelined_stack(2, 2, /*dropout=*/0.5));
  std::vector<Tree> blocks;
  for (int64_t k = 0; k < 2; ++k) blocks.push_back(init_sharded(*stack, random::key(1), {.stage = stages(2, k)}));
  const Array row = testing::random_array({1, T, 8}, DType::f64, 4);
  const Array x = broadcast_to(row, Shape{B, T, 8});  // four equal rows
  auto member_out = [&](const Tree& vars) {
    return apply(*stack, vars,
                 ApplyOptions{.rngs = {{"dropout", random::key(9)}}, .train = true, .sharding = {.stage = stages(2)}},
                 x, zeros({B, T}, DType::f64), causal_mask(T, DType::f64))
        .output;
  };
  const Array outs = vmap(member_out, {.in_axes = {0}, .axis_name = "stage"})(train::stack_forest(blocks));
  EXPECT_TRUE(testing::all_close(member(outs, 0), member(outs, 1), 0, 0)) << "the stages disagree";
  const Array out = member(outs, 0);
  // Rows 0 and 2 are in different microbatches (2 rows each).
  EXPECT_FALSE(testing::all_close(slice_along(out, 0, 0, 1), slice_along(out, 0, 2, 3), 1e-6, 1e-6))
      << "two microbatches drew one dropout mask";
}

TEST(Pipeline, RefusesWhatItCannotRun) {
  auto stack = build<Repeat>(pipelined_stack(3, 2));
  EXPECT_PAX_ERROR(init_sharded(*stack, random::key(1), {.stage = stages(2, 0)}),
                   "the 3 repetitions do not split over the 2 processes of the mesh axis 'stage'");
  auto even = build<Repeat>(pipelined_stack(2, 4));
  const Tree vars = init_sharded(*even, random::key(1), {.stage = stages(2, 0)});
  auto run = [&](const Tree& v) {
    return apply(*even, v, ApplyOptions{.sharding = {.stage = stages(2)}}, zeros({6, 3, 8}, DType::f64), Array(),
                 Array())
        .output;
  };
  EXPECT_PAX_ERROR(vmap(run, {.in_axes = {0}, .axis_name = "stage"})(train::stack_forest({vars, vars})),
                   "the batch of 6 rows does not split into 4 microbatches");
  Repeat::HParams both = pipelined_stack(2, 2);
  both.microbatch_size = 3;
  EXPECT_PAX_ERROR(build<Repeat>(both), "set at most one of num_microbatches and microbatch_size");
}

}  // namespace
}  // namespace pax::nn
