#!/usr/bin/env bash
# Where one rank's CPU training step goes: `perf record` over a short Fashion-MNIST run (one
# rank, training.threads, batch 256, CPU), its samples grouped into the step's parts (GEMM
# kernel, packing, transposes, waiting for the other thread, optimizer, element-wise work,
# copies, the loader thread). Shares are of every sample of the process (all its threads).
#   bash bench/step_parts.sh [BIN] [LAYERS] [EPOCHS] [THREADS]
#   bash bench/step_parts.sh target/release/hvtrain 784,2048,2048,10 2
# JOB=FILE runs another job file (an older build refuses keys it does not know).
# Needs `perf` (linux-perf). One profile moves by a few points from run to run.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
B=${1:-$BIN}; L=${2:-784,512,512,10}; E=${3:-3}; T=${4:-2}
perf record -q -o "$work/perf.data" -- "$B" train "${JOB:-jobs/fashion-mnist.toml}" --set training.epochs="$E" \
  --set "model.layers=[$L]" --set training.batch_size=256 --set training.threads="$T" \
  --set training.device=\"cpu\" --set checkpoint.every_minutes=0 --set output.dir="\"$work/out\"" 2> "$work/log"
grep -oE "epoch [0-9]+/[0-9]+: .*samples/s" "$work/log" | sed "s/train_loss.*| //"
perf report -i "$work/perf.data" --no-children --sort comm,sym --stdio 2>/dev/null | python3 -c '
import re, sys
parts = [
    ("GEMM kernel", r"sgemm::kernel|bf16::kernel|matrixmultiply::.*kernel|kernel_target|sgemm_kernel"),
    ("GEMM packing and tile loops", r"tile::transpose16|bf16::deal16|sgemm::direct|sgemm::block|sgemm::pack|bf16::pack|bf16::block|bf16::gemm|matrixmultiply::packing|matrixmultiply::gemm|pack_b|pack_a"),
    ("transposes (the Cᵀ = W·dYᵀ route)", r"sgemm::gemm::\{\{closure\}\}|sgemm::transpose$"),
    ("waiting for the other thread (spin, hand-off)", r"pool::run|pool::worker|__rust_begin_short_backtrace|thread_tree|sched_yield|__schedule|finish_task_switch|futex|_raw_spin_unlock"),
    ("optimizer", r"::sgd|::adam"),
    ("element-wise (bias+activation, its backward, loss, column sums)", r"bias_act|act_backward|softmax_xent|backward_tp|col_sum|__expf|dropout"),
    ("copies and clears (memmove, memset, page clearing)", r"memmove|memset|memcpy|clear_page"),
]
share = {name: 0.0 for name, _ in parts}
loader = other = 0.0
for line in sys.stdin:
    m = re.match(r"\s+([0-9.]+)%\s+(\S+)\s+\[[.k]\]\s+(.*)", line)
    if not m:
        continue
    pct, comm, sym = float(m.group(1)), m.group(2), m.group(3)
    if comm == "hvtrain-loader":
        loader += pct
        continue
    for name, pat in parts:
        if re.search(pat, sym):
            share[name] += pct
            break
    else:
        other += pct
for name, _ in parts:
    print(f"| {name} | {share[name]:.1f} % |")
print(f"| the loader thread (HDF5 reads, conversion, batch copies) | {loader:.1f} % |")
print(f"| everything else | {other:.1f} % |")
'
