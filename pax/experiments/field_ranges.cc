// Numeric config fields and their ranges (see field_ranges.h).
#include "pax/experiments/field_ranges.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <sstream>

#include "pax/core/error.h"

namespace pax::experiments {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kMaxDim = double(int64_t(1) << 31);  // a dimension, count or length

FieldRange closed(double lo, double hi) { return {lo, hi, false, false}; }
const FieldRange kProbability{0, 1, false, true};      // [0, 1)
const FieldRange kKeepProbability{0, 1, true, false};  // (0, 1]
const FieldRange kFraction = closed(0, 1);
const FieldRange kFinite{-kInf, kInf, true, true};
const FieldRange kNonNegative{0, kInf, false, true};
const FieldRange kPositive{0, kInf, true, true};
const FieldRange kSize = closed(0, kMaxDim);  // 0: derived from the parent layer
const FieldRange kCount = closed(1, kMaxDim);
const FieldRange kSteps = closed(0, 1e15);
const FieldRange kSeed = closed(-9.3e18, 9.3e18);

const std::map<std::string, FieldRange>& rules() {
  static const std::map<std::string, FieldRange> table = {
      // Layers: dimensions (0 where a parent sets them), probabilities, scales.
      {"input_dims", kSize},
      {"output_dims", kSize},
      {"input_dim", kSize},
      {"hidden_dims", kSize},
      {"hidden_dim", kSize},
      {"dim", kSize},
      {"model_dims", kSize},
      {"embedding_dims", kSize},
      {"num_heads", kSize},
      {"dim_per_head", kSize},
      {"num_kv_heads", kSize},
      {"num_classes", kSize},
      {"vocab_size", kSize},
      {"num_layers", closed(0, 4096)},
      {"seq_length", kSize},
      {"shuffle_buffer_size", kSize},
      {"max_seq_length", kSize},
      {"max_decode_length", kSize},
      {"feature_group_count", kCount},
      {"num_groups", kCount},
      {"window_shape", kCount},
      {"window_strides", kCount},
      {"strides", kCount},
      {"filter_shape", kSize},
      {"filter_stride", kCount},
      {"dilations", kCount},
      {"padding", kSize},
      {"keep_prob", kKeepProbability},
      {"dropout_prob", kProbability},
      {"atten_dropout_prob", kProbability},
      {"residual_dropout_prob", kProbability},
      {"relu_dropout_prob", kProbability},
      {"input_dropout_prob", kProbability},
      {"label_smoothing", kProbability},
      {"dims", kSize},
      {"num_input_nodes", kSize},
      {"num_output_nodes", kSize},
      {"x_times", closed(0, 4096)},
      {"num_microbatches", kSize},  // 0: not pipelined
      {"microbatch_size", kSize},
      {"explicit_padding", kSize},
      {"noise_shape_broadcast_dims", closed(-64, 64)},
      {"cell_value_cap", kNonNegative},
      {"forget_gate_bias", kFinite},
      {"decay", kFraction},
      {"scale", kFinite},
      {"residual_weight", kFinite},
      {"epsilon", kNonNegative},
      {"momentum", kFraction},
      {"min_timescale", kPositive},
      {"max_timescale", kPositive},
      {"atten_logit_cap", kNonNegative},
      {"soft_cap_logits", kNonNegative},
      {"pixel_mean", kFinite},
      {"pixel_stddev", kPositive},
      // Decoding.
      {"temperature", kNonNegative},
      {"top_k", kSize},
      {"top_p", kFraction},
      {"eos_id", closed(-1, kMaxDim)},
      // Inputs.
      {"batch_size", kCount},
      {"num_infeed_hosts", kCount},
      {"infeed_host_index", kSize},
      {"prefetch_batches", closed(0, 1024)},
      {"eval_loop_num_batches", kCount},
      {"input_random_seed", kSeed},
      {"validation_fraction", kProbability},
      {"num_batches", kCount},
      {"num_examples", kCount},
      {"input_shape", kSize},
      // Optimizers and schedules.
      {"learning_rate", kNonNegative},
      {"weight_decay", kNonNegative},
      {"beta1", kProbability},
      {"beta2", kProbability},
      {"epsilon_root", kNonNegative},
      {"ema_decay", kFraction},
      {"warmup_steps", kSteps},
      {"decay_start", kSteps},
      {"decay_end", kSteps},
      {"min_ratio", kFraction},
      {"max", kNonNegative},
      {"decay_rate", kPositive},
      {"transition_steps", kSteps},
      {"transition_begin", kSteps},
      {"decay_steps", kSteps},
      {"boundaries", kSteps},
      {"values", kNonNegative},
      {"value", kNonNegative},
      {"init_value", kNonNegative},
      {"peak_value", kNonNegative},
      {"end_value", kNonNegative},
      {"initial_accumulator_value", kNonNegative},
      {"clipping_threshold", kNonNegative},
      {"min_dim_size_to_factor", kSize},
      {"clip_gradient_norm_to_value", kNonNegative},
      {"skip_step_gradient_norm_value", kNonNegative},
      {"max_consecutive_nonfinite_steps", kSteps},
      // The task: loss coefficients, variational noise.
      {"loss_weights", kFinite},
      {"vn_scale", kNonNegative},
      {"vn_start_step", kSteps},
      // Train settings.
      {"num_train_steps", kSteps},
      {"summary_interval_steps", closed(1, 1e15)},
      {"eval_interval_steps", kSteps},
      {"decode_interval_steps", kSteps},
      {"save_interval_steps", closed(1, 1e15)},
      {"save_max_to_keep", kSteps},
      {"save_keep_period", kSteps},
      {"random_seed", kSeed},
      {"early_stopping_patience", kSteps},
      {"early_stopping_min_delta", kNonNegative},
      {"ici_mesh_shape", kCount},  // devices (processes) along each mesh axis
      {"dcn_mesh_shape", kCount},
      {"fsdp_min_elements", closed(1, 1e18)},  // elements of a parameter
  };
  return table;
}

// Integers as integers (1000000000000, not 1e+12), other values to 12 digits.
std::string number_str(double v) {
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e18) return std::to_string(int64_t(v));
  std::ostringstream out;
  out.precision(12);
  out << v;
  return out.str();
}

void collect(const BaseHParams& hp, const std::string& prefix, std::vector<NumericField>& out) {
  hp.visit_fields([&](const FieldRef& f) {
    const std::string path = prefix.empty() ? f.name : prefix + "." + f.name;
    NumericField field{path, f.name, {}};
    switch (f.kind) {
      case FieldKind::integer:
        field.values.push_back(f.int_bytes == 4 ? double(*static_cast<int*>(f.ptr))
                                                : double(*static_cast<int64_t*>(f.ptr)));
        break;
      case FieldKind::real:
        field.values.push_back(f.real_bytes == 4 ? double(*static_cast<float*>(f.ptr)) : *static_cast<double*>(f.ptr));
        break;
      case FieldKind::integers:
        for (int64_t v : *static_cast<std::vector<int64_t>*>(f.ptr)) field.values.push_back(double(v));
        break;
      case FieldKind::reals: field.values = *static_cast<std::vector<double>*>(f.ptr); break;
      case FieldKind::optional_integer:
        if (const auto& v = *static_cast<std::optional<int64_t>*>(f.ptr)) field.values.push_back(double(*v));
        break;
      case FieldKind::optional_real:
        if (const auto& v = *static_cast<std::optional<double>*>(f.ptr)) field.values.push_back(*v);
        break;
      case FieldKind::nested: collect(*static_cast<BaseHParams*>(f.ptr), path, out); return;
      case FieldKind::hparams:
        if (const HParamsPtr& p = *static_cast<HParamsPtr*>(f.ptr)) collect(*p, path, out);
        return;
      case FieldKind::hparams_list: {
        const auto& list = *static_cast<std::vector<HParamsPtr>*>(f.ptr);
        for (size_t i = 0; i < list.size(); ++i)
          if (list[i]) collect(*list[i], path + "[" + std::to_string(i) + "]", out);
        return;
      }
      default: return;  // booleans, strings, dtypes, enumerations
    }
    out.push_back(std::move(field));
  });
}

}  // namespace

bool FieldRange::contains(double v) const {
  if (std::isnan(v)) return false;
  if (min_open ? !(v > min) : !(v >= min)) return false;
  return max_open ? v < max : v <= max;
}

std::string FieldRange::str() const {
  if (min == -kInf && max == kInf) return "any finite number";
  if (max == kInf) return std::string(min_open ? "greater than " : "at least ") + number_str(min) + ", finite";
  return (min_open ? "(" : "[") + number_str(min) + ", " + number_str(max) + (max_open ? ")" : "]");
}

std::optional<FieldRange> field_range(const std::string& field_name) {
  const auto it = rules().find(field_name);
  if (it == rules().end()) return std::nullopt;
  return it->second;
}

std::vector<NumericField> numeric_fields(const Config& config) {
  std::vector<NumericField> out;
  if (config.defined()) collect(*config.root(), "", out);
  return out;
}

void check_field_ranges(const Config& config) {
  for (const NumericField& f : numeric_fields(config)) {
    const std::optional<FieldRange> range = field_range(f.name);
    if (!range) continue;
    for (double v : f.values)
      PAX_CHECK(range->contains(v), f.path, " = ", number_str(v), " is out of range: it must be ", range->str());
  }
}

}  // namespace pax::experiments
