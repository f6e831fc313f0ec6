#!/usr/bin/env bash
# The communication engine, measured (2 ranks unless RANKS is set):
#  1. all-reduce bandwidth: raw MPI_Allreduce vs the engine's fused path, 4 KiB..256 MiB;
#  2. a model of many small layers (784-[64 x 32]-10): fusion on (one bucket) vs off (one
#     all-reduce per tensor), with overlap on and off: samples/s, steps/s, exposed comm;
#  3. the Fashion-MNIST job: overlap on/off, a small first bucket, fp16/bf16 compression.
# Prints a markdown report and saves it as bench/results/engine-DATE.md.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
RANKS=${RANKS:-2}
EPOCHS=${EPOCHS:-3}
MPIRUN="mpirun --bind-to none -n $RANKS"
out=bench/results/engine-$(date +%F).md

# One training run; prints "samples/s steps/s exposed_ms" medians over epochs after the first.
train() {
  local dir="$work/run"
  rm -rf "$dir"
  $MPIRUN $BIN train jobs/fashion-mnist.toml --set training.epochs=$EPOCHS --set output.dir="\"$dir\"" "$@" 2>"$work/log" \
    || { cat "$work/log" >&2; exit 1; }
  python3 - "$dir/metrics.jsonl" <<'PY'
import json, statistics, sys
m = [json.loads(l) for l in open(sys.argv[1])][1:]
sps = statistics.median(e["samples_per_sec"] for e in m)
steps = statistics.median(e["steps"] / e["epoch_seconds"] for e in m)
exp = statistics.median(e["exposed_comm_ms_per_step"] for e in m)
acc = m[-1].get("test_accuracy") or 0
print(f"{sps:,.0f} | {steps:,.0f} | {exp:.3f} | {acc:.4f}")
PY
}

{
  echo "# Communication engine benchmark, $(date +%F)"
  echo
  echo "- command: \`bash bench/engine.sh\` (RANKS=$RANKS, EPOCHS=$EPOCHS), hvtrain commit $(git rev-parse --short HEAD)"
  echo "- machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) vCPUs; $(mpirun --version | head -1)"
  echo "- all figures from one run of this script; training figures are medians over epochs after the first"
  echo
  echo "## 1. All-reduce bandwidth ($RANKS ranks, \`hvtrain bench allreduce\`)"
  echo
  echo '```'
  $MPIRUN $BIN bench allreduce 2>/dev/null
  echo '```'
  echo
  SMALL="model.layers=[784,$(printf '64,%.0s' $(seq 32))10]"
  echo "## 2. Many small layers: 784-[64 x 32]-10 ($RANKS ranks, batch 128 per rank)"
  echo
  echo "| fusion | overlap | samples/s | steps/s | exposed comm (ms/step) | test acc |"
  echo "|---|---|---|---|---|---|"
  for fusion in 64 0; do
    for overlap in true false; do
      label=$([ "$fusion" = 0 ] && echo "off (66 all-reduces/step)" || echo "on, 64 MiB (1 all-reduce/step)")
      echo "| $label | $overlap | $(train --set "$SMALL" --set distribution.fusion_threshold_mb=$fusion --set distribution.overlap=$overlap --set optimizer.kind=adam --set optimizer.lr=0.001 --set optimizer.momentum=0) |"
    done
  done
  echo
  echo "## 3. Fashion-MNIST job, 784-512-512-10 ($RANKS ranks, batch 128 per rank)"
  echo
  echo "| engine setting | samples/s | steps/s | exposed comm (ms/step) | test acc |"
  echo "|---|---|---|---|---|"
  echo "| overlap on (default), 1 bucket | $(train) |"
  echo "| overlap off | $(train --set distribution.overlap=false) |"
  echo "| overlap on, 1 MiB threshold | $(train --set distribution.fusion_threshold_mb=1) |"
  echo "| overlap on, 1 MiB first bucket | $(train --set distribution.first_bucket_mb=1) |"
  echo "| overlap off, 1 MiB threshold | $(train --set distribution.fusion_threshold_mb=1 --set distribution.overlap=false) |"
  echo "| fp16 compression | $(train --set distribution.compression=fp16) |"
  echo "| bf16 compression | $(train --set distribution.compression=bf16) |"
} | tee "$out"
echo "saved $out"
