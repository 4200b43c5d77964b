// Pipeline parallelism: the stage blocks of a pipelined Repeat's stacks, the
// shift between stages and GPipe's microbatched schedule as one scan.
#include "pax/nn/pipeline.h"

#include <utility>

#include "pax/api/control_flow.h"
#include "pax/core/error.h"
#include "pax/nn/fsdp.h"
#include "pax/ops/lax.h"
#include "pax/ops/numpy.h"

namespace pax::nn {

bool stage_split(const WeightHParams& spec, const PipelineOptions& stage) {
  return stage.enabled() && spec.stage_dim.has_value();
}

WeightHParams stage_held_spec(const WeightHParams& spec, const PipelineOptions& stage, const std::string& what) {
  if (!stage_split(spec, stage)) return spec;
  const int64_t d = *spec.stage_dim;
  PAX_CHECK(d == 0 && spec.repeat_prefix_axes >= 1, what, ": only the outermost repeat axis of a pipelined Repeat ",
            "splits over the stage axis (a pipelined Repeat cannot sit inside another Repeat)");
  PAX_CHECK(spec.shape[0] % stage.size == 0, what, " ", spec.shape, ": the ", spec.shape[0],
            " repetitions do not split over the ", stage.size, " processes of the mesh axis '", stage.axis,
            "' (a pipelined Repeat needs x_times divisible by the number of stages)");
  WeightHParams held = spec;
  held.shape[0] /= stage.size;
  held.stage_dim.reset();
  return held;
}

Array stage_block(const Array& full, const WeightHParams& spec, const PipelineOptions& stage) {
  if (!stage_split(spec, stage)) return full;
  stage_held_spec(spec, stage, "stage_block");  // checks the split
  return block_along(full, *spec.stage_dim, stage.size, stage.index);
}

Array index_leading(const Array& x, const Array& i) {
  std::vector<Array> start(size_t(x.ndim()), scalar<int32_t>(0));
  start[0] = i;
  Ints sizes = x.shape().dims();
  sizes[0] = 1;
  return squeeze(lax::dynamic_slice(x, start, sizes), Axes{0});
}

namespace {

// (B, ...) -> (M, B / M, ...).
Array cut(const Array& x, int64_t microbatches) {
  Ints dims = x.shape().dims();
  dims[0] /= microbatches;
  dims.insert(dims.begin(), microbatches);
  return reshape(x, dims);
}

}  // namespace

Array from_previous_stage(const Array& y, const PipelineOptions& stage) {
  if (!stage.enabled()) return y;
  std::vector<std::pair<int64_t, int64_t>> chain;  // stage s sends to s + 1; stage 0 receives nothing
  for (int64_t s = 0; s + 1 < stage.size; ++s) chain.emplace_back(s, s + 1);
  return lax::ppermute(y, stage.axis, chain);
}

int64_t pipeline_iterations(int64_t microbatches, int64_t stages, bool delay_forwarding) {
  return microbatches + (delay_forwarding ? 2 : 1) * (stages - 1);
}

int64_t microbatch_count(int64_t batch, int64_t num_microbatches, int64_t microbatch_size, const std::string& who) {
  PAX_CHECK((num_microbatches > 0) != (microbatch_size > 0), who,
            "set one of num_microbatches and microbatch_size (got ", num_microbatches, " and ", microbatch_size, ")");
  if (num_microbatches > 0) {
    PAX_CHECK(batch % num_microbatches == 0, who, "the batch of ", batch, " rows does not split into ",
              num_microbatches, " microbatches (num_microbatches must divide the batch of each process)");
    return num_microbatches;
  }
  PAX_CHECK(batch % microbatch_size == 0, who, "the batch of ", batch, " rows does not split into microbatches of ",
            microbatch_size, " (microbatch_size must divide the batch of each process)");
  return batch / microbatch_size;
}

PipelineResult run_pipeline(const Array& inputs, const std::vector<Array>& args, int64_t microbatches,
                            const PipelineOptions& stage, const StageFn& fn, bool delay_forwarding) {
  PAX_CHECK(stage.enabled(), "run_pipeline: no stage axis");
  const int64_t batch = inputs.dim(0), m = microbatches, s = stage.size;
  const int64_t hop = delay_forwarding ? 2 : 1;  // iterations from a stage's output to the next stage's input
  const int64_t iterations = pipeline_iterations(m, s, delay_forwarding);
  PAX_CHECK(m >= 1 && batch % m == 0, "run_pipeline: ", m, " microbatches do not split the batch of ", batch);
  // Stage 0 reads microbatch t at iteration t; the last iterations drain the
  // pipeline (their inputs are zeros, never used).
  const Array entered = enter_split(inputs, stage.axis);
  Ints pad_dims = inputs.shape().dims();
  pad_dims[0] = (iterations - m) * (batch / m);
  const Array fed = cut(concatenate({entered, zeros(Shape(pad_dims), inputs.dtype())}, 0), iterations);
  std::vector<Array> cut_args;
  std::vector<bool> per_microbatch;
  for (const Array& a : args) {
    const bool split = a.defined() && a.ndim() >= 1 && a.dim(0) == batch && batch > 1;
    per_microbatch.push_back(split);
    cut_args.push_back(split ? cut(a, m) : a);
  }
  const Array me = lax::axis_index(stage.axis).astype(DType::i32);
  const Array first = equal(me, int32_t(0));
  Tree xs = Tree::dict({{"fed", Tree(fed)}, {"t", Tree(arange(int32_t(0), int32_t(iterations), int32_t(1)))}});
  // One iteration on the input `received` (stage 0 reads its own): the
  // stage's output and the ys.
  auto compute = [&](const Array& received, const Tree& x) -> std::pair<Array, Tree> {
    const Array t = x["t"].leaf();
    const Array own = t - me * int32_t(hop);  // the microbatch this stage runs now
    const Array mb = clip(own, scalar<int32_t>(0), scalar<int32_t>(int32_t(m - 1)));
    std::vector<Array> mb_args;
    for (size_t i = 0; i < cut_args.size(); ++i)
      mb_args.push_back(per_microbatch[i] ? index_leading(cut_args[i], mb) : cut_args[i]);
    const Array input = where(first, x["fed"].leaf(), received);
    StageOutput out = fn(input, mb_args, mb);
    PAX_CHECK(out.output.shape() == received.shape() && out.output.dtype() == received.dtype(),
              "run_pipeline: a stage maps ", received.aval().str(), " to ", out.output.aval().str(),
              "; a pipelined stage must keep the shape and dtype");
    const Array valid = logical_and(own >= scalar<int32_t>(0), own < scalar<int32_t>(int32_t(m)));
    return {out.output, Tree::dict({{"output", Tree(out.output)}, {"valid", Tree(valid)}, {"ys", out.ys}})};
  };
  const Array start = zeros(index_leading(fed, scalar<int32_t>(0)).shape(), inputs.dtype());
  Tree ys;
  if (!delay_forwarding) {
    ys = scan(
             [&](const Array& received, const Tree& x) -> std::pair<Array, Tree> {
               auto [output, y] = compute(received, x);
               return {from_previous_stage(output, stage), y};
             },
             start, xs)
             .second;
  } else {
    // carry {sending: the previous iteration's output, received: what came
    // in during the previous iteration}: this iteration's shift reads
    // nothing this iteration computes.
    Tree carry = Tree::dict({{"sending", Tree(start)}, {"received", Tree(start)}});
    ys = scan(
             [&](const Tree& c, const Tree& x) -> std::pair<Tree, Tree> {
               const Array arriving = from_previous_stage(c["sending"].leaf(), stage);
               auto [output, y] = compute(c["received"].leaf(), x);
               return {Tree::dict({{"sending", Tree(output)}, {"received", Tree(arriving)}}), y};
             },
             carry, xs)
             .second;
  }
  // The last stage finishes microbatch i at iteration i + hop (S - 1).
  const Array outputs = slice_along(ys["output"].leaf(), 0, iterations - m, iterations);  // (M, B / M, ...)
  const Array mine = where(equal(me, int32_t(s - 1)), outputs, zeros_like(outputs));
  PipelineResult result;
  result.output = reshape(leave_split(mine, stage.axis), inputs.shape().dims());
  result.ys = ys["ys"];
  result.valid = ys["valid"].leaf();
  return result;
}

}  // namespace pax::nn
