#!/usr/bin/env python3
"""PyTorch peer of paxcc's vision.FashionMnistMlp and vision.FashionMnistCnn.

    /usr/bin/python3 bench/peers/torch_fmnist.py [--model mlp|cnn] [--epochs 8] [--batch 128]
        [--threads 2] [--max_batches 0] [--dir /usr/share/datasets/fashion-mnist]

The models, input and optimizer of pax/experiments/vision/fashion_mnist.cc:
  mlp: flatten, dense 784-512 ReLU, 512-512 ReLU, 512-10;
  cnn: 3x3 conv 1->32 (same padding, bias) ReLU, 2x2 max pool, 3x3 conv 32->64 ReLU,
       2x2 max pool, flatten (7x7x64), dropout 0.25, dense 3136-256 ReLU, dropout 0.4,
       dense 256-10;
pixels scaled to [0, 1] then standardised with the training set's mean 0.2860 and
standard deviation 0.3530, batches of 128 drawn from a fresh shuffle each epoch, mean
softmax cross entropy, Adam (1e-3, betas 0.9 / 0.999, eps 1e-8) whose learning rate
ramps linearly from 0 over 100 steps and then decays exponentially to 0.05 of its peak
at the last step of --epochs epochs (Praxis's LinearRampupExponentialDecay, as
adam_with_rampup builds it). The images are the IDX files of Debian's
dataset-fashion-mnist.

images/s is the number of images trained on divided by the training time (the
shuffles, batch gathers, forward, backward and updates; not the file reading or the
test pass), as one epoch of `paxcc --exp=vision.FashionMnistCnn` is compared against
it. --max_batches N stops each epoch after N batches, for a short run. Progress (each
epoch's mean loss and time) goes to stderr; the result line to stdout.
"""
import argparse
import gzip
import math
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

PIXEL_MEAN, PIXEL_STDDEV = 0.2860, 0.3530
TRAIN_EXAMPLES = 60000


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text}")
    return value


def non_negative(text):
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text}")
    return value


def parse_args():
    p = argparse.ArgumentParser(description="PyTorch peer of vision.FashionMnistMlp / FashionMnistCnn.")
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--epochs", type=positive, default=8)
    p.add_argument("--batch", type=positive, default=128)
    p.add_argument("--threads", type=positive, default=2)
    p.add_argument("--max_batches", type=non_negative, default=0, help="batches per epoch at most (0: all)")
    p.add_argument("--dir", default="/usr/share/datasets/fashion-mnist")
    return p.parse_args()


def read_idx(path):
    """An IDX file (gzip'd): magic 0 0 type rank, rank big-endian u32 sizes, then u8 data."""
    try:
        with gzip.open(path, "rb") as f:
            data = f.read()
    except FileNotFoundError:
        sys.exit(f"torch_fmnist.py: {path} not found: install Debian's dataset-fashion-mnist or pass --dir")
    if len(data) < 4 or data[0] != 0 or data[1] != 0 or data[2] != 0x08:
        sys.exit(f"torch_fmnist.py: {path} is not an IDX file of unsigned bytes")
    rank = data[3]
    sizes = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(rank)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * rank).reshape(sizes)


def load(directory, split):
    images = read_idx(f"{directory}/{split}-images-idx3-ubyte.gz")
    labels = read_idx(f"{directory}/{split}-labels-idx1-ubyte.gz")
    x = (torch.from_numpy(images.astype(np.float32)) / 255.0 - PIXEL_MEAN) / PIXEL_STDDEV
    return x.unsqueeze(1), torch.from_numpy(labels.astype(np.int64))  # [N, 1, 28, 28], [N]


def build_model(kind):
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 512), nn.ReLU(), nn.Linear(512, 512), nn.ReLU(),
                             nn.Linear(512, 10))
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # 32x14x14
        nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),  # 64x7x7
        nn.Flatten(), nn.Dropout(0.25), nn.Linear(7 * 7 * 64, 256), nn.ReLU(), nn.Dropout(0.4), nn.Linear(256, 10))


def rampup_exponential_decay(warmup_steps, decay_end, min_ratio):
    """The learning-rate factor at a step count: linear from 0 to 1 over warmup_steps,
    1 for one step, then exp-linear from 1 to min_ratio by decay_end."""
    decay_start = warmup_steps + 1
    length = max(decay_end - decay_start, 1)

    def factor(count):
        if count < warmup_steps:
            return count / warmup_steps
        if count < decay_start:
            return 1.0
        ratio = min((count - decay_start) / length, 1.0)
        return math.exp(ratio * math.log(min_ratio))

    return factor


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    x, y = load(a.dir, "train")
    x_test, y_test = load(a.dir, "t10k")

    model = build_model(a.model)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-8)
    total_steps = a.epochs * TRAIN_EXAMPLES // a.batch
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, rampup_exponential_decay(100, total_steps, 0.05))

    batches = len(x) // a.batch  # the last partial batch is dropped
    if a.max_batches:
        batches = min(batches, a.max_batches)
    images = 0
    train_seconds = 0.0
    for epoch in range(a.epochs):
        model.train()
        start = time.perf_counter()
        order = torch.randperm(len(x))
        loss_sum = torch.zeros(())
        for i in range(batches):
            chosen = order[i * a.batch:(i + 1) * a.batch]
            loss = F.cross_entropy(model(x[chosen]), y[chosen])
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            schedule.step()
            loss_sum += loss.detach()
        seconds = time.perf_counter() - start
        train_seconds += seconds
        images += batches * a.batch
        print(f"epoch {epoch + 1} mean loss {loss_sum.item() / batches:.4f} {seconds:.2f} s", file=sys.stderr)

    model.eval()
    with torch.no_grad():
        correct = sum(int((model(x_test[i:i + 1000]).argmax(1) == y_test[i:i + 1000]).sum())
                      for i in range(0, len(x_test), 1000))
    print(f"torch {torch.__version__} {a.model} epochs={a.epochs} batches/epoch={batches} "
          f"s/epoch={train_seconds / a.epochs:.2f} images/s={images / train_seconds:.0f} "
          f"test_acc={correct / len(x_test):.4f}")


if __name__ == "__main__":
    main()
