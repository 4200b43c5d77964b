#!/usr/bin/env python3
"""JAX peer of bench/gpt_step: one jitted training step of a GPT-style decoder LM.

    python3 bench/peers/jax_gpt.py [--dtype f32|bf16] [--layers 4] [--d 256] [--heads 4]
        [--seq 256] [--batch 8] [--vocab 4096] [--steps 10] [--threads 2]
        [--device cpu|cuda] [--sdpa] [--trace]

The model, loss and optimizer of bench/gpt_step.cc and torch_gpt.py, written as pure
functions over a parameter tree: tied token embedding (no output bias), learnt
positions, pre-LN blocks (LayerNorm eps 1e-5, fused QKV, causal attention, tanh GELU
MLP of width 4 d, biases everywhere), final LayerNorm, mean cross entropy of f32 logits
(optax.softmax_cross_entropy_with_integer_labels), optax.adamw(3e-4, weight decay 0.01
as PyTorch's default and gpt_step use). The whole step (value_and_grad, AdamW, update)
is one jax.jit with the parameters and optimizer state donated. --dtype bf16 casts the
f32 parameters to bf16 inside the loss, as autocast does; layer norms take their
statistics in f32.

There is no --compile: the step is always compiled by XLA. --sdpa uses
jax.nn.dot_product_attention (cuDNN's fused attention on a GPU). --threads N pins the
process to N of the CPUs it may run on before JAX starts, which sizes XLA's CPU thread
pool (XLA has no thread-count setting of its own); on --device cuda it is ignored.

Measured as gpt_step and torch_gpt.py measure: 2 warm-up steps (tracing and compiling
included), then the mean wall time of --steps steps, the last one waited for; model
FLOPs per step are 6 N + 6 L d T per token (the causal half of PaLM's attention
term) times B T tokens.
"""
import argparse
import math
import os
import sys
import time


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text}")
    return value


def parse_args():
    p = argparse.ArgumentParser(description="JAX peer of bench/gpt_step (one GPT training step).")
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    for name, default in [("layers", 4), ("d", 256), ("heads", 4), ("seq", 256), ("batch", 8),
                          ("vocab", 4096), ("steps", 10), ("threads", 2)]:
        p.add_argument(f"--{name}", type=positive, default=default)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--sdpa", action="store_true", help="attention through jax.nn.dot_product_attention")
    p.add_argument("--trace", action="store_true", help="print every step's loss and time to stderr")
    a = p.parse_args()
    if a.d % a.heads:
        p.error(f"--heads ({a.heads}) must divide --d ({a.d})")
    return a


a = parse_args()
if a.device == "cpu":
    # Before jax is imported: XLA sizes its CPU thread pool from the CPUs the
    # process may run on.
    allowed = sorted(os.sched_getaffinity(0))
    if a.threads < len(allowed):
        os.sched_setaffinity(0, allowed[:a.threads])
    threads = min(a.threads, len(allowed))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import optax  # noqa: E402

try:
    device = jax.devices("gpu" if a.device == "cuda" else "cpu")[0]
except RuntimeError as e:
    sys.exit(f"jax_gpt.py: --device {a.device}: no such JAX device ({e}); the CUDA build of jax is needed for cuda")
compute_dtype = jnp.bfloat16 if a.dtype == "bf16" else jnp.float32
D, H, T, V = a.d, a.heads, a.seq, a.vocab


def init_params(key):
    """GPT-2's initialisation (N(0, 0.02) weights, zero biases, unit gains), as torch_gpt.py."""
    keys = iter(jax.random.split(key, 2 + 4 * a.layers))

    def normal(*shape):
        return 0.02 * jax.random.normal(next(keys), shape, jnp.float32)

    def norm():
        return {"scale": jnp.ones(D), "bias": jnp.zeros(D)}

    def block():
        return {"ln1": norm(), "qkv_w": normal(D, 3 * D), "qkv_b": jnp.zeros(3 * D),
                "proj_w": normal(D, D), "proj_b": jnp.zeros(D), "ln2": norm(),
                "fc_w": normal(D, 4 * D), "fc_b": jnp.zeros(4 * D),
                "out_w": normal(4 * D, D), "out_b": jnp.zeros(D)}

    return {"tok": normal(V, D), "pos": normal(T, D), "blocks": [block() for _ in range(a.layers)],
            "ln_f": norm()}


def layer_norm(x, p):
    x32 = x.astype(jnp.float32)
    mean = x32.mean(-1, keepdims=True)
    var = jnp.square(x32 - mean).mean(-1, keepdims=True)
    y = (x32 - mean) * jax.lax.rsqrt(var + 1e-5)
    return (y * p["scale"].astype(jnp.float32) + p["bias"].astype(jnp.float32)).astype(x.dtype)


CAUSAL = jnp.tril(jnp.ones((T, T), dtype=bool))  # True where a query may see a key


def attend(x, p):
    b = x.shape[0]
    hd = D // H
    qkv = (layer_norm(x, p["ln1"]) @ p["qkv_w"] + p["qkv_b"]).reshape(b, T, 3, H, hd)
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]  # [B, T, H, hd]
    if a.sdpa:
        y = jax.nn.dot_product_attention(q, k, v, is_causal=True)
    else:
        logits = jnp.einsum("bqhd,bkhd->bhqk", q, k) * (1.0 / math.sqrt(hd))
        logits = jnp.where(CAUSAL, logits, -jnp.inf)
        y = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(logits, axis=-1), v)
    return y.reshape(b, T, D) @ p["proj_w"] + p["proj_b"]


def decoder_block(x, p):
    x = x + attend(x, p)
    h = jax.nn.gelu(layer_norm(x, p["ln2"]) @ p["fc_w"] + p["fc_b"], approximate=True)
    return x + h @ p["out_w"] + p["out_b"]


def loss_fn(params, ids, labels):
    p = jax.tree_util.tree_map(lambda w: w.astype(compute_dtype), params)
    x = p["tok"][ids] + p["pos"][None]
    for block_params in p["blocks"]:
        x = decoder_block(x, block_params)
    logits = (layer_norm(x, p["ln_f"]) @ p["tok"].T).astype(jnp.float32)  # tied output projection
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean()


optimizer = optax.adamw(3e-4, b1=0.9, b2=0.999, eps=1e-8, weight_decay=0.01)


def train_step(params, opt_state, ids, labels):
    loss, grads = jax.value_and_grad(loss_fn)(params, ids, labels)
    updates, opt_state = optimizer.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss


def main():
    with jax.default_device(device):
        params = init_params(jax.random.key(0))
        opt_state = optimizer.init(params)
        id_key, label_key = jax.random.split(jax.random.key(1))
        ids = jax.random.randint(id_key, (a.batch, T), 0, V)
        labels = jax.random.randint(label_key, (a.batch, T), 0, V)
        n_params = sum(leaf.size for leaf in jax.tree_util.tree_leaves(params))
        step = jax.jit(train_step, donate_argnums=(0, 1))

        def run(index):
            nonlocal params, opt_state
            start = time.perf_counter()
            params, opt_state, loss = step(params, opt_state, ids, labels)
            if a.trace:
                value = float(loss)  # waits for the step
                print(f"step {index} loss {value:.4f} {(time.perf_counter() - start) * 1e3:.1f} ms", file=sys.stderr)
            return loss

        for i in range(2):  # warm-up: tracing and XLA compilation
            run(i).block_until_ready()
        start = time.perf_counter()
        for i in range(a.steps):
            loss = run(2 + i)
        loss = float(loss)  # waits for the last step (the steps run in order)
        seconds = (time.perf_counter() - start) / a.steps

    tokens = a.batch * T
    flops = (6 * n_params + 6 * a.layers * D * T) * tokens
    where = f"threads={threads}" if a.device == "cpu" else "threads=-"
    print(f"jax {jax.__version__} device={device.device_kind.replace(' ', '_')} {where} sdpa={int(a.sdpa)} "
          f"{a.dtype} params={n_params} ms/step={seconds * 1e3:.1f} tokens/s={tokens / seconds:.0f} "
          f"model_GFLOP/s={flops / seconds / 1e9:.1f} loss={loss:.3f}")


if __name__ == "__main__":
    main()
