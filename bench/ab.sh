#!/usr/bin/env bash
# A/B: two hvtrain binaries on the Fashion-MNIST job (784-512-512-10, global batch 256),
# 2 ranks, interleaved A B A B ... so that drift in the machine's speed hits both alike.
# The layout and precision: RANKS (2), THREADS per rank (1), PRECISION (fp32), LAYERS (the
# job's, e.g. 784,2048,2048,10); TAG names the report (ab-DATE-TAG.md).
# Use it to show that a change is not slower: build the old commit into another target dir
#   git worktree add /tmp/old OLD && (cd /tmp/old && cargo build --release)
#   bash bench/ab.sh /tmp/old/target/release/hvtrain target/release/hvtrain
# LABEL_A / LABEL_B say what each build is (e.g. its commit) in the report.
# Prints a markdown report (median samples/s over epochs after the first, per run) and saves
# it under bench/results/ab-DATE.md.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
A=${1:?old binary}; B=${2:-$BIN}
# An older build may not know keys the current job file has: JOB_A gives its own job file
# (e.g. `git show OLD:jobs/fashion-mnist.toml > /tmp/old.toml`).
JOB_A=${JOB_A:-jobs/fashion-mnist.toml}; JOB_B=${JOB_B:-jobs/fashion-mnist.toml}
ROUNDS=${ROUNDS:-3}; EPOCHS=${EPOCHS:-4}
RANKS=${RANKS:-2}; THREADS=${THREADS:-1}; PRECISION=${PRECISION:-fp32}; LAYERS=${LAYERS:-}
export RANKS THREADS PRECISION LAYERS
layers=(); [ -n "$LAYERS" ] && layers=(--set "model.layers=[$LAYERS]")
MPIRUN="mpirun --bind-to none --mca mpi_yield_when_idle 1"
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq 1 "$ROUNDS"); do
  for side in A B; do
    bin=$A; job=$JOB_A; [ $side = B ] && bin=$B && job=$JOB_B
    dir=runs/ab-$side-$r
    rm -rf "$dir"
    $MPIRUN -n "$RANKS" "$bin" train "$job" --set training.epochs="$EPOCHS" "${layers[@]}" \
      --set training.batch_size=$((256 / RANKS)) --set training.threads="$THREADS" \
      --set training.precision="\"$PRECISION\"" --set training.device='"cpu"' \
      --set output.dir="\"$dir\"" 2> "$work/$side-$r.log"
    cp "$dir/metrics.jsonl" "$work/$side-$r.jsonl"
  done
done
python3 - "$work" "$ROUNDS" "$A" "$B" "$LOAD" "$EPOCHS" <<'PY'
import json, statistics, sys, os, datetime, subprocess
work, rounds, a, b, load, epochs = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]
def runs(side):
    out = []
    for r in range(1, rounds + 1):
        m = [json.loads(l) for l in open(os.path.join(work, f"{side}-{r}.jsonl"))]
        out.append((statistics.median(e["samples_per_sec"] for e in m[1:]), m[-1].get("test_accuracy")))
    return out
ra, rb = runs("A"), runs("B")
ma, mb = statistics.median(x for x, _ in ra), statistics.median(x for x, _ in rb)
cpu = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True, text=True).stdout.strip()
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
fmt = lambda rs: ", ".join(f"{x:,.0f}" for x, _ in rs)
lines = [f"# A/B: two hvtrain builds on Fashion-MNIST, {datetime.date.today()}", "",
    f"- command: `{'TAG=' + os.environ['TAG'] + ' ' if os.environ.get('TAG') else ''}RANKS={os.environ['RANKS']} THREADS={os.environ['THREADS']} PRECISION={os.environ['PRECISION']} {'LAYERS=' + os.environ['LAYERS'] + ' ' if os.environ['LAYERS'] else ''}bash bench/ab.sh {a} {b}` (ROUNDS={rounds}, EPOCHS={epochs}, JOB_A={os.environ.get('JOB_A', 'jobs/fashion-mnist.toml')}), run from commit {commit}",
    f"- machine: {cpu}, {os.cpu_count()} vCPUs; load average before: {load}",
    f"- job: {os.environ['LAYERS'] or '784-512-512-10'}, {os.environ['PRECISION']}, global batch 256 on {os.environ['RANKS']} rank(s) × {os.environ['THREADS']} thread(s) ({256 // int(os.environ['RANKS'])} rows each); samples/s = median over epochs after the first, per run; runs interleaved A, B, A, B, ...", "",
    "| build | samples/s per run | median | test accuracy (last run) |", "|---|---|---|---|",
    f"| A `{a}` {os.environ.get('LABEL_A', '')} | {fmt(ra)} | {ma:,.0f} | {ra[-1][1]} |",
    f"| B `{b}` {os.environ.get('LABEL_B', '')} | {fmt(rb)} | {mb:,.0f} | {rb[-1][1]} |", "",
    f"B / A = {mb / ma:.3f}. Run-to-run spread within a build: A {min(x for x,_ in ra):,.0f}..{max(x for x,_ in ra):,.0f}, B {min(x for x,_ in rb):,.0f}..{max(x for x,_ in rb):,.0f}; a ratio inside those spreads is noise."]
text = "\n".join(lines) + "\n"
print(text)
tag = os.environ.get("TAG", "")
path = f"bench/results/ab-{datetime.date.today()}{'-' + tag if tag else ''}.md"
open(path, "w").write(text)
print(f"saved {path}")
PY
