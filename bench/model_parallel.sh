#!/usr/bin/env bash
# Model-parallel benchmark (issue #11): on 4 ranks (oversubscribed on a 2-core machine), for
# the wide 784-8192-8192-8192-10 MLP (141 M parameters) and the Fashion-MNIST job's
# 784-512-512-10, every layout (data D, tensor T, pipeline P) of 4 ranks: samples/s, this
# rank's model state (parameters, gradients, optimizer state; should shrink as 1/(T·P)), peak
# RSS and VmPeak per rank, the time in tensor-parallel all-reduces, and for pipeline layouts
# the measured bubble next to (P-1)/(M+P-1). Pipeline layouts run only when this hvtrain has
# pipeline parallelism; otherwise they are listed as "skipped (pipeline not available)".
#   bash bench/model_parallel.sh          # REPEATS=3 (Fashion-MNIST), WIDE_REPEATS=1, WIDE=0 skips the wide model
# Runs one job at a time (a wide-model rank needs about 3 GiB at T = 1).
# Writes bench/results/model-parallel-DATE.{md,json,log} (.log: each run's key lines) and, with
# bench/scaling.sh's JSON and plot environment, the predictions beside them (-layouts.png).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
REPEATS=${REPEATS:-3}
WIDE_REPEATS=${WIDE_REPEATS:-1}
WIDE=${WIDE:-1}
LAYOUTS="4,1,1,1 2,2,1,1 1,4,1,1 2,1,2,1 2,1,2,4 1,2,2,1 1,2,2,4 1,1,4,1 1,1,4,4"  # D,T,P,M
MPIRUN="mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -n 4"
day=$(date +%F)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# Small training sets: the wide model's 160 rows (5 steps of global batch 32 per epoch), the
# Fashion-MNIST model's 12000 rows (24 steps of global batch 512, the last one short).
$BIN data shard data/fashion-mnist-train.h5 --parts 375 --out "$work/wide" 2> /dev/null
$BIN data shard data/fashion-mnist-train.h5 --parts 5 --out "$work/fm" 2> /dev/null

# The Fashion-MNIST job without its test set (no evaluation in the timings).
sed '/^test = /d' jobs/fashion-mnist.toml > "$work/job.toml"

# Does this hvtrain run pipeline stages? (A tiny 2-stage job on the 4 ranks.)
pipeline=0
if $MPIRUN $BIN train "$work/job.toml" --set model.layers=[784,8,8,10] --set training.epochs=1 \
  --set data.train="\"$work/wide/fashion-mnist-train-0.h5\"" --set parallel.pipeline=2 \
  --set parallel.micro_batches=2 --set output.dir="\"$work/probe\"" > "$work/probe.log" 2>&1; then
  pipeline=1
else
  echo "pipeline probe: $(grep -m1 'error' "$work/probe.log" || tail -1 "$work/probe.log")"
fi

# model name, layers, global batch, epochs, train file, optimizer settings
run_model() {
  local name=$1 layers=$2 gbatch=$3 epochs=$4 train=$5 opt=$6 repeats=$7
  for layout in $LAYOUTS; do
    IFS=, read -r d t p m <<< "$layout"
    tag="$name-d$d-t$t-p$p-m$m"
    nlayers=$(($(tr -cd ',' <<< "$layers" | wc -c)))
    if [ "$p" -gt "$nlayers" ]; then
      echo "$tag: not possible ($nlayers dense layers, $p stages)"
      echo "$nlayers" > "$work/$tag.fewer"
      continue
    fi
    if [ "$p" -gt 1 ] && [ "$pipeline" = 0 ]; then
      echo "$tag: skipped (pipeline not available)"
      echo "skipped" > "$work/$tag.skip"
      continue
    fi
    for r in $(seq 1 "$repeats"); do
      echo "$tag: run $r of $repeats" >&2
      $MPIRUN $BIN train "$work/job.toml" --set model.layers="[$layers]" --set training.epochs="$epochs" \
        --set training.batch_size=$((gbatch / d)) --set data.train="\"$train\"" $opt \
        --set parallel.tensor="$t" --set parallel.pipeline="$p" --set parallel.micro_batches="$m" \
        --set checkpoint.every_minutes=0 --set output.dir="\"$work/out-$tag-$r\"" > "$work/$tag-$r.log" 2>&1 ||
        { echo "$tag run $r failed:"; tail -5 "$work/$tag-$r.log"; }
    done
  done
}

if [ "$WIDE" = 1 ]; then
  # Plain SGD (no momentum): 4 ranks × 5 × 564 MiB at T = 1 already fill most of this machine.
  run_model wide 784,8192,8192,8192,10 32 3 "$work/wide/fashion-mnist-train-0.h5" \
    "--set optimizer.momentum=0.0" "$WIDE_REPEATS"
fi
run_model fmnist 784,512,512,10 512 4 "$work/fm/fashion-mnist-train-0.h5" "" "$REPEATS"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

mkdir -p bench/results
for f in "$work"/*-[0-9]*.log; do
  echo "== $(basename "$f" .log)"
  grep -E "model state per rank|peak memory per rank|tensor-parallel all-reduces|samples/s \(|bubble|error" "$f" | cut -c27-
done > "bench/results/model-parallel-$day.log"
python3 - "$work" "$day" "$load_before" "$load_after" "$REPEATS" "$WIDE_REPEATS" "$(git rev-parse --short HEAD)" "$LAYOUTS" <<'PY'
import glob, json, os, re, statistics, subprocess, sys
work, day, lb, la, reps, wreps, head, layouts = sys.argv[1:]
measured = {}
machine = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True, text=True).stdout.strip()
MODELS = {"wide": ("784-8192-8192-8192-10", 784*8192+8192 + 2*(8192*8192+8192) + 8192*10+10, "global batch 32, 3 epochs of 5 steps, SGD without momentum"),
          "fmnist": ("784-512-512-10", 784*512+512 + 512*512+512 + 512*10+10, "global batch 512, 4 epochs of 24 steps, SGD momentum 0.9")}
L = [f"# Model-parallel benchmark, {day}", "",
     f"- command: `bash bench/model_parallel.sh` (REPEATS={reps}, WIDE_REPEATS={wreps}), hvtrain commit {head}",
     f"- machine: {machine}, {os.cpu_count()} vCPUs; 4 ranks **oversubscribed** (`mpirun --oversubscribe`), so ranks share cores "
     f"and samples/s is far below what 4 real cores would give; load average before/after: {lb} / {la}",
     "- samples/s: samples / epoch seconds, median of the epochs after the first over all repeats (min–max beside it); memory: rank 0's model state "
     "from the start-up line, the largest peak RSS and VmPeak over the ranks (`peak memory per rank` line); TP all-reduce: "
     "rank 0's time in `TensorGroup::sum` (download, MPI_Allreduce, upload) per epoch, median", ""]
for key, (arch, n, how) in MODELS.items():
    whole = 4 * n / 2**20
    if not glob.glob(f"{work}/{key}-*"):
        L += [f"## {arch}: not run (WIDE=0)", ""]
        continue
    L += [f"## {arch} ({n/1e6:.1f} M parameters, {whole:.1f} MiB; {how})", "",
          "| D,T,P | M | samples/s | min–max | state/rank MiB (params + grads + optimizer) | × T·P / whole params | peak RSS/rank MiB | VmPeak/rank MiB | TP all-reduce s/epoch (% of epoch) | bubble measured / (P−1)/(M+P−1) |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for layout in layouts.split():
        d, t, p, m = (int(x) for x in layout.split(","))
        skip = f"{work}/{key}-d{d}-t{t}-p{p}-m{m}"
        ideal = f"{(p-1)/(m+p-1):.2f}" if p > 1 else "–"
        if os.path.exists(skip + ".fewer"):
            L.append(f"| {d},{t},{p} | {m} | not possible: {open(skip + '.fewer').read().strip()} dense layers, {p} stages | | | | | | | |")
            continue
        if os.path.exists(skip + ".skip"):
            L.append(f"| {d},{t},{p} | {m} | skipped (pipeline not available) | | | | | | | – / {ideal} |")
            continue
        rates, tp, rss, vm, state, bub = [], [], [], [], None, []
        for f in sorted(glob.glob(f"{skip}-*.log")):
            log = open(f).read()
            # samples / epoch seconds (the line's samples/s is rounded to an integer)
            eps = [int(n) / float(t) for n, t in re.findall(r"\| (\d+) samples, [0-9.]+ samples/s \(([0-9.]+) s\)", log)]
            rates += eps[1:] or eps
            tp += [(float(s), float(pc)) for s, pc in re.findall(r"tensor-parallel all-reduces ([0-9.]+) s \(([0-9.]+)%", log)[1:]]
            mm = re.search(r"RSS \[([^\]]*)\].*VmPeak\) \[([^\]]*)\]", log)
            if mm:
                rss.append(max(float(x) for x in mm.group(1).split(", ")))
                vm.append(max(float(x) for x in mm.group(2).split(", ")))
            st = re.search(r"params ([0-9.]+) MiB, grads ([0-9.]+) MiB, optimizer ([0-9.]+) MiB \(([0-9.]+) MiB in all\)", log)
            state = state or st
            bub += [float(x) / 100 for x in re.findall(r"pipeline bubble ([0-9.]+)% measured", log)[1:]]
        if not rates:
            L.append(f"| {d},{t},{p} | {m} | failed (see the log) | | | | | | | |")
            continue
        measured.setdefault(key, {})[layout] = statistics.median(rates)
        s = state.groups() if state else ("?",) * 4
        ratio = f"{float(s[0]) * t * p / whole:.2f}" if state else "?"
        tps = f"{statistics.median(x[0] for x in tp):.2f} ({statistics.median(x[1] for x in tp):.0f}%)" if tp else "–"
        bm = f"{statistics.median(bub):.2f}" if bub else "not logged"
        L.append(f"| {d},{t},{p} | {m} | {statistics.median(rates):,.1f} | {min(rates):,.1f}–{max(rates):,.1f} | "
                 f"{s[3]} ({s[0]} + {s[1]} + {s[2]}) | {ratio} | {max(rss):,.0f} | {max(vm):,.0f} | {tps} | "
                 f"{bm if p > 1 else '–'} / {ideal} |")
    L.append("")
json.dump(measured, open(f"bench/results/model-parallel-{day}.json", "w"), indent=1)
out = f"bench/results/model-parallel-{day}.md"
open(out, "w").write("\n".join(L) + "\n")
print("\n".join(L))
print(f"saved {out}")
PY

# The scaling model's predictions for the same layouts, beside these measurements (needs a
# scaling-measured JSON from bench/scaling.sh and its plot environment).
sm=$(ls bench/results/scaling-measured-*.json 2> /dev/null | tail -1)
if [ -n "$sm" ] && [ -x bench/.plotenv/bin/python ]; then
  bench/.plotenv/bin/python bench/scaling_model.py "$sm" --layouts-measured "bench/results/model-parallel-$day.json" \
    --out "$work/sc" > /dev/null
  cp "$work/sc-layouts.png" "bench/results/model-parallel-$day-layouts.png"
  { echo; echo "Predicted by \`bench/scaling_model.py $sm\` (bench/SCALING.md; plot: model-parallel-$day-layouts.png):"; echo
    sed -n '/^## Model-parallel layouts/,$p' "$work/sc.md" | sed 's/^## /### /'; } >> "bench/results/model-parallel-$day.md"
  echo "saved bench/results/model-parallel-$day-layouts.png"
else
  echo "no scaling-measured JSON or bench/.plotenv: no predictions (run bash bench/scaling.sh once)"
fi
