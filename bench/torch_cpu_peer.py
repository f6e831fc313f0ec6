#!/usr/bin/env python3
"""PyTorch CPU peer of hvtrain's Fashion-MNIST job (job and method: /work/shared/PEERS.md).

One process, eager PyTorch, the same data files (data/fashion-mnist-{train,test}.h5), model
(Linear layers with --activation between them, ReLU by default; PyTorch's default init), loss
(softmax cross-entropy), optimizer (SGD lr 0.05 momentum 0.9) and global batch (256, reshuffled every epoch, the last short batch kept, as
hvtrain does). --precision bf16 runs forward and loss under
torch.autocast("cpu", dtype=torch.bfloat16) (the matrix products in bf16, float32 master
weights), the way a PyTorch user asks for mixed precision on a CPU.

  bench/.venv-torch/bin/python bench/torch_cpu_peer.py --layers 784,512,512,10 --epochs 6 --threads 2

Prints one line: PEER_RESULT {json} with samples_per_sec (median over the epochs after the
first) and its min/max, every epoch's rate, time_to_first_step_s (from process start),
peak_rss_mb and test_accuracy.
"""
import argparse
import json
import os
import resource
import statistics
import time


from peer_clock import process_start_time  # noqa: E402 (bench/, the script's own folder)

T0 = process_start_time()

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--layers", default="784,512,512,10")
ap.add_argument("--epochs", type=int, default=6)
ap.add_argument("--global-batch", type=int, default=256)
ap.add_argument("--threads", type=int, default=2)
ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
ap.add_argument("--lr", type=float, default=0.05)
ap.add_argument("--data-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data"))
ap.add_argument("--seed", type=int, default=42)
ap.add_argument("--activation", default="relu",
                choices=["relu", "tanh", "gelu", "silu", "sigmoid", "softplus", "elu", "selu", "leaky_relu"],
                help="the hidden layers' activation, as hvtrain's model.activation (gelu: the tanh approximation, "
                     "leaky_relu: slope 0.2)")
args = ap.parse_args()
if args.epochs < 2:
    ap.error("--epochs must be >= 2 (the first epoch is left out of the rate)")

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(args.threads)
torch.manual_seed(args.seed)


def load(split):
    with h5py.File(os.path.join(args.data_dir, f"fashion-mnist-{split}.h5"), "r") as f:
        return torch.from_numpy(f["x"][...].astype(np.float32)), torch.from_numpy(f["y"][...].astype(np.int64))


ACTIVATIONS = {
    "relu": torch.nn.ReLU, "tanh": torch.nn.Tanh, "gelu": lambda: torch.nn.GELU(approximate="tanh"),
    "silu": torch.nn.SiLU, "sigmoid": torch.nn.Sigmoid, "softplus": torch.nn.Softplus, "elu": torch.nn.ELU,
    "selu": torch.nn.SELU, "leaky_relu": lambda: torch.nn.LeakyReLU(0.2),
}
x_train, y_train = load("train")
x_test, y_test = load("test")
sizes = [int(s) for s in args.layers.split(",")]
mods = []
for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
    mods.append(torch.nn.Linear(a, b))
    if i < len(sizes) - 2:
        mods.append(ACTIVATIONS[args.activation]())
model = torch.nn.Sequential(*mods)
opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
loss_fn = torch.nn.CrossEntropyLoss()
bf16 = args.precision == "bf16"
n = len(x_train)

first_step_s, rates = None, []
for epoch in range(args.epochs):
    order = torch.randperm(n)
    t = time.perf_counter()
    for s in range(0, n, args.global_batch):
        idx = order[s:s + args.global_batch]
        xb, yb = x_train[idx], y_train[idx]
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(model(xb), yb)
        loss.backward()
        opt.step()
        if first_step_s is None:
            float(loss)
            first_step_s = time.time() - T0
    rates.append(n / (time.perf_counter() - t))

with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
    acc = (model(x_test).argmax(1) == y_test).float().mean().item()
steady = rates[1:]
print("PEER_RESULT " + json.dumps({
    "peer": f"pytorch-{torch.__version__}", "mode": f"one process, {args.threads} thread(s), {args.precision}"
    + (" (autocast)" if bf16 else ""), "workers": 1, "layers": sizes, "precision": args.precision, "activation": args.activation,
    "samples_per_sec": statistics.median(steady), "samples_per_sec_min": min(steady),
    "samples_per_sec_max": max(steady), "epoch_rates": rates, "time_to_first_step_s": first_step_s,
    "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "test_accuracy": acc}), flush=True)
