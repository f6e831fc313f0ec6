#!/usr/bin/env python3
"""The scaling model for GPUs (issue: many GPUs at full speed): data-parallel efficiency at 8 GPUs
on one node and at 4 nodes x 4 GPUs, for both bench models, for each way gradient buckets travel
(distribution.gpu_allreduce = nccl | host), from measured step times and stated link rates.
Uses bench/scaling_model.py's fusion plan, FLOP split and overlap replay (see bench/SCALING.md):

    step(p)      = compute + exposed(p)       (weak scaling: batch per GPU fixed)
    nccl(B, p)   = a + 2 (p-1)/p * B / busbw   (busbw: what nccl-tests reports; a: latency)
    host(B, p)   = B/pcie + mpi(B, p) + B/pcie (copy out, MPI_Allreduce on host memory, copy back,
                   one bucket after another on the communication thread, as src/parallel/engine.rs)
    mpi(B, p)    = Rabenseifner: 2 ceil(log2 p) a + 2 (p-1)/p * B / bw
    two levels   = the slowest link of the ring sets the rate: busbw = min(intra, inter per GPU)

Every input is printed with where it comes from: measured (which run), published (cited) or
assumed (to be measured by the next GPU check: `hvtrain bench allreduce` with 8 and 16 ranks on
the GPU machine's cores for the MPI rates; the copy rates from `bench step --data host`).

    python3 bench/gpu_scaling_model.py [--inputs FILE.json] [--out bench/results/gpu-scaling-model-DATE.md]
"""
import argparse, json, math, os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from scaling_model import tensors, plan, flops  # noqa: E402

INPUTS = {
    "small_step_s": (128 / 901000, "measured: 784-512-512-10 at 128 rows, 1 rank alone on one H100, 901,000 samples/s (2026-11-27, issue #42)"),
    "large_step_s": (8192 / 1029019, "measured: 784-4096-4096-4096-10 at 8192 rows, TF32, one H100, 1,029,019 samples/s (2026-11-27, issue #41)"),
    "nvlink_busbw": (470e9, "published: nccl-tests all_reduce busbw on 8x H100 SXM5 (NVLink 4, NVSwitch), 460-480 GB/s at large sizes (docs.alayanew.com, NCCL-tests in practice, 2026-05-06)"),
    "nccl_inter_busbw": (35e9, "published: nccl-tests busbw across 2 nodes of 8 H200 with 4 ConnectX-7 NICs each, ~35 GB/s for large messages (kubernetes.recipes, NCCL all-reduce benchmarking on multi-node GPUs)"),
    "nccl_latency_s": (20e-6, "assumed: NCCL's small-message all-reduce latency inside a node (LL protocol), about 10-30 us"),
    "nccl_inter_latency_s": (40e-6, "assumed: the same across nodes"),
    "pcie_bw": (25e9, "assumed: pinned device<->host copy rate per direction (PCIe Gen5 x16 is 64 GB/s nominal); measure with bench step --data host"),
    "shm_latency_s": (5e-6, "assumed: Open MPI shared-memory all-reduce latency"),
    "shm_bw": (8e9, "assumed: Open MPI shared-memory all-reduce rate among 8 ranks on one node; measure with hvtrain bench allreduce -n 8 on the GPU machine"),
    "ib_latency_s": (3e-6, "assumed: InfiniBand NDR MPI latency"),
    "ib_bw_per_node": (50e9, "assumed: one NDR 400 Gb/s link per node for the host path's MPI (a rank's share: this / GPUs per node)"),
    "threshold_bytes": (64 * 1024 * 1024, "hvtrain's default fusion threshold (64 MiB)"),
}

MODELS = {
    "small 784-512-512-10, 128 rows/GPU": ([784, 512, 512, 10], 128, "small_step_s"),
    "large 784-4096-4096-4096-10, 8192 rows/GPU TF32": ([784, 4096, 4096, 4096, 10], 8192, "large_step_s"),
}

CONFIGS = {"8 GPUs, 1 node (NVLink)": (8, 8), "4 nodes x 4 GPUs": (16, 4)}


def mpi(b, p, a, bw):
    return 0.0 if p == 1 else 2 * math.ceil(math.log2(p)) * a + 2 * (p - 1) / p * b / bw


def cost(path, b, p, per_node, v):
    """Seconds to all-reduce one bucket of b bytes over p GPUs, per_node of them on a node."""
    multi = p > per_node
    if path == "nccl":
        busbw = min(v["nvlink_busbw"], v["nccl_inter_busbw"]) if multi else v["nvlink_busbw"]
        a = v["nccl_inter_latency_s"] if multi else v["nccl_latency_s"]
        return 0.0 if p == 1 else a + 2 * (p - 1) / p * b / busbw
    # host: copy out, MPI on host memory, copy back
    if multi:
        m = mpi(b, p, v["ib_latency_s"], min(v["shm_bw"], v["ib_bw_per_node"] / per_node))
    else:
        m = mpi(b, p, v["shm_latency_s"], v["shm_bw"])
    return 2 * b / v["pcie_bw"] + m


def step(layers, batch, compute, path, p, per_node, v):
    """(step s, exposed s, bytes of gradients, buckets), overlap on (bench/scaling_model.py's replay)."""
    buckets = plan(tensors(layers), v["threshold_bytes"])
    comm = [cost(path, sum(t[0] for t in bk), p, per_node, v) for bk in buckets]
    fwd, bwd = flops(layers, batch)
    per_flop = compute / (fwd + sum(bwd))
    done, t = {}, 0.0
    for l in reversed(range(len(layers) - 1)):
        t += bwd[l] * per_flop
        done[l] = t
    end = 0.0
    for bk, c in zip(buckets, comm):
        end = max(end, max(done[l] for _, l in bk)) + c
    exposed = max(0.0, end - t)
    return compute + exposed, exposed, sum(x[0] for x in tensors(layers)), len(buckets)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--inputs", help="JSON of inputs to override (name: value), e.g. measured on the GPU machine")
    ap.add_argument("--out", help="write the markdown table here")
    a = ap.parse_args()
    v = {k: x[0] for k, x in INPUTS.items()}
    src = {k: x[1] for k, x in INPUTS.items()}
    if a.inputs:
        for k, x in json.load(open(a.inputs)).items():
            v[k], src[k] = x, f"given in {a.inputs}"
    lines = ["# Data-parallel scaling on GPUs: the model's prediction", "",
             "`python3 bench/gpu_scaling_model.py` (weak scaling, overlap on, hvtrain's 64 MiB buckets). "
             "Efficiency = step(1 GPU) / step(p GPUs). **Predicted, not measured**: no machine with "
             "several GPUs has been lent yet; `bench/gpu_scaling.sh` (run by the GPU check when "
             "`nvidia-smi` lists 2 or more GPUs) measures the same table.", "",
             "| model | GPUs | path | gradients MB | step ms | exposed comm. ms/step | efficiency |",
             "|---|---|---|---:|---:|---:|---:|"]
    for name, (layers, batch, key) in MODELS.items():
        compute = v[key]
        for cname, (p, per_node) in CONFIGS.items():
            for path in ("nccl", "host"):
                s, ex, nbytes, nb = step(layers, batch, compute, path, p, per_node, v)
                lines.append(f"| {name} | {cname} | {path} | {nbytes / 1e6:.1f} | {s * 1e3:.3f} | {ex * 1e3:.3f} | {compute / s:.2f} |")
    # The one measured point of the host path: 2 ranks sharing one GPU (they also share its
    # compute and the node's copy engines, which the model leaves out).
    layers, batch, key = MODELS["small 784-512-512-10, 128 rows/GPU"]
    _, ex2, _, _ = step(layers, batch, v[key], "host", 2, 2, v)
    lines += ["", f"Check against the one measurement of the host path: 2 ranks sharing an H200 on the small model "
              f"expose 1.29-1.34 ms of communication a step (bench/results/gpu-2026-11-26-run2, 03-train-cuda.log); "
              f"the model gives {ex2 * 1e3:.2f} ms for 2 GPUs of their own: the shared GPU serializes the two ranks' "
              f"copies and kernels, which the model does not, so the host-path figures above are a lower bound "
              f"until the MPI and copy rates are measured on the GPU machine.", "", "Inputs:", ""]
    lines += [f"- `{k}` = {v[k]:.4g}: {src[k]}" for k in v]
    text = "\n".join(lines) + "\n"
    print(text)
    if a.out:
        open(a.out, "w").write(text)


if __name__ == "__main__":
    main()
