#!/usr/bin/env bash
# Sharded state under model parallelism (issue #50, "no rank holds the whole model"): the
# 784-8192-8192-8192-10 MLP (141 M parameters) with Adam on 4 ranks, tensor = 2 or pipeline = 2
# (2 data ranks each), each epoch ending with an evaluation and a checkpoint, for
# shard = "none", "gradients" and "parameters": peak RSS of rank 0 and of the other ranks,
# the checkpoint's time and how it was written (gathered on rank 0, or in parts by every
# rank), samples/s. With BEFORE_BIN (a binary of an earlier commit) the same runs with it
# beside each, in the same run: what the change did.
#   bash bench/shard_mp.sh                      # EPOCHS=3 (5 steps of global batch 32 each)
#   BEFORE_BIN=/path/to/old/hvtrain BEFORE_COMMIT=abc1234 bash bench/shard_mp.sh
# No peer runs here: PyTorch's 2-D (tensor × FSDP) mesh is not set up in bench/ (see
# bench/shard_ckpt.sh for FSDP2 against hvtrain's shards without model parallelism).
# Writes bench/results/shard-mp-DATE.{md,log}.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
EPOCHS=${EPOCHS:-3}
LAYERS=784,8192,8192,8192,10
GLOBAL=32
N=4
day=$(date +%F)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
git rev-parse --short HEAD > "$work/commit"
# BEFORE_COMMIT names the commit BEFORE_BIN was built from (default: the git work tree it is in).
before_commit=${BEFORE_COMMIT:-}
if [ -n "${BEFORE_BIN:-}" ] && [ -z "$before_commit" ]; then
  before_commit=$(cd "$(dirname "$BEFORE_BIN")" && git rev-parse --short HEAD 2> /dev/null || echo "?")
fi
# 160 training rows: 5 steps of global batch 32 per epoch; 2,000 test rows.
$BIN data shard data/fashion-mnist-train.h5 --parts 375 --out "$work/rows" 2> /dev/null
$BIN data shard data/fashion-mnist-test.h5 --parts 5 --out "$work/test" 2> /dev/null
sed '/^test = /d' jobs/fashion-mnist.toml > "$work/job.toml"

declare -A LAYOUT=(
  [tensor]="--set parallel.tensor=2"
  [pipeline]="--set parallel.pipeline=2 --set parallel.micro_batches=2"
)
for layout in tensor pipeline; do
  for mode in none gradients parameters; do
    for which in after before; do
      bin=$BIN
      if [ "$which" = before ]; then [ -n "${BEFORE_BIN:-}" ] || continue; bin=$BEFORE_BIN; fi
      tag="$layout-$mode-$which"
      echo "hvtrain $N ranks, $layout, shard = $mode ($which)" >&2
      # shellcheck disable=SC2086
      mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -n $N "$bin" train "$work/job.toml" \
        --set model.layers="[$LAYERS]" --set training.epochs="$EPOCHS" --set training.batch_size=$((GLOBAL / 2)) \
        --set data.train="\"$work/rows/fashion-mnist-train-0.h5\"" --set data.test="\"$work/test/fashion-mnist-test-0.h5\"" \
        --set optimizer.kind="'adam'" --set optimizer.lr=0.0001 --set optimizer.momentum=0.0 \
        --set distribution.shard="'$mode'" --set checkpoint.every_steps=5 --set checkpoint.keep=1 \
        --set output.tensorboard=false --set output.dir="\"$work/out-$tag\"" ${LAYOUT[$layout]} \
        > "$work/hv-$tag.log" 2>&1 || { echo "hvtrain $tag failed:"; tail -5 "$work/hv-$tag.log"; }
      rm -rf "$work/out-$tag"
    done
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

mkdir -p bench/results
raw_lines "bench/results/shard-mp-$day.log" "model state per rank|starting parameters|checkpoint|each rank read|peak memory per rank|samples/s \(|rror" "$work"/hv-*.log
python3 - "$work" "$day" "$load_before" "$load_after" "$(cat "$work/commit")" "$EPOCHS" "$before_commit" <<'PY'
import json, os, re, statistics, subprocess, sys
work, day, lb, la, head, epochs, before = sys.argv[1:]
machine = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True, text=True).stdout.strip()
n_params = 784*8192+8192 + 2*(8192*8192+8192) + 8192*10+10
whole = 4 * n_params / 2**20
L = [f"# Sharded state under model parallelism: rank 0's memory and the checkpoints, {day}", "",
     f"- command: `{'BEFORE_BIN=... ' if before else ''}bash bench/shard_mp.sh` (EPOCHS={epochs}), hvtrain commit {head}"
     + (f", beside commit {before} (before)" if before else ""),
     f"- machine: {machine}, {os.cpu_count()} vCPUs, 4 ranks (oversubscribed: samples/s are not the method's). "
     f"Load average before/after: {lb} / {la}",
     f"- model: 784-8192-8192-8192-10 ({n_params/1e6:.1f} M parameters: {whole:.0f} MiB of float32 parameters, "
     f"{2*whole:.0f} MiB of Adam moments), Adam, global batch 32, {epochs} epochs of 5 steps, each ending with an "
     "evaluation of 2,000 test rows and a checkpoint (`checkpoint.every_steps = 5`, keep 1); tensor = 2 or "
     "pipeline = 2 (micro_batches 2), so 2 data ranks share each shard",
     "- peak RSS: hvtrain's `peak memory per rank` line (rank 0, and the largest of the others); checkpoint: the "
     "mean write as logged (whole: rank 0's write after the gather; in parts: every rank's part, then the index); "
     "one run each, so a few per cent of noise on memory and more on times (page-cache writeback)", ""]
def hv(tag):
    p = f"{work}/hv-{tag}.log"
    if not os.path.exists(p):
        return None
    log = open(p).read()
    mm = re.search(r"RSS \[([^\]]*)\]", log)
    whole_ms = [float(x) for x in re.findall(r"checkpoint \S+ written \((\d+) ms\)", log)]
    parts_ms = [float(x) for x in re.findall(r"checkpoint parts written by (?:all )?\d+ ranks at once \([0-9.]+ MB on rank 0, (?:one array at a time, )?(\d+) ms\)", log)]
    index_ms = [float(x) for x in re.findall(r"naming \d+ parts \((\d+) ms\)", log)]
    ms = whole_ms or [a + b for a, b in zip(parts_ms, index_ms)]
    writers = re.search(r"checkpoint parts written by (?:all )?(\d+) ranks", log)
    eps = [int(a) / float(b) for a, b in re.findall(r"\| (\d+) samples, [0-9.]+ samples/s \(([0-9.]+) s\)", log)]
    rss = [float(x) for x in mm.group(1).split(", ")] if mm else []
    return {"rss0": rss[0] if rss else None, "rss_rest": max(rss[1:]) if len(rss) > 1 else None,
            "ckpt_ms": statistics.mean(ms) if ms else None, "parts": bool(parts_ms),
            "writers": int(writers.group(1)) if writers else None,
            "drew": "pieces" if "drew its own pieces" in log else "shard" if "drew its shard" in log else None,
            "rate": statistics.median(eps[1:] or eps) if eps else None,
            "failed": None if mm else (log.strip().splitlines() or ["?"])[-1][:120]}
L += ["| layout | shard | hvtrain | rank 0 peak RSS MiB | other ranks' max MiB | checkpoint ms | written as | starting parameters | samples/s |",
      "|---|---|---|---:|---:|---:|---|---|---:|"]
rows = {}
for layout in ["tensor", "pipeline"]:
    for mode in ["none", "gradients", "parameters"]:
        for which in ["before", "after"]:
            h = hv(f"{layout}-{mode}-{which}")
            if h is None:
                continue
            name = f"{which} ({before if which == 'before' else head})"
            if h["failed"]:
                L.append(f"| {layout} | {mode} | {name} | failed: {h['failed']} | | | | | |")
            else:
                how = f"{h['writers']} parts (a rank each) + index" if h["parts"] else "one file, gathered on rank 0"
                init = {"pieces": "each rank drew its pieces", "shard": "each rank drew its shard"}.get(h["drew"], "built on rank 0, sent")
                ck = f"{h['ckpt_ms']:,.0f}" if h["ckpt_ms"] is not None else "?"
                L.append(f"| {layout} | {mode} | {name} | {h['rss0']:,.0f} | {h['rss_rest']:,.0f} | {ck} | "
                         f"{how} | {init} | {h['rate']:,.1f} |")
            rows[f"{layout}-{mode}-{which}"] = h
L += ["", f"Raw lines: `bench/results/shard-mp-{day}.log`.", ""]
open(f"bench/results/shard-mp-{day}.md", "w").write("\n".join(L))
json.dump(rows, open(f"bench/results/shard-mp-{day}.json", "w"), indent=1)
print("\n".join(L))
PY
