#!/usr/bin/env bash
# Scaling report: measures on this machine (1, 2 and oversubscribed 4 ranks, fusion on/off;
# all-reduce latency alpha and time per byte beta), checks the model against those
# measurements, then predicts step time and weak-scaling efficiency at 8..4096 ranks for the
# Fashion-MNIST job and a large MLP on a given network (default 25 GB/s, 2 us: InfiniBand HDR).
#   bash bench/scaling.sh [BW_GBs] [LATENCY_us]
# Writes bench/results/scaling-DATE.{md,png} and scaling-measured-DATE.json. See bench/SCALING.md.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
BW=${1:-25}
LAT=${2:-2}
EPOCHS=${EPOCHS:-3}
MPIRUN="mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1"
if [ ! -x bench/.plotenv/bin/python ]; then
  python3 -m venv bench/.plotenv && bench/.plotenv/bin/pip install -q matplotlib numpy
fi
day=$(date +%F)

if [ "${REUSE:-0}" = 1 ] && [ -f "bench/results/scaling-measured-$day.json" ]; then
  echo "REUSE=1: re-running the model on bench/results/scaling-measured-$day.json"
else
for p in 2 4; do
  $MPIRUN -n $p $BIN bench allreduce --max-bytes $((16 << 20)) --seconds 0.3 2>/dev/null > "$work/ar$p.txt"
done
for p in 1 2 4; do
  for fusion in 64 0; do
    dir="$work/run-$p-$fusion"
    $MPIRUN -n $p $BIN train jobs/fashion-mnist.toml --set training.epochs=$EPOCHS --set training.batch_size=128 \
      --set distribution.fusion_threshold_mb=$fusion --set output.dir="\"$dir\"" 2> "$dir.log"
  done
done

python3 - "$work" "$day" <<'PY'
import json, statistics, sys, os, re, subprocess
work, day = sys.argv[1], sys.argv[2]
out = {"date": day, "machine": subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True, text=True).stdout.strip(),
       "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()}
# alpha, beta: least squares of raw all-reduce time against the ring's bytes-per-rank term.
fits = {}
for p in (2, 4):
    xs, ys = [], []
    for line in open(f"{work}/ar{p}.txt"):
        f = line.split()
        if f and f[0].isdigit():
            n, t = int(f[0]), float(f[1]) * 1e-6
            xs.append(2 * (p - 1) / p * n); ys.append(t)
    mx, my = statistics.mean(xs), statistics.mean(ys)
    beta = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    alpha = max(my - beta * mx, min(ys) * 0.5)
    fits[p] = {"alpha_us": alpha * 1e6, "beta_ns_per_byte": beta * 1e9, "bw_GBs": 1 / beta / 1e9}
out["allreduce_fit"] = fits
runs = {}
for p in (1, 2, 4):
    for fusion in (64, 0):
        d = f"{work}/run-{p}-{fusion}"
        m = [json.loads(l) for l in open(f"{d}/metrics.jsonl")][1:]
        step = statistics.median(e["epoch_seconds"] / e["steps"] for e in m)
        runs[f"{p}-{fusion}"] = {"ranks": p, "fusion_mb": fusion, "samples_per_sec": statistics.median(e["samples_per_sec"] for e in m),
                                 "step_ms": step * 1e3, "exposed_ms": statistics.median(e["exposed_comm_ms_per_step"] for e in m)}
out["runs"] = runs
compute = runs["1-64"]["step_ms"] / 1e3

fm = [784, 512, 512, 10]
big = [4096, 4096, 4096, 4096, 10]
nparams = sum(big[i] * big[i + 1] + big[i + 1] for i in range(len(big) - 1))
cpu_gflops = 130.0  # matrixmultiply, measured per process (bench/results/gemm-candidates.md)
T = 64 << 20
out["models"] = [
    {"name": "Fashion-MNIST 784-512-512-10, CPU rank", "layers": fm, "batch_per_rank": 128, "compute_s": compute,
     "compute_source": "measured, 1 rank", "threshold_bytes": T},
    {"name": "Fashion-MNIST, 1 MiB buckets", "layers": fm, "batch_per_rank": 128, "compute_s": compute,
     "compute_source": "measured, 1 rank", "threshold_bytes": 1 << 20},
    {"name": "large MLP 4096x3-10 (50M params), CPU rank", "layers": big, "batch_per_rank": 128,
     "compute_s": 6 * nparams * 128 / (cpu_gflops * 1e9), "compute_source": f"6 x params x batch at {cpu_gflops:.0f} GFLOP/s", "threshold_bytes": T},
    {"name": "large MLP 4096x3-10, GPU rank at 100 TFLOP/s (assumed)", "layers": big, "batch_per_rank": 4096,
     "compute_s": 6 * nparams * 4096 / 100e12, "compute_source": "6 x params x batch at an assumed 100 TFLOP/s", "threshold_bytes": T},
    {"name": "large MLP, GPU rank, 16 MiB buckets", "layers": big, "batch_per_rank": 4096,
     "compute_s": 6 * nparams * 4096 / 100e12, "compute_source": "6 x params x batch at an assumed 100 TFLOP/s", "threshold_bytes": 16 << 20},
]
# Check the model against this machine: predicted step at 2 and 4 ranks from the fitted alpha, beta.
import importlib.util
spec = importlib.util.spec_from_file_location("sm", "bench/scaling_model.py"); sm = importlib.util.module_from_spec(spec); spec.loader.exec_module(sm)
check = []
for p in (2, 4):
    for fusion in (64, 0):
        f = fits[p]
        model = dict(out["models"][0], threshold_bytes=fusion << 20)
        t = sm.step_time(model, p, f["alpha_us"] * 1e-6, 1e9 / f["beta_ns_per_byte"], overlap=True)[0]
        # p ranks share this machine's cores: compute per step grows with oversubscription.
        share = max(1.0, p / os.cpu_count())
        t += compute * (share - 1)
        check.append({"ranks": p, "fusion_mb": fusion, "predicted_ms": t * 1e3, "measured_ms": runs[f"{p}-{fusion}"]["step_ms"]})
out["model_check"] = check
path = f"bench/results/scaling-measured-{day}.json"
json.dump(out, open(path, "w"), indent=1)
print(f"saved {path}")
PY
fi

pre=bench/results/scaling-$day
bench/.plotenv/bin/python bench/scaling_model.py "bench/results/scaling-measured-$day.json" --bw "$BW" --latency "$LAT" --out "$pre" > "$work/pred.md"
bench/.plotenv/bin/python - "bench/results/scaling-measured-$day.json" "$pre.md" "$BW" "$LAT" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); pred = open(sys.argv[2]).read()
L = [f"# Scaling report, {m['date']}", "",
     f"- command: `bash bench/scaling.sh {sys.argv[3]} {sys.argv[4]}`, hvtrain commit {m['commit']}; machine: {m['machine']}, 2 vCPUs (4 ranks are oversubscribed)",
     "- model and its assumptions: [bench/SCALING.md](../SCALING.md); plot: scaling-" + m['date'] + ".png", "",
     "## Measured here (Fashion-MNIST job, batch 128 per rank, medians over epochs after the first)", "",
     "| ranks | fusion | samples/s | step (ms) | exposed comm (ms/step) |", "|---|---|---|---|---|"]
for r in m["runs"].values():
    L.append(f"| {r['ranks']} | {'64 MiB' if r['fusion_mb'] else 'off'} | {r['samples_per_sec']:,.0f} | {r['step_ms']:.2f} | {r['exposed_ms']:.3f} |")
L += ["", "All-reduce fit t = alpha + beta x 2(p-1)/p x bytes (raw MPI_Allreduce, shared memory, 4 KiB..16 MiB):", "",
      "| ranks | alpha (us) | beta (ns/byte) | 1/beta (GB/s) |", "|---|---|---|---|"]
for p, f in m["allreduce_fit"].items():
    L.append(f"| {p} | {f['alpha_us']:.1f} | {f['beta_ns_per_byte']:.3f} | {f['bw_GBs']:.2f} |")
L += ["", "Model check on this machine (fitted alpha, beta; compute scaled by oversubscription):", "",
      "| ranks | fusion | predicted step (ms) | measured step (ms) |", "|---|---|---|---|"]
for c in m["model_check"]:
    L.append(f"| {c['ranks']} | {'64 MiB' if c['fusion_mb'] else 'off'} | {c['predicted_ms']:.2f} | {c['measured_ms']:.2f} |")
L += ["", pred]
open(sys.argv[2], "w").write("\n".join(L) + "\n")
print("\n".join(L))
PY
echo "saved $pre.md and $pre.png"
