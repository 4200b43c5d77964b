// WeightInit (how a weight is drawn) and WeightHParams (what a layer declares
// for each variable in setup()), as in Praxis.
#pragma once

#include <optional>
#include <string>

#include "pax/config/hparams.h"
#include "pax/core/array.h"
#include "pax/ir/params.h"

namespace pax::nn {

enum class InitMethod : int {
  constant,              // every element = scale
  uniform,               // U(-scale, scale)
  gaussian,              // N(0, scale^2)
  truncated_gaussian,    // N(0, scale^2) truncated to two standard deviations
  xavier,                // U(-l, l), l = scale * sqrt(6 / (fan_in + fan_out))  (Glorot)
  gaussian_sqrt_fan_in,  // N(0, (scale / sqrt(fan_in))^2)
  gaussian_sqrt_fan_out,
  gaussian_sqrt_fan_avg,  // fan_avg = (fan_in + fan_out) / 2
  uniform_sqrt_fan_in,    // U(-l, l), l = scale * sqrt(3 / fan_in): variance scale^2 / fan_in
  uniform_sqrt_fan_out,
  uniform_sqrt_fan_avg,
  lecun_normal,   // truncated normal, variance scale / fan_in (scale 1 by default)
  lecun_uniform,  // U(-l, l), l = sqrt(3 scale / fan_in)
  he_normal,      // truncated normal, variance 2 scale / fan_in
  he_uniform,     // U(-l, l), l = sqrt(6 scale / fan_in)
};
PAX_ENUM(InitMethod, "constant", "uniform", "gaussian", "truncated_gaussian", "xavier", "gaussian_sqrt_fan_in",
         "gaussian_sqrt_fan_out", "gaussian_sqrt_fan_avg", "uniform_sqrt_fan_in", "uniform_sqrt_fan_out",
         "uniform_sqrt_fan_avg", "lecun_normal", "lecun_uniform", "he_normal", "he_uniform")

struct WeightInit : BaseHParams {
  InitMethod method = InitMethod::xavier;
  double scale = 1.0;
  PAX_HPARAMS(WeightInit, BaseHParams, (method, "How the weight is drawn (see InitMethod)."),
              (scale, "The constant, bound, standard deviation or multiplier the method uses.", range::finite));

  static WeightInit constant(double v) { return make(InitMethod::constant, v); }
  static WeightInit uniform(double bound) { return make(InitMethod::uniform, bound); }
  static WeightInit gaussian(double stddev) { return make(InitMethod::gaussian, stddev); }
  static WeightInit truncated_gaussian(double stddev) { return make(InitMethod::truncated_gaussian, stddev); }
  static WeightInit xavier(double scale = 1.0) { return make(InitMethod::xavier, scale); }
  static WeightInit gaussian_sqrt_fan_in(double scale = 1.0) { return make(InitMethod::gaussian_sqrt_fan_in, scale); }
  static WeightInit gaussian_sqrt_fan_out(double scale = 1.0) { return make(InitMethod::gaussian_sqrt_fan_out, scale); }
  static WeightInit gaussian_sqrt_fan_avg(double scale = 1.0) { return make(InitMethod::gaussian_sqrt_fan_avg, scale); }
  static WeightInit uniform_sqrt_fan_in(double scale = 1.0) { return make(InitMethod::uniform_sqrt_fan_in, scale); }
  static WeightInit uniform_sqrt_fan_out(double scale = 1.0) { return make(InitMethod::uniform_sqrt_fan_out, scale); }
  static WeightInit uniform_sqrt_fan_avg(double scale = 1.0) { return make(InitMethod::uniform_sqrt_fan_avg, scale); }
  static WeightInit lecun_normal(double scale = 1.0) { return make(InitMethod::lecun_normal, scale); }
  static WeightInit lecun_uniform(double scale = 1.0) { return make(InitMethod::lecun_uniform, scale); }
  static WeightInit he_normal(double scale = 1.0) { return make(InitMethod::he_normal, scale); }
  static WeightInit he_uniform(double scale = 1.0) { return make(InitMethod::he_uniform, scale); }

 private:
  static WeightInit make(InitMethod m, double s) {
    WeightInit w;
    w.method = m;
    w.scale = s;
    return w;
  }
};

// What setup() declares for one variable.
struct WeightHParams {
  Shape shape;
  std::optional<WeightInit> init = {};  // default: the layer's params_init
  std::optional<DType> dtype = {};      // default: the layer's dtype
  std::string collection = "params";    // params (trainable), batch_stats, non_trainable, ...
  Ints fan_in_axes = {};                // default: axis -2 (times leading "receptive field" axes)
  Ints fan_out_axes = {};               // default: axis -1 (times leading axes)
  // Leading axes of `shape` that stack independent copies (Repeat's
  // repetitions, as praxis's repeat_prefix): each copy is drawn with the fans
  // of shape[repeat_prefix_axes:], and the fan axes index that shape.
  int64_t repeat_prefix_axes = 0;
  // Under fully sharded data parallelism (nn/fsdp.h), the dimension split
  // over the data axis (praxis's sharding annotation); nullopt: the largest
  // dimension after the repeat prefix that the axis divides; -1: never split.
  std::optional<int64_t> fsdp_dim = {};
  // Under tensor parallelism (nn/tensor_parallel.h), the dimension split over
  // the mdl axis (attention heads, the feed-forward's hidden width); nullopt:
  // whole on every process of the axis. A variable split over mdl is split
  // further over the data axis (fsdp) along the same dimension where it
  // divides, and otherwise along another dimension (Praxis's [data, mdl];
  // nn::held_spec).
  std::optional<int64_t> mdl_dim = {};
  // Split over mdl only where the axis size divides shape[mdl_dim]; whole
  // otherwise (a vocabulary of any size), instead of an error.
  bool mdl_split_if_divisible = false;
  // Under pipeline parallelism (nn/pipeline.h), the dimension split over the
  // stage axis: 0, the repeat axis of a pipelined Repeat's stacks (set by
  // Repeat); nullopt: whole on every stage. Tensor parallelism and fsdp
  // split the stage's block further along their own dimensions.
  std::optional<int64_t> stage_dim = {};
};

// (fan_in, fan_out) of a weight shape.
std::pair<double, double> fans(const Shape& shape, const Ints& fan_in_axes, const Ints& fan_out_axes);

// Draws a weight of `shape` / `dtype` with `init` from `key`; the fans are
// those of shape without its first repeat_prefix_axes axes. A stack over
// 2^30 elements with such a prefix is drawn one repetition at a time, each on
// random::fold_in(key, repetition), as one draw is limited to 2^32 - 2 bits.
Array init_weight(const WeightInit& init, const Array& key, const Shape& shape, DType dtype,
                  const Ints& fan_in_axes = {}, const Ints& fan_out_axes = {}, int64_t repeat_prefix_axes = 0);

}  // namespace pax::nn
