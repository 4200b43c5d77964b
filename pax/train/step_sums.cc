// The cross-process sums of a train step.
#include "pax/train/step_sums.h"

#include <limits>
#include <map>

#include "pax/api/transforms.h"
#include "pax/dist/jax_utils.h"
#include "pax/interp/interpreter.h"
#include "pax/nn/models/base_model.h"
#include "pax/ops/numpy.h"
#include "pax/optim/tree_utils.h"

namespace pax::train {

GlobalBatch sum_over_batch(const std::string& axis, const std::optional<Array>& loss_weight, const MetricRules& rules,
                           const Tree& grads, const Tree& metrics, const Tree& collections, const Array& loss) {
  PAX_CHECK(metrics.is_dict(), "data-parallel train step: the metrics are not a dict {name: [value, weight]}");
  const Array weight = loss_weight ? loss_weight->astype(DType::f32) : scalar(1.0f);
  // value * w, and 0 where w is 0: a process with no real example may have
  // NaN gradients and loss, a metric of weight 0 a NaN value; they add nothing.
  auto weighted = [](const Array& value, const Array& w) {
    return where(w > 0.0, value * w.astype(value.dtype()), zeros_like(value));
  };
  Tree summed_metrics = Tree::dict();
  Tree maxima = Tree::dict();
  for (const auto& [name, pair] : metrics.entries()) {
    const Array w = pair[1].leaf().astype(DType::f32);
    const Array v = pair[0].leaf().astype(DType::f32);
    const bool is_max = rules.rule(name) == MetricReduction::max;
    if (is_max) maxima.set(name, where(w > 0.0, v, full_like(v, -std::numeric_limits<double>::infinity())));
    summed_metrics.set(name, Tree::list({Tree(is_max ? zeros_like(v) : weighted(v, w)), Tree(w)}));
  }
  Tree local = Tree::dict({{"grads", tree_map([&](const Array& g) { return weighted(g, weight); }, grads)},
                           {"loss", weighted(loss, weight)},
                           {"metrics", summed_metrics},
                           {"collections", collections}});
  if (loss_weight) local.set("weight", weight);
  const Tree total = dist::psum(local, axis, kGradientBucketBytes);
  const Array inv = loss_weight ? where(total["weight"].leaf() > 0.0, 1.0 / maximum(total["weight"].leaf(), 1e-30),
                                        zeros_like(total["weight"].leaf()))
                                : scalar(1.0f);
  GlobalBatch r;
  r.grads = tree_map([&](const Array& g) { return g * inv.astype(g.dtype()); }, total["grads"]);
  r.loss = total["loss"].leaf() * inv;
  r.metrics = Tree::dict();
  for (const auto& [name, pair] : total["metrics"].entries()) {
    const Array sum_w = pair[1].leaf();
    const Array value = maxima.contains(name) ? lax::pmax(maxima[name].leaf(), axis)
                                              : pair[0].leaf() / maximum(sum_w, 1e-30);
    r.metrics.set(name, Tree::list({Tree(value.astype(metrics[name][0].leaf().dtype())), Tree(sum_w)}));
  }
  // The process count is known when tracing: no collective for it.
  const double count = double(axis_size(axis));
  r.collections = tree_map([&](const Array& c) { return (c / count).astype(c.dtype()); }, total["collections"]);
  return r;
}

std::vector<bool> split_leaves(const Tree& local, const Tree& global) {
  const std::vector<Array> l = tree_leaves(local), g = tree_leaves(global);
  PAX_CHECK(l.size() == g.size(), "sharded train step: the params have ", l.size(), " arrays, the model declares ",
            g.size());
  std::vector<bool> split(l.size());
  for (size_t i = 0; i < l.size(); ++i) split[i] = l[i].shape() != g[i].aval().shape;
  return split;
}

Tree psum_leaves(const Tree& tree, const std::vector<bool>& pick, bool want, const std::string& axis) {
  if (axis.empty()) return tree;
  std::vector<Array> leaves = tree_leaves(tree);
  std::vector<Tree> chosen;
  for (size_t i = 0; i < leaves.size(); ++i)
    if (pick[i] == want) chosen.emplace_back(leaves[i]);
  if (chosen.empty()) return tree;
  const std::vector<Array> summed = tree_leaves(dist::psum(Tree::list(chosen), axis, kGradientBucketBytes));
  for (size_t i = 0, k = 0; i < leaves.size(); ++i)
    if (pick[i] == want) leaves[i] = summed[k++];
  return tree_unflatten(tree_structure(tree), leaves);
}

std::vector<Array> whole_squares(const Tree& tree, const nn::LeafSplits& splits, const nn::ShardingPlan& plan) {
  Tree squares = tree_map(
      [](const Array& x) { return sum(square(x.astype(promote_types(optim::moment_dtype(x.dtype()), DType::f32)))); },
      tree);
  if (!splits.data.empty()) squares = psum_leaves(squares, splits.data, true, plan.fsdp.axis);
  if (!splits.mdl.empty()) squares = psum_leaves(squares, splits.mdl, true, plan.tp.axis);
  if (!splits.stage.empty()) squares = psum_leaves(squares, splits.stage, true, plan.stage.axis);
  return tree_leaves(squares);
}

Tree with_norm_summaries(Tree summaries, const Tree& params, const Tree& grads, const nn::LeafSplits& splits,
                         const nn::ShardingPlan& plan) {
  if (!summaries.is_dict()) summaries = Tree::dict();
  const std::vector<std::string> paths = tree_paths(params);
  const std::vector<Array> p = whole_squares(params, splits, plan), g = whole_squares(grads, splits, plan);
  std::map<std::string, std::pair<Array, Array>> squares;  // group -> (sum p^2, sum g^2)
  for (size_t i = 0; i < paths.size(); ++i) {
    const size_t slash = paths[i].rfind('/');
    const std::string group = slash == std::string::npos ? "" : paths[i].substr(0, slash);
    const Array p2 = p[i].astype(DType::f32), g2 = g[i].astype(DType::f32);
    auto [it, fresh] = squares.emplace(group, std::make_pair(p2, g2));
    if (!fresh) it->second = {it->second.first + p2, it->second.second + g2};
  }
  for (const auto& [group, sq] : squares) {
    const std::string name = group.empty() ? "params" : group;
    summaries.set("param_norm/" + name, sqrt(sq.first));
    summaries.set("grad_norm/" + name, sqrt(sq.second));
  }
  return summaries;
}

Array aggregate_loss(const std::vector<LossTerm>& terms, const Tree& metrics, const std::string& model_name,
                     const std::string& axis, bool normalise, std::optional<Array>* loss_weight) {
  Array loss = scalar(0.0f);
  for (const LossTerm& t : terms) {
    PAX_CHECK(metrics.is_dict() && metrics.contains(t.metric), t.setting, " '", t.metric, "' is not a metric of ",
              model_name, "; its metrics: ", metrics.str());
    Array value = nn::metric_value(metrics, t.metric).astype(DType::f32);
    if (normalise) {
      const Array w = stop_gradient(nn::metric_weight(metrics, t.metric).astype(DType::f32));
      const Array total = lax::psum(w, axis);
      value = where(w > 0.0, value * (w / maximum(total, 1e-30)), zeros_like(value));
    }
    loss = loss + value * float(t.coefficient);
  }
  if (!axis.empty() && !normalise) *loss_weight = nn::metric_weight(metrics, terms.front().metric);
  return loss;
}

}  // namespace pax::train
