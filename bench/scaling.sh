#!/usr/bin/env bash
# Scaling report: measures on this machine (1, 2 and oversubscribed 4 ranks, fusion on/off;
# all-reduce latency alpha and time per byte beta; the SGEMM rate of a large MLP's step),
# calibrates the model on the p-rank steps (with held-out errors), then predicts step time and weak-scaling efficiency at 8..4096 ranks for the
# Fashion-MNIST job and a large MLP on a given network (default 25 GB/s, 2 us: InfiniBand HDR).
#   bash bench/scaling.sh [BW_GBs] [LATENCY_us] [GPU_TFLOPS]
# GPU_TFLOPS (optional, no default) adds a GPU-rank prediction at that rate: a parameter you
# choose, not a measurement. REUSE=1 re-runs only the model on today's measured JSON
# (measuring the GEMM rate first if that JSON has none, or if REGEMM=1).
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

json=bench/results/scaling-measured-$day.json
if [ "${REUSE:-0}" = 1 ] && [ -f "$json" ]; then
  echo "REUSE=1: re-running the model on $json"
  if ! grep -q '"gemm_big"' "$json" || [ "${REGEMM:-0}" = 1 ]; then
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    $BIN bench gemm --layers $BIG --batch 128 --seconds 5 > "$work/gemm-big.json"
    python3 - "$json" "$work/gemm-big.json" "$load" "$(git rev-parse --short HEAD)" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
g = json.load(open(sys.argv[2])); g.update(load_before=sys.argv[3], commit=sys.argv[4], added_by="REUSE=1")
m["gemm_big"] = g
for k in ("models", "model_check"):  # the old script's model output: scaling_model.py computes these now
    m.pop(k, None)
json.dump(m, open(sys.argv[1], "w"), indent=1)
PY
  fi
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
    # One thread a rank on every count (the scaling model's unit: one core a rank); "auto"
    # would give the one-rank run every core and the ratios a different base.
    $MPIRUN -n $p $BIN train jobs/fashion-mnist.toml --set training.epochs=$EPOCHS --set training.batch_size=128 \
      --set training.threads=1 --set distribution.fusion_threshold_mb=$fusion --set output.dir="\"$dir\"" 2> "$dir.log"
  done
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
out["gemm_big"] = dict(json.load(open(f"{work}/gemm-big.json")), load_before=lb, commit=out["commit"])
path = f"bench/results/scaling-measured-{day}.json"
json.dump(out, open(path, "w"), indent=1)
print(f"saved {path}")
PY
fi

pre=bench/results/scaling-$day
bench/.plotenv/bin/python bench/scaling_model.py "bench/results/scaling-measured-$day.json" --bw "$BW" --latency "$LAT" \
  ${GPU:+--gpu-tflops "$GPU"} --out "$pre" > "$work/pred.md"
bench/.plotenv/bin/python - "bench/results/scaling-measured-$day.json" "$pre.md" "$BW" "$LAT" "$GPU" "${REUSE:-0}" "$(git rev-parse --short HEAD)" "${REGEMM:-0}" <<'PY'
import json, sys
m = json.load(open(sys.argv[1])); pred = open(sys.argv[2]).read()
args = " ".join(a for a in sys.argv[3:6] if a)
reuse, head, regemm = sys.argv[6] == "1", sys.argv[7], sys.argv[8] == "1"
g = m["gemm_big"]
L = [f"# Scaling report, {m['date']}", "",
     f"- command: `{'REUSE=1 ' if reuse else ''}{'REGEMM=1 ' if reuse and regemm else ''}bash bench/scaling.sh {args}`, hvtrain commit {head}; machine: {m['machine']}, "
     f"{m.get('vcpus', 2)} vCPUs (4 ranks are oversubscribed)",
     f"- training runs and all-reduce fit: measured by `bench/scaling.sh` at commit {m['commit']} on {m['date']}; load average "
     f"before/after: {m.get('load_before', 'not recorded')} / {m.get('load_after', 'not recorded')}. Each is one run; "
     "the step min..max, where given, is over its epochs after the first."
     + (" This report re-ran only the model on them (REUSE=1)." if reuse else ""),
     f"- GEMM rate of the large MLP: measured at commit {g.get('commit', m['commit'])}, load average before: "
     f"{g.get('load_before', 'not recorded')}. A load above 2 means other work shared the 2 vCPUs and the rate is low by about that factor.",
     "- model, its inputs and how far to trust it: [bench/SCALING.md](../SCALING.md); plot: scaling-" + m['date'] + ".png", "",
     f"## Measured here (Fashion-MNIST job, batch 128 per rank, {len(m['runs'])} runs, medians over epochs after the first)", "",
     "| ranks | fusion | samples/s | step (ms) | step min..max (ms) | exposed comm (ms/step) |", "|---|---|---|---|---|---|"]
for r in m["runs"].values():
    mm = f"{r['step_min_ms']:.2f}..{r['step_max_ms']:.2f}" if "step_min_ms" in r else "not recorded"
    L.append(f"| {r['ranks']} | {'64 MiB' if r['fusion_mb'] else 'off'} | {r['samples_per_sec']:,.0f} | {r['step_ms']:.2f} | "
             f"{mm} | {r['exposed_ms']:.3f} |")
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
