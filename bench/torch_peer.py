#!/usr/bin/env python3
"""PyTorch eager peer of `hvtrain bench step`: one GPU, one MLP training step timed N times.

The step: Linear+ReLU layers (no activation after the last), softmax cross-entropy, plain SGD
(lr 0.01, no momentum), on synthetic data that lives on the GPU (normal inputs, random integer
labels), so no input pipeline is measured. W warm-up steps, then N steps between two
torch.cuda.synchronize() calls.

  python3 bench/torch_peer.py --layers 784,4096,4096,4096,10 --batch 8192 --precision tf32 \
      --steps 50 --json out.json

FLOPs per step are counted exactly as hvtrain counts them (src/bench/step.rs): 2 x batch x
in x out for the forward product and for the weight gradient of every layer, and for the input
gradient of every layer but the first (autograd skips it too: the data needs no gradient). Output JSON: samples_per_s, step_tflops, step_ms, steps, warmup,
batch, layers, precision, torch_version, device_name.
"""
import argparse
import json
import sys
import time


def parse_layers(s):
    layers = [int(x) for x in s.replace("-", ",").split(",") if x.strip()]
    if len(layers) < 2 or min(layers) < 1:
        raise argparse.ArgumentTypeError(f"need at least two positive sizes, got {s!r}")
    return layers


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--layers", type=parse_layers, default=parse_layers("784,512,512,10"),
                    help="comma-separated sizes, input first (784,512,512,10)")
    ap.add_argument("--batch", type=int, default=1024, help="rows per step (1024)")
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="fp32",
                    help="fp32: TF32 off for matmuls and cuDNN; tf32: on; bf16: torch.autocast(cuda, bfloat16)")
    ap.add_argument("--steps", type=int, default=50, help="timed steps (50)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first (10)")
    ap.add_argument("--lr", type=float, default=0.01)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--compile", action="store_true",
                    help="torch.compile the model (forward and backward; compile time is not timed)")
    ap.add_argument("--json", default=None, help="write the result here (and print it)")
    a = ap.parse_args(argv)

    import torch  # here, so that --help works without torch

    if not torch.cuda.is_available():
        print("torch_peer: no CUDA device visible to PyTorch", file=sys.stderr)
        return 1
    tf32 = a.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")

    dev = torch.device("cuda")
    torch.manual_seed(a.seed)
    mods = []
    for i, (n_in, n_out) in enumerate(zip(a.layers[:-1], a.layers[1:])):
        mods.append(torch.nn.Linear(n_in, n_out))
        if i < len(a.layers) - 2:
            mods.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*mods).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.0)
    fwd = torch.compile(model) if a.compile else model
    loss_fn = torch.nn.CrossEntropyLoss()
    x = torch.randn(a.batch, a.layers[0], device=dev)
    y = torch.randint(0, a.layers[-1], (a.batch,), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = loss_fn(fwd(x), y)
        loss.backward()
        opt.step()
        return loss

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    torch.cuda.synchronize()
    secs = time.perf_counter() - t0

    # As hvtrain counts (src/bench/step.rs): forward and weight gradient for every layer,
    # input gradient for every layer but the first (the data needs none).
    pairs = list(zip(a.layers[:-1], a.layers[1:]))
    flop = 2 * a.batch * (2 * sum(i * o for i, o in pairs) + sum(i * o for i, o in pairs[1:]))
    out = {
        "samples_per_s": a.batch * a.steps / secs,
        "step_tflops": flop * a.steps / secs / 1e12,
        "step_ms": 1e3 * secs / a.steps,
        "flop_per_step": flop,
        "steps": a.steps,
        "warmup": a.warmup,
        "batch": a.batch,
        "layers": a.layers,
        "precision": a.precision,
        "mode": "compile" if a.compile else "eager",
        "final_loss": float(loss.item()),
        "torch_version": torch.__version__,
        "device_name": torch.cuda.get_device_name(0),
    }
    text = json.dumps(out)
    print(text)
    if a.json:
        with open(a.json, "w") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
