// BaseModel helpers.
#include "pax/nn/models/base_model.h"

#include "pax/api/transforms.h"
#include "pax/ir/executable.h"
#include "pax/ops/numpy.h"
#include "pax/ops/random.h"

namespace pax::nn {

Tree weighted_scalar(const Array& value, const Array& weight) {
  return Tree::list({Tree(value), Tree(weight.astype(value.dtype()))});
}

Array metric_value(const Tree& metrics, const std::string& name) { return metrics[name][0].leaf(); }
Array metric_weight(const Tree& metrics, const std::string& name) { return metrics[name][1].leaf(); }

Tree cross_entropy_metrics(const Array& xent, const Array& logits, const Array& labels, const Array& weights,
                           const std::string& accuracy_name) {
  Array total_weight = sum(weights);
  Array denom = maximum(total_weight, 1e-8);
  Array avg_xent = sum(xent * weights) / denom;
  Array correct = equal(argmax(logits, -1), labels.astype(DType::i32)).astype(logits.dtype());
  Tree metrics;
  metrics["total_loss"] = weighted_scalar(avg_xent, total_weight);
  metrics["avg_xent"] = weighted_scalar(avg_xent, total_weight);
  metrics[accuracy_name] = weighted_scalar(sum(correct * weights) / denom, total_weight);
  metrics["num_predictions"] = weighted_scalar(total_weight, ones({}, logits.dtype()));
  return metrics;
}

std::pair<Tree, Tree> BaseModel::fprop_batch(const Tree& input_batch) const {
  return compute_loss(compute_predictions(input_batch), input_batch);
}

void BaseModel::init_decode_states(const Tree&) const {}

Tree BaseModel::decode(const Tree&) const { PAX_FAIL(type_name(), " '", path(), "' does not support decoding"); }

double BaseModel::flops_per_example(const Tree& input_batch) const {
  auto leaves = tree_leaves(input_batch);
  PAX_CHECK(!leaves.empty() && leaves[0].ndim() >= 1, type_name(), ": flops_per_example needs a batched input");
  const double batch = double(leaves[0].dim(0));
  // Abstract variables: eval_shape of init allocates nothing.
  Tree variables = eval_shape([this](const Array& key) { return init(*this, key); })(random::key(0));
  auto jaxpr = make_jaxpr([this](const Tree& vars, const Tree& batch_tree) {
    return apply_with(*this, vars, [&](const BaseModel& m) { return m.compute_predictions(batch_tree); }).output;
  })(variables, input_batch);
  return 3.0 * cost_analysis(*jaxpr).flops / std::max(1.0, batch);
}

}  // namespace pax::nn
