#!/usr/bin/env python3
"""PyTorch peer of bench/gpt_step: one training step of a GPT-style decoder LM.

    /usr/bin/python3 bench/peers/torch_gpt.py [--dtype f32|bf16] [--layers 4] [--d 256]
        [--heads 4] [--seq 256] [--batch 8] [--vocab 4096] [--steps 10] [--threads 2]
        [--device cpu|cuda] [--sdpa] [--compile] [--trace]

The model and step are those of bench/gpt_step.cc: a learnt token embedding that is
also the output projection (tied, no output bias), a learnt position table of --seq
rows, --layers pre-LN blocks (LayerNorm eps 1e-5, one fused QKV projection, causal
softmax attention, an MLP of width 4 d with tanh-approximated GELU, biases on every
projection), a final LayerNorm, the mean cross entropy of f32 logits, and AdamW
(lr 3e-4, weight decay 0.01, eps 1e-8). One fixed random batch of token ids and labels
is reused every step, so the loss falls as the model memorises it. --dtype bf16 is
autocast's mixed precision: f32 parameters and optimizer, bf16 products, f32 loss.

The measurement: 2 warm-up steps (3 with --compile), then the mean wall time of
--steps steps, each ending when its loss reaches the host. Model FLOPs per step are
6 N + 6 L d T per token times B T tokens (N parameters; the causal half of PaLM's
12 L d T attention term), as gpt_step counts them. The printed line has the fields of gpt_step's line.

--sdpa (fused scaled_dot_product_attention) and --compile (torch.compile) need
torch >= 2. The f32 step runs its products through the BLAS that torch loads; under
Debian's python3-torch that must be OpenBLAS (libopenblas0-pthread) for the figure
to mean anything, and the script warns when it is not.
"""
import argparse
import inspect
import math
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text}")
    return value


def parse_args():
    p = argparse.ArgumentParser(description="PyTorch peer of bench/gpt_step (one GPT training step).")
    p.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    for name, default in [("layers", 4), ("d", 256), ("heads", 4), ("seq", 256), ("batch", 8),
                          ("vocab", 4096), ("steps", 10), ("threads", 2)]:
        p.add_argument(f"--{name}", type=positive, default=default)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--sdpa", action="store_true", help="attention through F.scaled_dot_product_attention")
    p.add_argument("--compile", action="store_true", help="run the model through torch.compile")
    p.add_argument("--trace", action="store_true", help="print every step's loss and time to stderr")
    a = p.parse_args()
    if a.d % a.heads:
        p.error(f"--heads ({a.heads}) must divide --d ({a.d})")
    if a.sdpa and not hasattr(F, "scaled_dot_product_attention"):
        p.error(f"--sdpa needs torch >= 2 (scaled_dot_product_attention); this is torch {torch.__version__}")
    if a.compile and not hasattr(torch, "compile"):
        p.error(f"--compile needs torch >= 2 (torch.compile); this is torch {torch.__version__}")
    if a.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: this torch sees no CUDA device (use --device cpu)")
    return a


class Block(nn.Module):
    """Pre-LN decoder block: x + attn(ln1(x)), then + mlp(ln2(x))."""

    def __init__(self, d, heads, seq, sdpa):
        super().__init__()
        self.heads, self.sdpa = heads, sdpa
        self.ln1 = nn.LayerNorm(d, eps=1e-5)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d, eps=1e-5)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)
        # Built once: True where a query may see a key (the key is not in its future).
        self.register_buffer("causal", torch.ones(seq, seq, dtype=torch.bool).tril(), persistent=False)

    def attend(self, x):
        b, t, d = x.shape
        hd = d // self.heads
        # [B, T, 3 d] -> three [B, H, T, hd]
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, hd).permute(2, 0, 3, 1, 4)
        if self.sdpa:
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            logits = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
            logits = logits.masked_fill(~self.causal[:t, :t], float("-inf"))
            y = torch.matmul(torch.softmax(logits, dim=-1), v)
        return self.proj(y.transpose(1, 2).reshape(b, t, d))

    def forward(self, x):
        x = x + self.attend(x)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.vocab = a.vocab
        self.tok = nn.Embedding(a.vocab, a.d)
        self.pos = nn.Embedding(a.seq, a.d)
        self.blocks = nn.ModuleList(Block(a.d, a.heads, a.seq, a.sdpa) for _ in range(a.layers))
        self.ln_f = nn.LayerNorm(a.d, eps=1e-5)
        # GPT-2's initialisation, so that the first loss is about log(vocab): the
        # step's time does not depend on it.
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
            if isinstance(module, nn.Linear):
                nn.init.zeros_(module.bias)

    def forward(self, ids, labels):
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.tok(ids) + self.pos(positions)
        for block in self.blocks:
            x = block(x)
        logits = torch.matmul(self.ln_f(x), self.tok.weight.t())  # tied output projection
        return F.cross_entropy(logits.float().reshape(-1, self.vocab), labels.reshape(-1))


def blas_name():
    """The directory of the libblas.so.3 this process mapped (Debian's alternatives
    put each implementation in its own: openblas-pthread, blas, ...)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "/libblas.so" in path:
                return path.split("/")[-2]
    return "unknown"


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    device = torch.device(a.device)

    model = Gpt(a).to(device)
    n_params = sum(p.numel() for p in model.parameters())
    adamw_options = dict(lr=3e-4, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    if device.type == "cuda" and "fused" in inspect.signature(torch.optim.AdamW).parameters:
        adamw_options["fused"] = True  # one kernel for the whole update (torch >= 2)
    optimizer = torch.optim.AdamW(model.parameters(), **adamw_options)
    forward = torch.compile(model) if a.compile else model
    ids = torch.randint(0, a.vocab, (a.batch, a.seq), device=device)
    labels = torch.randint(0, a.vocab, (a.batch, a.seq), device=device)
    bf16 = a.dtype == "bf16"

    step_index = 0

    def step():
        nonlocal step_index
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = forward(ids, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        value = loss.item()  # waits for the step
        if a.trace:
            print(f"step {step_index} loss {value:.4f} {(time.perf_counter() - start) * 1e3:.1f} ms", file=sys.stderr)
        step_index += 1
        return value

    for _ in range(3 if a.compile else 2):  # warm-up: allocations, autotuning, compilation
        step()
    start = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    seconds = (time.perf_counter() - start) / a.steps

    tokens = a.batch * a.seq
    flops = (6 * n_params + 6 * a.layers * a.d * a.seq) * tokens
    if device.type == "cuda":
        backend = torch.cuda.get_device_name(device).replace(" ", "_")
    else:
        backend = blas_name()
        if not bf16 and backend not in ("openblas-pthread", "openblas-openmp", "openblas-serial"):
            print(f"torch_gpt.py: warning: torch's f32 products run on BLAS '{backend}', not OpenBLAS; "
                  "install libopenblas0-pthread for a fair f32 figure", file=sys.stderr)
    print(f"torch {torch.__version__} blas={backend} device={a.device} sdpa={int(a.sdpa)} compile={int(a.compile)} "
          f"{a.dtype} params={n_params} ms/step={seconds * 1e3:.1f} tokens/s={tokens / seconds:.0f} "
          f"model_GFLOP/s={flops / seconds / 1e9:.1f} loss={loss:.3f}")


if __name__ == "__main__":
    main()
