"""Writes flax_state.msgpack (and flax_chunked.msgpack: an array above a
MAX_CHUNK_SIZE set to 64 bytes, so that Flax writes it in chunks) with Flax's own serializer, for
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

# Flax chunks arrays above MAX_CHUNK_SIZE (2**30 bytes); at 64 bytes a
# 40-element f32 array becomes three chunks of 16, 16 and 8 elements.
serialization.MAX_CHUNK_SIZE = 64
chunked = {"w": np.arange(40, dtype=np.float32).reshape(5, 8) - 3.5, "b": np.array([1.0, 2.0], dtype=np.float32)}
with open(os.path.join(HERE, "flax_chunked.msgpack"), "wb") as f:
    f.write(serialization.msgpack_serialize(chunked))
