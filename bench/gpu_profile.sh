#!/usr/bin/env bash
# Where a GPU training step's time goes: for each shape, `hvtrain bench step` (step time,
# GEMM rate, and the batch upload alone: upload_ms), then Nsight Compute (`ncu`) on a window
# of steady-state steps, summed per kernel, so the step reads as
#   wall step time = GPU kernel time + time the GPU waits for the host.
#   bash bench/gpu_profile.sh LOGDIR          (from a GPU bundle's root, or the repository)
# Environment: HV, HV_LD_LIBRARY_PATH as bench/gpu.sh; SHAPES ("784,4096,4096,4096,10:1024:tf32 ...");
# NCU (ncu). Writes LOGDIR/profile/*.json, *.csv and LOGDIR/gpu-profile.md.
set -uo pipefail
LOGDIR=${1:?usage: bash bench/gpu_profile.sh LOGDIR}
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
if [ -z "${HV:-}" ]; then
  if [ -x "$ROOT/bin/hvtrain" ]; then HV="$ROOT/bin/hvtrain"; else HV="$ROOT/target/release/hvtrain"; fi
fi
NCU=${NCU:-$(command -v ncu || ls /usr/local/cuda/bin/ncu 2>/dev/null || echo ncu)}
SHAPES=${SHAPES:-"784,4096,4096,4096,10:1024:tf32 784,4096,4096,4096,10:1024:fp32 784,512,512,10:8192:fp32"}
D="$LOGDIR/profile"; mkdir -p "$D"
hv() { LD_LIBRARY_PATH="${HV_LD_LIBRARY_PATH:-${LD_LIBRARY_PATH:-}}" timeout -k 5 120 "$@"; }
for s in $SHAPES; do
  IFS=: read -r L B P <<< "$s"
  tag="${L//,/-}_b${B}_${P}"
  echo "== $tag"
  hv "$HV" bench step --device cuda --layers "$L" --batch "$B" --precision "$P" --steps 30 --warmup 10 \
    --json "$D/$tag.json" > "$D/$tag.log" 2>&1 || { echo "   bench step failed"; tail -3 "$D/$tag.log"; }
  # 10 warm-up steps of about 40 launches each: skip 600 launches, then profile 150 (steps
  # inside the timed loop; the GEMM-rate loop that follows is not reached).
  hv "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --launch-skip 600 --launch-count 150 \
    "$HV" bench step --device cuda --layers "$L" --batch "$B" --precision "$P" --steps 30 --warmup 10 \
    > "$D/$tag.ncu.csv" 2> "$D/$tag.ncu.err" || { echo "   ncu failed"; tail -3 "$D/$tag.ncu.err"; }
done
env -u LD_LIBRARY_PATH python3 - "$D" "$LOGDIR/gpu-profile.md" <<'PY'
import csv, glob, json, os, sys, collections
d, out = sys.argv[1], sys.argv[2]
lines = ["# Where the GPU step's time goes", "",
         "Kernel times from ncu (gpu__time_duration, --clock-control none) over 150 launches of steady-state steps; "
         "step_ms and upload_ms from `hvtrain bench step` without the profiler.", ""]
for j in sorted(glob.glob(os.path.join(d, "*.json"))):
    tag = os.path.basename(j)[:-5]
    r = json.load(open(j))
    rows = []
    try:
        text = open(os.path.join(d, tag + ".ncu.csv")).read().splitlines()
        start = next(i for i, l in enumerate(text) if l.startswith('"ID"'))
        rows = list(csv.DictReader(text[start:]))
    except (StopIteration, FileNotFoundError):
        pass
    per = collections.defaultdict(lambda: [0, 0.0])
    for row in rows:
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(row["Metric Value"].replace(",", ""))
        unit = row.get("Metric Unit", "ns")
        v_ms = v / 1e6 if unit in ("nsecond", "ns") else v / 1e3 if unit in ("usecond", "us") else v
        name = row["Kernel Name"][:70]
        per[name][0] += 1; per[name][1] += v_ms
    total = sum(t for _, t in per.values())
    launches = sum(n for n, _ in per.values())
    lines += [f"## {tag}", "",
              f"- step {r['step_ms']:.3f} ms wall ({r['samples_per_s']:,.0f} samples/s, {r['step_tflops']:.1f} TFLOP/s, "
              f"GEMM alone {r['gemm_tflops']:.1f} TFLOP/s); batch upload alone {r.get('upload_ms', float('nan')):.3f} ms",
              f"- host ms per step, by part: " + ", ".join(f"{k} {v:.3f}" for k, v in r.get("host_ms_per_step", {}).items()),
              f"- profiled: {launches} launches, {total:.3f} ms of kernel time", "",
              "| kernel | launches | ms | share |", "|---|---:|---:|---:|"]
    for name, (n, t) in sorted(per.items(), key=lambda kv: -kv[1][1])[:15]:
        lines.append(f"| `{name}` | {n} | {t:.3f} | {100 * t / max(total, 1e-12):.1f} % |")
    lines.append("")
open(out, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
