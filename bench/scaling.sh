#!/usr/bin/env bash
# Scaling report: measures on this machine (1, 2 and oversubscribed 4 ranks, fusion on/off;
# the compute slowdown of p processes sharing the machine; all-reduce latency alpha and time
# per byte beta; the SGEMM rate of a large MLP's step), checks the model against the p-rank
# steps, then predicts step time and weak-scaling efficiency at 8..4096 ranks for the
# Fashion-MNIST job and a large MLP on a given network (default 25 GB/s, 2 us: InfiniBand HDR).
#   bash bench/scaling.sh [BW_GBs] [LATENCY_us] [GPU_TFLOPS]
# GPU_TFLOPS (optional, no default) adds a GPU-rank prediction at that rate: a parameter you
# choose, not a measurement. REUSE=1 re-runs only the model on today's measured JSON.
# Writes bench/results/scaling-DATE.{md,png} and scaling-measured-DATE.json. See bench/SCALING.md.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
BW=${1:-25}
LAT=${2:-2}
GPU=${3:-}
EPOCHS=${EPOCHS:-3}
BIG=4096,4096,4096,4096,10
MPIRUN="mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1"
if [ ! -x bench/.plotenv/bin/python ]; then
  python3 -m venv bench/.plotenv && bench/.plotenv/bin/pip install -q matplotlib numpy
fi
day=$(date +%F)

if [ "${REUSE:-0}" = 1 ] && [ -f "bench/results/scaling-measured-$day.json" ]; then
  echo "REUSE=1: re-running the model on bench/results/scaling-measured-$day.json"
else
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
# The CPU rate of a large MLP's step, measured (one process).
$BIN bench gemm --layers $BIG --batch 128 --seconds 5 > "$work/gemm-big.json"
for p in 2 4; do
  $MPIRUN -n $p $BIN bench allreduce --max-bytes $((16 << 20)) --seconds 0.3 2>/dev/null > "$work/ar$p.txt"
done
for p in 1 2 4; do
  for fusion in 64 0; do
    dir="$work/run-$p-$fusion"
    $MPIRUN -n $p $BIN train jobs/fashion-mnist.toml --set training.epochs=$EPOCHS --set training.batch_size=128 \
      --set distribution.fusion_threshold_mb=$fusion --set output.dir="\"$dir\"" 2> "$dir.log"
  done
  # Compute under contention, no communication: p independent 1-rank runs at once.
  if [ $p -gt 1 ]; then
    pids=()
    for i in $(seq $p); do
      dir="$work/solo-$p-$i"
      $MPIRUN -n 1 $BIN train jobs/fashion-mnist.toml --set training.epochs=$EPOCHS --set training.batch_size=128 \
        --set output.dir="\"$dir\"" 2> "$dir.log" &
      pids+=($!)
    done
    for pid in "${pids[@]}"; do wait "$pid"; done
  fi
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$work" "$day" "$load_before" "$load_after" <<'PY'
import json, statistics, sys, os, re, subprocess
work, day, lb, la = sys.argv[1:]
out = {"date": day, "machine": subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True, text=True).stdout.strip(),
       "vcpus": os.cpu_count(), "load_before": lb, "load_after": la,
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
        steps = [e["epoch_seconds"] / e["steps"] * 1e3 for e in m]
        runs[f"{p}-{fusion}"] = {"ranks": p, "fusion_mb": fusion, "samples_per_sec": statistics.median(e["samples_per_sec"] for e in m),
                                 "step_ms": statistics.median(steps), "step_min_ms": min(steps), "step_max_ms": max(steps),
                                 "exposed_ms": statistics.median(e["exposed_comm_ms_per_step"] for e in m)}
out["runs"] = runs
# compute(p): median over the p independent processes of their median step.
cont = {}
for p in (2, 4):
    steps = []
    for i in range(1, p + 1):
        m = [json.loads(l) for l in open(f"{work}/solo-{p}-{i}/metrics.jsonl")][1:]
        steps.append(statistics.median(e["epoch_seconds"] / e["steps"] for e in m) * 1e3)
    cont[str(p)] = {"processes": p, "step_ms": statistics.median(steps), "min_ms": min(steps), "max_ms": max(steps)}
out["contention"] = cont
out["gemm_big"] = json.load(open(f"{work}/gemm-big.json"))
path = f"bench/results/scaling-measured-{day}.json"
json.dump(out, open(path, "w"), indent=1)
print(f"saved {path}")
PY
fi

pre=bench/results/scaling-$day
bench/.plotenv/bin/python bench/scaling_model.py "bench/results/scaling-measured-$day.json" --bw "$BW" --latency "$LAT" \
  ${GPU:+--gpu-tflops "$GPU"} --out "$pre" > "$work/pred.md"
bench/.plotenv/bin/python - "bench/results/scaling-measured-$day.json" "$pre.md" "$BW" "$LAT" "$GPU" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); pred = open(sys.argv[2]).read()
args = " ".join(a for a in sys.argv[3:6] if a)
g = m["gemm_big"]
L = [f"# Scaling report, {m['date']}", "",
     f"- command: `bash bench/scaling.sh {args}`, hvtrain commit {m['commit']}; machine: {m['machine']}, {m['vcpus']} vCPUs "
     "(4 ranks are oversubscribed)",
     f"- load average (1/5/15 min) before the measurements: {m['load_before']}; after: {m['load_after']}. The vCPUs were "
     "shared with other work, so the measured figures are noisy: each is one run; the step min..max is over its epochs after the first.",
     "- model, its inputs and how far to trust it: [bench/SCALING.md](../SCALING.md); plot: scaling-" + m['date'] + ".png", "",
     f"## Measured here (Fashion-MNIST job, batch 128 per rank, {len(m['runs'])} runs, medians over epochs after the first)", "",
     "| ranks | fusion | samples/s | step (ms) | step min..max (ms) | exposed comm (ms/step) |", "|---|---|---|---|---|---|"]
for r in m["runs"].values():
    L.append(f"| {r['ranks']} | {'64 MiB' if r['fusion_mb'] else 'off'} | {r['samples_per_sec']:,.0f} | {r['step_ms']:.2f} | "
             f"{r['step_min_ms']:.2f}..{r['step_max_ms']:.2f} | {r['exposed_ms']:.3f} |")
L += ["", "Compute under contention: p independent 1-rank runs at once (no communication), step per process:", "",
      "| processes | median step (ms) | min..max over processes (ms) |", "|---|---|---|"]
L.append(f"| 1 | {m['runs']['1-64']['step_ms']:.2f} | (the 1-rank run above) |")
for c in m["contention"].values():
    L.append(f"| {c['processes']} | {c['step_ms']:.2f} | {c['min_ms']:.2f}..{c['max_ms']:.2f} |")
L += ["", "All-reduce fit t = alpha + beta x 2(p-1)/p x bytes (raw MPI_Allreduce, shared memory, 4 KiB..16 MiB):", "",
      "| ranks | alpha (us) | beta (ns/byte) | 1/beta (GB/s) |", "|---|---|---|---|"]
for p, f in m["allreduce_fit"].items():
    L.append(f"| {p} | {f['alpha_us']:.1f} | {f['beta_ns_per_byte']:.3f} | {f['bw_GBs']:.2f} |")
L += ["", f"CPU rate of the large MLP's step (`hvtrain bench gemm --layers {','.join(map(str, g['layers']))} --batch {g['batch']}`, "
      f"one process, {g['seconds']:.1f} s, {g['iters']} steps): {g['gflops']:.1f} GFLOP/s on its {g['step_gemms']} GEMMs, "
      f"{g['flop_per_sample']/1e6:.1f} MFLOP per sample.", "", pred]
open(sys.argv[2], "w").write("\n".join(L) + "\n")
print("\n".join(L))
PY
echo "saved $pre.md and $pre.png"
