"""The seed's flax.training.train_state example, with the values it prints.

examples/flax_train_state.cc holds the kernel printed below, and the ctest
example_flax_train_state expects the two losses it prints. The seed's
values come from JAX's earlier threefry key derivation (before
jax_threefry_partitionable became the default), which this script selects.

    python3 pax/train/testdata/make_train_state_fixture.py
"""
import jax

jax.config.update("jax_threefry_partitionable", False)

import flax.linen as nn
import jax.numpy as jnp
import numpy as np
import optax
from flax.training.train_state import TrainState

x = jnp.ones((1, 2))
y = jnp.ones((1, 2))
model = nn.Dense(2)
variables = model.init(jax.random.key(0), x)
tx = optax.adam(1e-3)
state = TrainState.create(apply_fn=model.apply, params=variables["params"], tx=tx)


def loss_fn(params, x, y):
    predictions = state.apply_fn({"params": params}, x)
    return optax.l2_loss(predictions=predictions, targets=y).mean()


print("loss before:", repr(loss_fn(state.params, x, y)))  # Array(3.3514676, dtype=float32)
grads = jax.grad(loss_fn)(state.params, x, y)
state = state.apply_gradients(grads=grads)
print("loss after: ", repr(loss_fn(state.params, x, y)))  # Array(3.343844, dtype=float32)
print("kernel:", [float.hex(float(v)) for v in np.asarray(variables["params"]["kernel"], np.float64).ravel()])
print("bias:  ", np.asarray(variables["params"]["bias"]).tolist())
