// The Flax guide "Managing parameters and state", first example, as it
// reads there: a layer with a parameter (`bias`) and a state variable
// (`batch_stats/mean`, a running mean of its inputs), its variables split
// into the state and the parameters the optimizer updates
// (flax.core.pop(variables, 'params')), put back together for every apply
// ({'params': params, **state}) with the state mutable, and trained with SGD
// on a dummy loss.
#include <cstdio>

#include "pax/pax.h"

using namespace pax;

// BiasAdderWithRunningMean: y = running mean of x + bias. Flax infers the
// variables' shape from the first input; a paxcc layer declares them in
// setup() from its HParams (dims).
class BiasAdderWithRunningMean : public nn::Layer {
 public:
  struct HParams : nn::Layer::HParams {
    int64_t dims = 0;
    double momentum = 0.9;
    PAX_HPARAMS(BiasAdderWithRunningMean, nn::Layer::HParams, (dims, "Depth of the input."),
                (momentum, "Weight of the old running mean in each update."));
  };
  // x: (batch, dims) -> (1, dims)
  Array fprop(const Array& x) const override {
    const auto& hp = hparams<HParams>();
    Array mean = variable("batch_stats", "mean");  // (1, dims)
    // Flax's `is_initialized = self.has_variable('batch_stats', 'mean')`
    // skips the update while init creates the variable; paxcc declares its
    // variables before the forward pass, and init is the pass to skip.
    if (!is_initializing()) {
      mean = hp.momentum * mean + (1.0 - hp.momentum) * pax::mean(x, {0}, true);
      update_variable("batch_stats", "mean", mean);
    }
    return mean + theta("bias");
  }

 protected:
  void setup() override {
    const auto& hp = hparams<HParams>();
    create_variable("mean",
                    nn::WeightHParams{Shape{1, hp.dims}, nn::WeightInit::constant(0.0), std::nullopt, "batch_stats"});
    create_variable("bias", nn::WeightHParams{Shape{1, hp.dims}, nn::WeightInit::constant(0.0)});
  }
};
PAX_REGISTER_LAYER(BiasAdderWithRunningMean);

int main() {
  BiasAdderWithRunningMean::HParams hp;
  hp.dims = 3;
  auto model = nn::build<BiasAdderWithRunningMean>(hp);
  const Array dummy_input = random::normal(random::key(1), {8, 3}) + 2.0;  // (batch, dims)

  Tree variables = nn::init(*model, random::key(0), dummy_input);
  // Split state and params (which are updated by the optimizer).
  auto [state, params] = tree_pop(variables, "params");
  variables = Tree();  // as `del variables`

  const optim::GradientTransformation tx = optim::sgd(0.02);
  Tree opt_state = tx.init(params);

  auto update_step = jit([&](const Array& x, const Tree& opt_state, const Tree& params, const Tree& state) {
    auto loss = [&](const Tree& params) {
      auto out = nn::apply(*model, tree_merge(Tree::dict({{"params", params}}), state),
                           nn::ApplyOptions{.mutable_collections = state.keys()}, x);
      Array l = sum((x - out.output) * (x - out.output));  // Replace with your loss here.
      return std::make_pair(l, out.updates);
    };
    auto [l_state, grads] = value_and_grad(loss, has_aux)(params);
    auto [updates, new_opt_state] = tx.update(grads, opt_state, params);
    return std::make_tuple(new_opt_state, optim::apply_updates(params, updates), l_state.second, l_state.first);
  });

  const int num_epochs = 100;
  for (int epoch = 0; epoch < num_epochs; ++epoch) {
    auto [new_opt_state, new_params, new_state, l] = update_step(dummy_input, opt_state, params, state);
    opt_state = new_opt_state;
    params = new_params;
    state = new_state;
    if (epoch % 20 == 0 || epoch == num_epochs - 1) {
      std::printf("epoch %3d  loss %8.4f  running mean[0] %.4f  bias[0] %.4f\n", epoch, l.item<float>(),
                  state["batch_stats"]["mean"].leaf().to_vector<float>()[0],
                  params["bias"].leaf().to_vector<float>()[0]);
    }
  }
  // The running mean approaches the inputs' mean, and the bias what is left.
  const Array gap = max(abs(state["batch_stats"]["mean"].leaf() - mean(dummy_input, {0}, true)));
  std::printf("input mean[0] %.4f; the running mean matches the input mean: %s\n",
              mean(dummy_input, {0}).to_vector<float>()[0], gap.item<float>() < 1e-3f ? "yes" : "no");
  return 0;
}
