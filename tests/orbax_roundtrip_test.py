"""Round trips through real Orbax and Flax, where they are importable (exit 77,
a skip, where not): random trees saved by orbax-checkpoint (its default OCDBT
database, and a zarr directory per array) and by TensorStore's zarr driver in
an older Pax layout (small chunks, gzip) are converted by `paxcc import` and
read back with flax.serialization.msgpack_restore; every array must be equal
in dtype, shape and bits.

usage: python3 orbax_roundtrip_test.py PAXCC
"""
import os
import shutil
import subprocess
import sys
import tempfile

try:
    import jax.numpy as jnp
    import numpy as np
    import orbax.checkpoint as ocp
    import tensorstore as ts
    from flax import serialization
except ImportError as e:  # CI machines need not have them
    print("skipped: %s" % e)
    sys.exit(77)

paxcc = sys.argv[1]
rng = np.random.default_rng(20261128)
failures = []


def random_tree():
    return {
        "params": {
            "lm": {
                "softmax": {"w": rng.standard_normal((37, 129), dtype=np.float32),  # several KB: data files
                            "b": rng.standard_normal(129).astype(np.float32)},
                "emb": jnp.asarray(rng.standard_normal((5, 8)), dtype=jnp.bfloat16),
                "layers": [{"w": rng.standard_normal((3, 3))} for _ in range(3)],
            },
            "counts": rng.integers(-2**40, 2**40, size=(4,), dtype=np.int64),
            "ids": rng.integers(-1000, 1000, size=(2, 3), dtype=np.int32),
        },
        "step": np.int32(rng.integers(1, 10**6)),
    }


def flat(tree, prefix=""):
    out = {}
    if isinstance(tree, dict):
        for k, v in tree.items():
            out.update(flat(v, prefix + "/" + str(k)))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            out.update(flat(v, prefix + "/" + str(i)))
    else:
        out[prefix] = np.asarray(tree)
    return out


def check(name, saved_tree, directory):
    out = os.path.join(work, name + ".msgpack")
    run = subprocess.run([paxcc, "import", "--from=" + directory, "--out=" + out], capture_output=True, text=True)
    if run.returncode != 0:
        failures.append("%s: paxcc import failed: %s" % (name, run.stderr.strip()))
        return
    got = flat(serialization.msgpack_restore(open(out, "rb").read()))
    want = flat(saved_tree)
    if sorted(got) != sorted(want):
        failures.append("%s: paths differ: %s vs %s" % (name, sorted(got), sorted(want)))
        return
    for path, w in want.items():
        g = got[path]
        if g.dtype != w.dtype or g.shape != w.shape or g.tobytes() != w.tobytes():
            failures.append("%s: %s differs (%s %s vs %s %s)" % (name, path, g.dtype, g.shape, w.dtype, w.shape))
    print("%s: %d arrays equal" % (name, len(want)))


work = tempfile.mkdtemp(prefix="pax_orbax_roundtrip_")
try:
    for name, args in (("ocdbt", {}), ("zarr", {"use_ocdbt": False})):
        tree = random_tree()
        directory = os.path.join(work, name)
        ocp.Checkpointer(ocp.PyTreeCheckpointHandler(**args)).save(directory, tree)
        check(name, tree, directory)
    # Pax's older layout: a zarr directory per array named by its dotted path.
    directory = os.path.join(work, "pax")
    w = rng.standard_normal((11, 13)).astype(np.float32)
    arr = ts.open({"driver": "zarr", "kvstore": {"driver": "file", "path": directory + "/mdl_vars.params.w"},
                   "metadata": {"shape": [11, 13], "chunks": [4, 5], "dtype": "<f4",
                                "compressor": {"id": "gzip", "level": 3}}}, create=True).result()
    arr[...] = w
    check("pax", {"mdl_vars": {"params": {"w": w}}}, directory)
finally:
    shutil.rmtree(work, ignore_errors=True)

for f in failures:
    print("FAIL: " + f)
sys.exit(1 if failures else 0)
