#!/usr/bin/env bash
# Sharded state at the epoch's end (issue #50, "no rank holds the whole model"): the
# 784-8192-8192-8192-10 MLP (141 M parameters) with Adam on 2 ranks, each epoch ending with an
# evaluation of 1,000 test rows per rank and a checkpoint, for hvtrain's shard = "none",
# "gradients" and "parameters" and, in the same run, PyTorch's DDP, FSDP2 SHARD_GRAD_OP and
# FULL_SHARD on the CPU over gloo with torch.distributed.checkpoint (every rank saves its
# shards; bench/torch_zero_peer.py --checkpoint --test-rows): peak RSS per rank and the
# checkpoint's time. hvtrain writes a checkpoint of sharded state in parts (every rank its own)
# and evaluates "parameters" a layer at a time.
#   bash bench/shard_ckpt.sh       # EPOCHS=3 (5 steps of global batch 32 each)
# Needs bench/.venv-torch (bash bench/setup_torch.sh); without it the PyTorch columns say so.
# Writes bench/results/shard-ckpt-DATE.{md,log}. KEEP_WORK=1 keeps the raw files; REPORT_FROM=DIR
# then remakes the report from them.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
EPOCHS=${EPOCHS:-3}
LAYERS=784,8192,8192,8192,10
GLOBAL=32
N=2
TORCH=bench/.venv-torch/bin/python
day=$(date +%F)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# REPORT_FROM=DIR: only the report, from the raw files of an earlier run kept with KEEP_WORK=1.
if [ -n "${REPORT_FROM:-}" ]; then rm -rf "$work"; trap - EXIT; work=$REPORT_FROM; else
git rev-parse --short HEAD > "$work/commit"
cut -d' ' -f1-3 /proc/loadavg > "$work/load"
# 160 training rows: 5 steps of global batch 32 per epoch; 2,000 test rows (1,000 per rank).
$BIN data shard data/fashion-mnist-train.h5 --parts 375 --out "$work/rows" 2> /dev/null
$BIN data shard data/fashion-mnist-test.h5 --parts 5 --out "$work/test" 2> /dev/null
sed '/^test = /d' jobs/fashion-mnist.toml > "$work/job.toml"

for mode in none gradients parameters; do
  echo "hvtrain $N ranks, shard = $mode" >&2
  mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -n $N $BIN train "$work/job.toml" \
    --set model.layers="[$LAYERS]" --set training.epochs="$EPOCHS" --set training.batch_size=$((GLOBAL / N)) \
    --set data.train="\"$work/rows/fashion-mnist-train-0.h5\"" --set data.test="\"$work/test/fashion-mnist-test-0.h5\"" \
    --set optimizer.kind="'adam'" --set optimizer.lr=0.0001 --set optimizer.momentum=0.0 \
    --set distribution.shard="'$mode'" --set checkpoint.every_steps=5 --set checkpoint.keep=1 \
    --set output.tensorboard=false --set output.dir="\"$work/out-$mode\"" \
    > "$work/hv-$mode.log" 2>&1 || { echo "hvtrain $mode failed:"; tail -5 "$work/hv-$mode.log"; }
  du -sm "$work/out-$mode" | cut -f1 > "$work/hv-$mode.mb"
  rm -rf "$work/out-$mode"
done
for mode in ddp fsdp-grad fsdp-full; do
  if [ ! -x "$TORCH" ]; then echo "no PyTorch venv" > "$work/pt-$mode.log"; continue; fi
  echo "PyTorch $N ranks, $mode" >&2
  timeout 1200 "$TORCH" -m torch.distributed.run --nproc_per_node $N bench/torch_zero_peer.py --mode "$mode" \
    --layers "$LAYERS" --global-batch $GLOBAL --epochs "$EPOCHS" --steps 5 --test-rows 1000 \
    --checkpoint "$work/pt-$mode" > "$work/pt-$mode.log" 2>&1 ||
    { echo "PyTorch $mode failed:"; tail -3 "$work/pt-$mode.log"; }
  rm -rf "$work/pt-$mode"
done
fi
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
[ -f "$work/load" ] && load_before=$(cat "$work/load") && [ -n "${REPORT_FROM:-}" ] && load_after="(not kept)"

mkdir -p bench/results
raw_lines "bench/results/shard-ckpt-$day.log" "model state per rank|checkpoint|peak memory per rank|samples/s \(|PEER_RESULT|rror" "$work"/hv-*.log "$work"/pt-*.log
python3 - "$work" "$day" "$load_before" "$load_after" "$(cat "$work/commit" 2>/dev/null || git rev-parse --short HEAD)" "$EPOCHS" <<'PY'
import json, os, re, statistics, subprocess, sys
work, day, lb, la, head, epochs = sys.argv[1:]
machine = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True, text=True).stdout.strip()
n_params = 784*8192+8192 + 2*(8192*8192+8192) + 8192*10+10
whole = 4 * n_params / 2**20
L = [f"# Sharded state at the epoch's end: evaluation and checkpoints against PyTorch, {day}", "",
     f"- command: `bash bench/shard_ckpt.sh` (EPOCHS={epochs}), hvtrain commit {head}",
     f"- machine: {machine}, {os.cpu_count()} vCPUs, 2 ranks. Load average before/after: {lb} / {la}",
     f"- model: 784-8192-8192-8192-10 ({n_params/1e6:.1f} M parameters: {whole:.0f} MiB of float32 parameters, "
     f"{2*whole:.0f} MiB of Adam moments), Adam lr 1e-4, global batch 32, {epochs} epochs of 5 steps; each epoch "
     "ends with an evaluation of 1,000 rows per rank and a checkpoint (hvtrain: `checkpoint.every_steps = 5`, keep 1; "
     "PyTorch: `torch.distributed.checkpoint.save` of `get_state_dict(model, optimizer)`)",
     "- peak RSS: the largest over the ranks (hvtrain's `peak memory per rank` line; PyTorch's ru_maxrss, which "
     "includes some 700 MiB of PyTorch itself); checkpoint: hvtrain's mean write per checkpoint as logged (whole: "
     "rank 0's write after the gather; in parts: every rank's part, then the index), PyTorch's save between two "
     "barriers; one run each, so a few per cent of noise (the checkpoint times vary by 2x between epochs: the page "
     "cache's writeback)", ""]
PEER = {"none": "ddp", "gradients": "fsdp-grad", "parameters": "fsdp-full"}
NAME = {"ddp": "DDP", "fsdp-grad": "FSDP2 SHARD_GRAD_OP", "fsdp-full": "FSDP2 FULL_SHARD"}
def hv(mode):
    p = f"{work}/hv-{mode}.log"
    log = open(p).read()
    mm = re.search(r"RSS \[([^\]]*)\]", log)
    whole_ms = [float(x) for x in re.findall(r"checkpoint \S+ written \((\d+) ms\)", log)]
    parts_ms = [float(x) for x in re.findall(r"checkpoint parts written by (?:all )?\d+ ranks at once \([0-9.]+ MB on rank 0, (?:one array at a time, )?(\d+) ms\)", log)]
    index_ms = [float(x) for x in re.findall(r"naming \d+ parts \((\d+) ms\)", log)]
    ms = whole_ms or [a + b for a, b in zip(parts_ms, index_ms)]
    eps = [int(a) / float(b) for a, b in re.findall(r"\| (\d+) samples, [0-9.]+ samples/s \(([0-9.]+) s\)", log)]
    mb = open(f"{work}/hv-{mode}.mb").read().strip()
    return {"rss": max(float(x) for x in mm.group(1).split(", ")) if mm else None,
            "ckpt_ms": statistics.mean(ms) if ms else None, "parts": bool(parts_ms), "out_mb": mb,
            "rate": statistics.median(eps[1:] or eps) if eps else None,
            "failed": None if mm else (log.strip().splitlines() or ["?"])[-1][:120]}
def pt(mode):
    p = f"{work}/pt-{mode}.log"
    m = re.search(r"PEER_RESULT (\{.*\})", open(p).read())
    return json.loads(m.group(1)) if m else {"failed": open(p).read().strip().splitlines()[-1:]}
L += ["| hvtrain shard | peak RSS/rank MiB | checkpoint ms | written as | samples/s | PyTorch | peak RSS/rank MiB | checkpoint ms | samples/s |",
      "|---|---:|---:|---|---:|---|---:|---:|---:|"]
rows = {}
for mode in ["none", "gradients", "parameters"]:
    h, p = hv(mode), pt(PEER[mode])
    if h["failed"]:
        hcol = f"{mode} | failed: {h['failed']} | | | "
    else:
        how = "parts (every rank its own) + index" if h["parts"] else "one file, gathered on rank 0"
        hcol = f"{mode} | {h['rss']:,.0f} | {h['ckpt_ms']:,.0f} | {how} | {h['rate']:,.1f}"
    if "peak_rss_mb" in p:
        cs = p.get("checkpoint_s") or []
        pcol = f"{NAME[PEER[mode]]} | {max(p['peak_rss_mb']):,.0f} | {1e3*statistics.mean(cs):,.0f} | {p['samples_per_sec']:,.1f}"
    else:
        pcol = f"{NAME[PEER[mode]]} | failed: {' '.join(p.get('failed', []))[:80]} | | "
    L.append(f"| {hcol} | {pcol} |")
    rows[mode] = {"hvtrain": h, "torch": p}
torch_v = next((r["torch"]["torch"] for r in rows.values() if "torch" in r["torch"]), "not run")
L += ["", f"PyTorch {torch_v} (gloo). Raw lines: `bench/results/shard-ckpt-{day}.log`.", ""]
open(f"bench/results/shard-ckpt-{day}.md", "w").write("\n".join(L))
json.dump(rows, open(f"bench/results/shard-ckpt-{day}.json", "w"), indent=1)
print("\n".join(L))
PY
