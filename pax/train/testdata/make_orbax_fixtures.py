"""Writes the Orbax / Pax checkpoint fixtures that orbax_checkpoint_test.cc reads.

    python3 pax/train/testdata/make_orbax_fixtures.py   # orbax-checkpoint, tensorstore, jax

orbax_ocdbt/  orbax-checkpoint's default PyTree save (OCDBT database, zarr v2 arrays, zstd)
orbax_zarr/   the same tree saved with use_ocdbt=False (a directory per array)
pax_zarr/     an older Pax checkpoint: a directory per array named by its path joined
              with '.', written by TensorStore's zarr driver with small chunks (gzip,
              one chunk left unwritten so that it reads as the fill value)
ocdbt_deep/   an OCDBT database written by TensorStore with 400-byte nodes and a 16-byte
              inline limit: a B+tree of several levels, values in data files
The values are formulas the test recomputes.
"""
import os
import shutil

import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import tensorstore as ts

HERE = os.path.dirname(os.path.abspath(__file__))


def tree():
    return {
        "params": {
            "dense": {"kernel": np.arange(12, dtype=np.float32).reshape(3, 4) * 0.5,
                      "bias": np.array([1, 2, 3, 4], np.float32)},
            "emb": jnp.asarray(np.arange(6).reshape(2, 3) / 4, dtype=jnp.bfloat16),
            "layers": [{"w": np.arange(4, dtype=np.float64).reshape(2, 2) + 10 * i} for i in range(2)],
            "count": np.arange(3, dtype=np.int64),
            # Above Orbax's 1,024-byte inline limit: its chunk stays in
            # ocdbt.process_0/d/..., where the merged database refers to it.
            "table": np.sin(np.arange(1600, dtype=np.float64)).astype(np.float32).reshape(40, 40),
        },
        "step": np.int32(7),
    }


def save(name, **handler_args):
    path = os.path.join(HERE, name)
    shutil.rmtree(path, ignore_errors=True)
    ocp.Checkpointer(ocp.PyTreeCheckpointHandler(**handler_args)).save(path, tree())


def save_pax_zarr():
    path = os.path.join(HERE, "pax_zarr")
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    # (5, 7) f32 in (2, 3) chunks: 3 x 3 chunks, the edge ones partial.
    w = np.arange(35, dtype=np.float32).reshape(5, 7) - 17
    arr = ts.open({"driver": "zarr", "kvstore": {"driver": "file", "path": path + "/mdl_vars.params.lm.softmax.w"},
                   "metadata": {"shape": [5, 7], "chunks": [2, 3], "dtype": "<f4",
                                "compressor": {"id": "gzip", "level": 5}, "fill_value": 0}},
                  create=True).result()
    arr[...] = w
    os.remove(path + "/mdl_vars.params.lm.softmax.w/1.1")  # reads as fill_value 0
    b = ts.open({"driver": "zarr", "kvstore": {"driver": "file", "path": path + "/mdl_vars.params.lm.softmax.b"},
                 "metadata": {"shape": [7], "chunks": [7], "dtype": "<f4", "compressor": None}},
                create=True).result()
    b[...] = np.arange(7, dtype=np.float32)
    s = ts.open({"driver": "zarr", "kvstore": {"driver": "file", "path": path + "/step"},
                 "metadata": {"shape": [], "chunks": [], "dtype": "<i8", "compressor": {"id": "zlib", "level": 1}}},
                create=True).result()
    s[...] = np.int64(1000)


def save_ocdbt_deep():
    path = os.path.join(HERE, "ocdbt_deep")
    shutil.rmtree(path, ignore_errors=True)
    kv = ts.KvStore.open({"driver": "ocdbt", "base": "file://" + path + "/",
                          "config": {"max_decoded_node_bytes": 400, "max_inline_value_bytes": 16}}).result()
    txn = ts.Transaction()
    for i in range(120):
        kv.with_transaction(txn).write("group_%d/key_%03d" % (i % 4, i), ("value %d;" % i) * (1 + i % 5)).result()
    txn.commit_sync()


if __name__ == "__main__":
    save_ocdbt_deep()
    save("orbax_ocdbt")
    save("orbax_zarr", use_ocdbt=False)
    save_pax_zarr()
