#!/usr/bin/env bash
# Parameter servers vs all-reduce on Fashion-MNIST (784-256-256-10, SGD momentum, batch 128
# per worker), on N ranks (default: 3, then 5; oversubscribed on a small machine: the
# report says how many cores there were). All-reduce trains on all N ranks; the parameter
# server on N-1 workers + 1 server, staleness 0, 2 and -1. Each with and without one worker
# slowed 2x: `delay=T` before each of its steps, T = a step's time in the unslowed
# all-reduce run (per-rank batch / per-rank samples/s), so that worker takes about twice as
# long per step. Reports samples/s (epochs after the first), per-worker samples/s, test
# accuracy after EPOCHS epochs, and the staleness maxima, into bench/results/ps-DATE.md.
#   bash bench/ps.sh            # RANKS="3 5" EPOCHS=3
set -euo pipefail
source "$(dirname "$0")/lib.sh"
RANKS=${RANKS:-"3 5"}; EPOCHS=${EPOCHS:-3}
MPIRUN="mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1"
COMMON=(--set training.epochs="$EPOCHS" --set training.batch_size=128 --set 'model.layers=[784,256,256,10]'
        --set training.progress_seconds=0 --set checkpoint.every_minutes=0)
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
run() { # name ranks delay(or -) sets...
  local name=$1 n=$2 delay=$3; shift 3
  local dir=runs/bench-ps/$name env=()
  rm -rf "$dir"
  [ "$delay" != - ] && env=(-x HVTRAIN_INJECT_FAULT="1:1:delay=$delay")
  echo "+ mpirun -n $n ${env[*]} hvtrain train jobs/fashion-mnist.toml ${COMMON[*]} $* --set output.dir=$dir" >> "$work/commands"
  $MPIRUN -n "$n" "${env[@]}" "$BIN" train jobs/fashion-mnist.toml "${COMMON[@]}" "$@" --set output.dir="\"$dir\"" \
    2> "$work/$name.log"
  cp "$dir/metrics.jsonl" "$work/$name.jsonl"
}
for n in $RANKS; do
  run "ar-$n" "$n" - 
  delay=$(python3 -c "
import json,statistics; m=[json.loads(l) for l in open('$work/ar-$n.jsonl')][1:] or [json.loads(l) for l in open('$work/ar-$n.jsonl')]
print(round(128/(statistics.median(x['samples_per_sec'] for x in m)/$n), 4))")
  echo "$n $delay" >> "$work/delays"
  run "ar-$n-slow" "$n" "$delay"
  for k in 0 2 -1; do
    PS=(--set distribution.strategy=parameter_server --set distribution.staleness=$k)
    run "ps$k-$n" "$n" - "${PS[@]}"
    run "ps$k-$n-slow" "$n" "$delay" "${PS[@]}"
  done
done
python3 - "$work" "$RANKS" "$EPOCHS" "$LOAD" <<'PY'
import json, statistics, sys, os, re, datetime, subprocess
work, ranks, epochs, load = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4]
delays = dict(l.split() for l in open(f"{work}/delays"))
cores = os.cpu_count()
rows = []
for n in ranks:
    for mode, label in [("ar", "all-reduce"), ("ps0", "PS staleness 0"), ("ps2", "PS staleness 2"), ("ps-1", "PS asynchronous (-1)")]:
        for slow in ["", "-slow"]:
            name = f"{mode}-{n}{slow}"
            m = [json.loads(l) for l in open(f"{work}/{name}.jsonl")]
            sps = statistics.median(x["samples_per_sec"] for x in (m[1:] or m))
            acc = m[-1].get("test_accuracy")
            log = open(f"{work}/{name}.log").read()
            per = re.findall(r"per-worker samples/s: ([^;]*);", log)
            maxima = [int(x) for x in re.findall(r"applied gradient\(s\): [^;]*; max (\d+);", log)]
            workers = n if mode == "ar" else str(int(n) - 1)
            rows.append(f"| {n} | {label} | {workers} | {'worker 1 slowed 2x (' + delays[n] + ' s/step)' if slow else '-'} "
                        f"| {sps:.0f} | {acc:.4f} | {per[-1] if per else '-'} | {max(maxima) if maxima else '-'} |")
date = datetime.date.today().isoformat()
rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
out = [f"# Parameter servers vs all-reduce, {date} (commit {rev})", "",
       f"Machine: {cores} cores, load average before: {load}. Ranks above {cores} are oversubscribed.",
       f"Fashion-MNIST, 784-256-256-10, SGD lr 0.05 momentum 0.9, batch 128 per worker, {epochs} epochs;",
       "samples/s = median over epochs after the first (all workers together); accuracy after the last epoch.",
       "All-reduce trains on all N ranks; the parameter server on N-1 workers + 1 server.", "",
       "| ranks | mode | workers | slowed | samples/s | test accuracy | per-worker samples/s (last epoch) | max staleness |",
       "|---|---|---|---|---|---|---|---|"] + rows + ["", "Commands (from the repository root, `bash bench/ps.sh`):", "", "```"] + \
      [l.rstrip() for l in open(f"{work}/commands")] + ["```"]
text = "\n".join(out) + "\n"
print(text)
os.makedirs("bench/results", exist_ok=True)
open(f"bench/results/ps-{date}.md", "w").write(text)
PY
