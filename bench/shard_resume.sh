#!/usr/bin/env bash
# Resuming sharded state (issue #50, "no rank holds the whole model"): the 784-8192-8192-8192-10
# MLP (141 M parameters) with Adam; a checkpoint written at step 3 of 5 on 2 ranks, whole
# (shard = "none") and in parts (shard = "parameters"), each resumed on 2 ranks with
# shard = "parameters" for the epoch's last 2 steps: each rank's peak RSS, the start-up (process
# start to the first step, and the restore: from the state line to the engine line), by this
# build and, with BASE_BIN, an earlier one (the "before" rows); beside PyTorch's DDP and FSDP2
# FULL_SHARD resuming a torch.distributed.checkpoint save of the same model (step 3 of 5) in the
# same run (bench/torch_zero_peer.py --resume).
#   BASE_BIN=/path/to/older/hvtrain bash bench/shard_resume.sh
# Needs bench/.venv-torch (bash bench/setup_torch.sh); without it the PyTorch rows say so.
# Writes bench/results/shard-resume-DATE.{md,json,log}. KEEP_WORK=1 keeps the raw files.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
LAYERS=784,8192,8192,8192,10
GLOBAL=32
N=2
TORCH=bench/.venv-torch/bin/python
day=$(date +%F)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
git rev-parse --short HEAD > "$work/commit"

# 160 training rows: 5 steps of global batch 32.
$BIN data shard data/fashion-mnist-train.h5 --parts 375 --out "$work/rows" 2> /dev/null
sed '/^test = /d' jobs/fashion-mnist.toml > "$work/job.toml"
hv() {  # hv BIN LOG ARGS...: 2 ranks of the bench's job
  local bin=$1 log=$2; shift 2
  mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -n $N "$bin" train "$work/job.toml" \
    --set model.layers="[$LAYERS]" --set training.epochs=1 --set training.batch_size=$((GLOBAL / N)) \
    --set data.train="\"$work/rows/fashion-mnist-train-0.h5\"" --set optimizer.kind="'adam'" \
    --set optimizer.lr=0.0001 --set optimizer.momentum=0.0 --set output.tensorboard=false \
    --set checkpoint.keep=5 "$@" > "$log" 2>&1 || { echo "failed: $log"; tail -5 "$log"; }
}
for from in none parameters; do
  echo "writing the step-3 checkpoint, shard = $from" >&2
  hv "$BIN" "$work/write-$from.log" --set distribution.shard="'$from'" --set checkpoint.every_steps=3 \
    --set output.dir="\"$work/ckpt-$from\""
  rm -f "$work/ckpt-$from/weights.h5"
done
builds=(new)
[ -n "${BASE_BIN:-}" ] && builds=(base new)
for b in "${builds[@]}"; do
  bin=$BIN; [ "$b" = base ] && bin=$BASE_BIN
  for from in none parameters; do
    echo "$b: resuming the $from checkpoint with shard = parameters" >&2
    hv "$bin" "$work/resume-$b-$from.log" --set distribution.shard="'parameters'" \
      --set output.dir="\"$work/ckpt-$from\"" --resume "$work/ckpt-$from/ckpt-step000000003.h5"
  done
done
for mode in ddp fsdp-full; do
  if [ ! -x "$TORCH" ]; then echo "no PyTorch venv" > "$work/pt-$mode.log"; continue; fi
  echo "PyTorch $N ranks, $mode: save at step 3, resume" >&2
  run_pt() {
    timeout 1200 "$TORCH" -m torch.distributed.run --nproc_per_node $N bench/torch_zero_peer.py --mode "$mode" \
      --layers "$LAYERS" --global-batch $GLOBAL --epochs 1 "$@"
  }
  run_pt --steps 3 --checkpoint "$work/pt-$mode" > "$work/pt-write-$mode.log" 2>&1 || tail -3 "$work/pt-write-$mode.log"
  run_pt --steps 2 --resume "$work/pt-$mode/epoch0" > "$work/pt-$mode.log" 2>&1 || tail -3 "$work/pt-$mode.log"
  rm -rf "$work/pt-$mode"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

mkdir -p bench/results
raw_lines "bench/results/shard-resume-$day.log" "model state per rank|engine:|resuming|checked|pieces|put together|first step done|peak memory per rank|PEER_RESULT|rror" "$work"/write-*.log "$work"/resume-*.log "$work"/pt-*.log
python3 - "$work" "$day" "$load_before" "$load_after" "$(cat "$work/commit")" "${BASE_BIN:-}" <<'PY'
import datetime, json, os, re, subprocess, sys
work, day, lb, la, head, base = sys.argv[1:]
machine = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True, text=True).stdout.strip()
n_params = 784*8192+8192 + 2*(8192*8192+8192) + 8192*10+10
whole = 4 * n_params / 2**20
def stamp(line):
    return datetime.datetime.fromisoformat(line[1:25].replace("Z", "+00:00"))
def hv(name):
    log = open(f"{work}/{name}.log").read()
    lines = log.splitlines()
    rss = re.search(r"RSS \[([^\]]*)\]", log)
    first = re.search(r"first step done ([0-9.]+) s after process start", log)
    st = [l for l in lines if "model state per rank" in l]
    en = [l for l in lines if "] run id " in l]
    how = "; ".join(m.group(0).strip() for l in lines for m in [re.search(
        r"(each rank read its own pieces[^(/]*|the checkpoint was written whole: rank 0 sent each rank only its pieces of it|checked the checkpoint's \d+ parts on \d+ ranks at once in [0-9.]+ s)", l)] if m) or "?"
    checked = re.search(r"checked the checkpoint's (\d+) parts on (\d+) ranks at once in ([0-9.]+) s", log)
    return {"rss": [float(x) for x in rss.group(1).split(", ")] if rss else None,
            "first_step_s": float(first.group(1)) if first else None,
            "restore_s": (stamp(en[0]) - stamp(st[0])).total_seconds() if st and en else None,
            "how": how.strip(), "parts_checked_s": float(checked.group(3)) if checked else None,
            "failed": None if rss else (lines or ["?"])[-1][:160]}
def pt(mode):
    m = re.search(r"PEER_RESULT (\{.*\})", open(f"{work}/pt-{mode}.log").read())
    return json.loads(m.group(1)) if m else {"failed": open(f"{work}/pt-{mode}.log").read().strip().splitlines()[-1:]}
L = [f"# Resuming sharded state: whole checkpoints read in pieces, parts checked on every rank, {day}", "",
     f"- command: `BASE_BIN=... bash bench/shard_resume.sh`, hvtrain commit {head}" + (f"; before: {base}" if base else ""),
     f"- machine: {machine}, {os.cpu_count()} vCPUs, 2 ranks. Load average before/after: {lb} / {la}",
     f"- model: 784-8192-8192-8192-10 ({n_params/1e6:.1f} M parameters: {whole:.0f} MiB of float32 parameters, "
     f"{2*whole:.0f} MiB of Adam moments), Adam, global batch 32; a checkpoint at step 3 of 5 written on 2 ranks "
     "(whole by shard = \"none\", in 2 parts by shard = \"parameters\"), resumed on 2 ranks with shard = \"parameters\" "
     "for the last 2 steps; the files in the page cache (written just before)",
     "- peak RSS per rank: the resumed run's whole life (restore and 2 steps), hvtrain's `peak memory per rank` line; "
     "first step: rank 0's `first step done … after process start`; restore: from the `model state per rank` line to "
     "the `run id` line (reading and checking the checkpoint, the pieces to every rank). One run each: a few per cent "
     "of noise, more for the sub-second figures", "",
     "| build | checkpoint resumed | peak RSS rank 0 MiB | peak RSS rank 1 MiB | restore s | first step s | how |",
     "|---|---|---:|---:|---:|---:|---|"]
rows = {}
for b in (["base", "new"] if base else ["new"]):
    for src in ["none", "parameters"]:
        h = hv(f"resume-{b}-{src}")
        rows[f"{b}-{src}"] = h
        what = "whole (shard = none)" if src == "none" else "2 parts (shard = parameters)"
        label = "before" if b == "base" else "this"
        if h["failed"]:
            L.append(f"| {label} | {what} | failed: {h['failed']} | | | | |")
            continue
        L.append(f"| {label} | {what} | {h['rss'][0]:,.0f} | {h['rss'][1]:,.0f} | {h['restore_s']:.2f} | "
                 f"{h['first_step_s']:.2f} | {h['how']} |")
L += ["", "| PyTorch | checkpoint resumed | peak RSS rank 0 MiB after the load | rank 1 | rank 0 after 2 steps | rank 1 | load s |",
      "|---|---|---:|---:|---:|---:|---:|"]
for mode, name in [("ddp", "DDP"), ("fsdp-full", "FSDP2 FULL_SHARD")]:
    p = pt(mode)
    rows[f"torch-{mode}"] = p
    if p.get("resume_s") is None:
        L.append(f"| {name} | failed: {' '.join(p.get('failed', []))[:100]} | | | | | |")
        continue
    r, e = p["resume_peak_rss_mb"], p["peak_rss_mb"]
    L.append(f"| {name} | torch.distributed.checkpoint save of the same state | {r[0]:,.0f} | {r[1]:,.0f} | {e[0]:,.0f} | "
             f"{e[1]:,.0f} | {p['resume_s']:.2f} |")
torch_v = next((r["torch"] for k, r in rows.items() if k.startswith("torch") and "torch" in r), "not run")
L += ["", f"PyTorch {torch_v} (gloo), whose RSS includes some 700 MiB of PyTorch itself. Raw lines: "
      f"`bench/results/shard-resume-{day}.log`.", ""]
open(f"bench/results/shard-resume-{day}.md", "w").write("\n".join(L))
json.dump(rows, open(f"bench/results/shard-resume-{day}.json", "w"), indent=1)
print("\n".join(L))
PY
