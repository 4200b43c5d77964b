"""Writes flax_state.msgpack with Flax's own serializer, for
pax/train/flax_msgpack_test.cc (which reads it, and checks that paxcc writes
the same tree to the same bytes).

    python3 -m pip install flax
    python3 pax/train/testdata/make_flax_fixture.py
"""
import os

import jax.numpy as jnp
import numpy as np
from flax import serialization

HERE = os.path.dirname(os.path.abspath(__file__))

state = {
    "params": {
        "dense": {
            "kernel": np.arange(6, dtype=np.float32).reshape(2, 3) / 4,
            "bias": np.array([-1.5, 0.0, 2.25], dtype=np.float32),
        },
        "embedding": np.array(jnp.array([[1.0, -2.0], [0.5, 3.0]], dtype=jnp.bfloat16)),
        "scale": np.array(2.5, dtype=np.float64),
    },
    "step": np.array(7, dtype=np.int32),
    "mask": np.array([True, False, True]),
    "ids": np.array([1, 2, 3], dtype=np.int64),
}

with open(os.path.join(HERE, "flax_state.msgpack"), "wb") as f:
    f.write(serialization.msgpack_serialize(state))
