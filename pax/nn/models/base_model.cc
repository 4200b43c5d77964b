// BaseModel helpers.
#include "pax/nn/models/base_model.h"

#include "pax/api/transforms.h"
#include "pax/compile/executable.h"
#include "pax/ops/numpy.h"
#include "pax/ops/random.h"

namespace pax::nn {

Tree weighted_scalar(const Array& value, const Array& weight) {
  return Tree::list({Tree(value), Tree(weight.astype(value.dtype()))});
}

Array metric_value(const Tree& metrics, const std::string& name) { return metrics[name][0].leaf(); }
Array metric_weight(const Tree& metrics, const std::string& name) { return metrics[name][1].leaf(); }

std::pair<Tree, Tree> BaseModel::fprop_batch(const Tree& input_batch) const {
  return compute_loss(compute_predictions(input_batch), input_batch);
}

Tree BaseModel::decode(const Tree&) const {
  PAX_FAIL(type_name(), " '", path(), "' does not support decoding");
}

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
