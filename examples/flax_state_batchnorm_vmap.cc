// The Flax guide "Managing parameters and state", second example, as it
// reads there: an MLP with BatchNorm whose batch axis is named
// (axis_name="batch"), a per-example loss under vmap over that axis with the
// updated batch statistics out of it unmapped (out_axes=(0, None): BatchNorm
// averages its statistics over the axis with pmean, so they are the same for
// every example), and SGD on the parameters while the state is carried.
#include <cstdio>

#include "pax/pax.h"

using namespace pax;

// Dense -> BatchNorm -> relu, twice, then Dense, for one example (features,).
class MLP : public nn::Layer {
 public:
  struct HParams : nn::Layer::HParams {
    int64_t input_size = 0;
    int64_t hidden_size = 0;
    int64_t out_size = 0;
    PAX_HPARAMS(FlaxGuideMLP, nn::Layer::HParams, (input_size, "Features of an example."),
                (hidden_size, "Width of the hidden layers."), (out_size, "Outputs."));
  };
  // x: (input_size,) -> (out_size,); training mode comes from ApplyOptions::train.
  Array fprop(const Array& x) const override {
    Array h = x;
    for (size_t i = 0; i < norms_.size(); ++i) h = nn::relu(norms_[i]->fprop(denses_[i]->fprop(h)));
    return denses_.back()->fprop(h);
  }

 protected:
  void setup() override {
    const auto& hp = hparams<HParams>();
    auto dense = [&](int64_t in, int64_t out) {
      auto t = nn::tpl<nn::FeedForward>();
      t->input_dims = in;
      t->output_dims = out;
      t->activation_tpl = nn::tpl<nn::Identity>();
      return t;
    };
    // Flax's partial(nn.BatchNorm, use_running_average=not train,
    // momentum=0.9, epsilon=1e-5, axis_name="batch").
    auto norm = [&] {
      auto t = nn::tpl<nn::BatchNorm>();
      t->dim = hp.hidden_size;
      t->decay = 0.9;
      t->epsilon = 1e-5;
      t->axis_name = "batch";  // Name batch dim
      return t;
    };
    denses_ = {&create_child<nn::FeedForward>("dense_0", dense(hp.input_size, hp.hidden_size)),
               &create_child<nn::FeedForward>("dense_1", dense(hp.hidden_size, hp.hidden_size)),
               &create_child<nn::FeedForward>("dense_2", dense(hp.hidden_size, hp.out_size))};
    norms_ = {&create_child<nn::BatchNorm>("norm_0", norm()), &create_child<nn::BatchNorm>("norm_1", norm())};
  }

 private:
  std::vector<const nn::FeedForward*> denses_;
  std::vector<const nn::BatchNorm*> norms_;
};
PAX_REGISTER_LAYER(MLP);

int main() {
  MLP::HParams hp;
  hp.input_size = 4;
  hp.hidden_size = 10;
  hp.out_size = 1;
  auto model = nn::build<MLP>(hp);

  // A regression target: y = sum(x) + 1.
  const Array X = random::normal(random::key(1), {64, 4});  // (batch, features)
  const Array Y = sum(X, {1}, true) + 1.0;                  // (batch, 1)
  const Array dummy_input = zeros({4});                     // (features,)

  Tree variables = nn::init(*model, random::key(0), dummy_input);
  // Split state and params (which are updated by the optimizer).
  auto [state, params] = tree_pop(variables, "params");
  variables = Tree();  // as `del variables`

  const optim::GradientTransformation tx = optim::sgd(0.02);
  Tree opt_state = tx.init(params);

  auto update_step = jit([&](const Array& x_batch, const Array& y_batch, const Tree& opt_state, const Tree& params,
                             const Tree& state) {
    auto batch_loss = [&](const Tree& params) {
      auto loss_fn = [&](const Array& x, const Array& y) {
        auto out = nn::apply(*model, tree_merge(Tree::dict({{"params", params}}), state),
                             nn::ApplyOptions{.mutable_collections = state.keys(), .train = true}, x);
        return std::make_pair((out.output - y) * (out.output - y), out.updates);
      };
      auto [loss, updated_state] = vmap(loss_fn, {.out_axes = {0, std::nullopt},  // Do not vmap `updated_state`.
                                                  .axis_name = "batch"})(x_batch, y_batch);  // Name batch dim
      return std::make_pair(mean(loss), updated_state);
    };
    auto [loss_state, grads] = value_and_grad(batch_loss, has_aux)(params);
    auto [updates, new_opt_state] = tx.update(grads, opt_state, params);
    return std::make_tuple(new_opt_state, optim::apply_updates(params, updates), loss_state.second, loss_state.first);
  });

  const int num_epochs = 200;
  for (int epoch = 0; epoch < num_epochs; ++epoch) {
    auto [new_opt_state, new_params, new_state, loss] = update_step(X, Y, opt_state, params, state);
    opt_state = new_opt_state;
    params = new_params;
    state = new_state;
    if (epoch % 40 == 0 || epoch == num_epochs - 1) std::printf("epoch %3d  loss %.4f\n", epoch, loss.item<float>());
  }
  // The batch statistics came out of vmap unmapped: one per feature.
  const Array moving_mean = state["batch_stats"]["norm_0"]["moving_mean"].leaf();
  std::printf("norm_0 moving_mean %s (no batch axis)\n", moving_mean.aval().str().c_str());

  // Evaluation: the moving statistics normalise each example (train = false).
  Array pred = vmap([&](const Array& x) {
    return nn::apply(*model, tree_merge(Tree::dict({{"params", params}}), state), x).output;
  })(X);
  const float mse = mean((pred - Y) * (pred - Y)).item<float>();
  std::printf("eval mse %.4f; below 0.05: %s\n", mse, mse < 0.05f ? "yes" : "no");
  return 0;
}
