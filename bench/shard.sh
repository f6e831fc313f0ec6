#!/usr/bin/env bash
# Sharded state (distribution.shard, issue #50): for the 784-8192-8192-8192-10 MLP (141 M
# parameters) with Adam, on 1, 2 and 4 ranks (oversubscribed past 2 on a 2-core machine), each
# mode of hvtrain (none, optimizer, gradients, parameters with and without prefetch) and, in the same run, PyTorch's counterparts on
# the CPU over gloo (DDP, ZeroRedundancyOptimizer, FSDP2 SHARD_GRAD_OP and FULL_SHARD,
# bench/torch_zero_peer.py): samples/s, this rank's model state as hvtrain logs it, peak RSS
# per rank.
#   bash bench/shard.sh            # RANKS="1 2 4", EPOCHS=3 (5 steps of global batch 32 each)
# Needs bench/.venv-torch (bash bench/setup_torch.sh); without it the PyTorch columns say so.
# Writes bench/results/shard-DATE.{md,log}. Runs one job at a time (4 ranks unsharded hold
# about 11 GiB of model state between them).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
RANKS=${RANKS:-"1 2 4"}
EPOCHS=${EPOCHS:-3}
LAYERS=784,8192,8192,8192,10
GLOBAL=32
TORCH=bench/.venv-torch/bin/python
day=$(date +%F)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# 160 rows: 5 steps of global batch 32 per epoch.
$BIN data shard data/fashion-mnist-train.h5 --parts 375 --out "$work/rows" 2> /dev/null
sed '/^test = /d' jobs/fashion-mnist.toml > "$work/job.toml"

for n in $RANKS; do
  # parameters-noprefetch: shard = "parameters" with distribution.prefetch = false (each layer
  # gathered when used, none ahead on the gather thread).
  modes="none optimizer gradients parameters parameters-noprefetch"
  [ "$n" = 1 ] && modes="none"  # one rank has nothing to divide
  for mode in $modes; do
    prefetch=true
    [ "$mode" = parameters-noprefetch ] && prefetch=false
    echo "hvtrain $n rank(s), shard = $mode" >&2
    # One thread a rank, as each PyTorch process below (torch_zero_peer.py --threads 1):
    # "auto" would give the one-rank run both cores.
    mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -n "$n" $BIN train "$work/job.toml" \
      --set model.layers="[$LAYERS]" --set training.epochs="$EPOCHS" --set training.batch_size=$((GLOBAL / n)) \
      --set data.train="\"$work/rows/fashion-mnist-train-0.h5\"" --set optimizer.kind="'adam'" \
      --set optimizer.lr=0.0001 --set optimizer.momentum=0.0 --set distribution.shard="'${mode%-noprefetch}'" \
      --set distribution.prefetch=$prefetch --set training.threads=1 \
      --set checkpoint.every_minutes=0 --set output.tensorboard=false --set output.dir="\"$work/out-$n-$mode\"" \
      > "$work/hv-$n-$mode.log" 2>&1 || { echo "hvtrain $n $mode failed:"; tail -5 "$work/hv-$n-$mode.log"; }
  done
  for mode in ddp zero fsdp-grad fsdp-full; do
    [ "$n" = 1 ] && [ "$mode" != ddp ] && continue
    if [ ! -x "$TORCH" ]; then echo "no PyTorch venv" > "$work/pt-$n-$mode.log"; continue; fi
    echo "PyTorch $n rank(s), $mode" >&2
    timeout 1200 "$TORCH" -m torch.distributed.run --nproc_per_node "$n" bench/torch_zero_peer.py --mode "$mode" \
      --layers "$LAYERS" --global-batch $GLOBAL --epochs "$EPOCHS" --steps 5 > "$work/pt-$n-$mode.log" 2>&1 ||
      { echo "PyTorch $n $mode failed:"; tail -3 "$work/pt-$n-$mode.log"; }
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

mkdir -p bench/results
raw_lines "bench/results/shard-$day.log" "model state per rank|distribution.shard|peak memory per rank|samples/s \(|layer gathers|PEER_RESULT|rror" "$work"/hv-*.log "$work"/pt-*.log
python3 - "$work" "$day" "$load_before" "$load_after" "$(git rev-parse --short HEAD)" "$RANKS" "$EPOCHS" <<'PY'
import json, os, re, statistics, subprocess, sys
work, day, lb, la, head, ranks, epochs = sys.argv[1:]
machine = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True, text=True).stdout.strip()
mpi = subprocess.run("mpirun --version | head -1", shell=True, capture_output=True, text=True).stdout.strip()
n_params = 784*8192+8192 + 2*(8192*8192+8192) + 8192*10+10
L = [f"# Sharded state (ZeRO stages 1 to 3) against PyTorch, {day}", "",
     f"- command: `bash bench/shard.sh` (RANKS=\"{ranks}\", EPOCHS={epochs}), hvtrain commit {head}",
     f"- machine: {machine}, {os.cpu_count()} vCPUs, {mpi}; more ranks than cores are **oversubscribed**, so samples/s "
     f"falls with the rank count here for reasons that are not the method's; compare columns within a row group. "
     f"Load average before/after: {lb} / {la}",
     f"- model: 784-8192-8192-8192-10 ({n_params/1e6:.1f} M parameters, {4*n_params/2**20:.0f} MiB), Adam lr 1e-4, "
     f"global batch 32, {epochs} epochs of 5 steps (160 Fashion-MNIST rows; PyTorch: random rows of the same shape), "
     "1 thread per rank",
     "- samples/s: median of the epochs after the first; state/rank: hvtrain's start-up line (rank 0: params + grads "
     "+ optimizer); peak RSS: the largest over the ranks (hvtrain's `peak memory per rank` line, PyTorch's ru_maxrss, "
     "which includes about 700 MiB of PyTorch itself at 1 rank)", ""]
PEER = {"none": "ddp", "optimizer": "zero", "gradients": "fsdp-grad", "parameters": "fsdp-full",
        "parameters-noprefetch": None}
NAME = {"ddp": "DDP", "zero": "ZeroRedundancyOptimizer", "fsdp-grad": "FSDP2 SHARD_GRAD_OP", "fsdp-full": "FSDP2 FULL_SHARD"}
def hv(n, mode):
    p = f"{work}/hv-{n}-{mode}.log"
    if not os.path.exists(p):
        return None
    log = open(p).read()
    eps = [int(a) / float(b) for a, b in re.findall(r"\| (\d+) samples, [0-9.]+ samples/s \(([0-9.]+) s\)", log)]
    st = re.search(r"params ([0-9.]+) MiB, grads ([0-9.]+) MiB, optimizer ([0-9.]+) MiB \(([0-9.]+) MiB in all\)", log)
    mm = re.search(r"RSS \[([^\]]*)\]", log)
    g = re.search(r"rank 0\] layer gathers \(shard = \"parameters\"\): (.*)", log)
    return {"rate": statistics.median(eps[1:] or eps) if eps else None,
            "state": st.groups() if st else None,
            "rss": max(float(x) for x in mm.group(1).split(", ")) if mm else None,
            "gathers": g.group(1) if g else None}
def pt(n, mode):
    p = f"{work}/pt-{n}-{mode}.log"
    if not os.path.exists(p):
        return None
    m = re.search(r"PEER_RESULT (\{.*\})", open(p).read())
    return json.loads(m.group(1)) if m else {"failed": open(p).read().strip().splitlines()[-1:]}
rows = {}
for n in ranks.split():
    n = int(n)
    L += [f"## {n} rank(s)", "",
          "| hvtrain shard | samples/s | × none | state/rank MiB (params + grads + optimizer) | peak RSS/rank MiB | PyTorch | samples/s | × DDP | peak RSS/rank MiB |",
          "|---|---:|---:|---|---:|---|---:|---:|---:|"]
    base = hv(n, "none")
    pbase = pt(n, "ddp")
    for mode in ["none", "optimizer", "gradients", "parameters", "parameters-noprefetch"]:
        h = hv(n, mode) if mode in PEER else None
        peer = PEER.get(mode, mode)
        p = pt(n, peer) if peer else None
        if h is None and p is None:
            continue
        if h and h["rate"]:
            s = h["state"] or ("?",) * 4
            label = "parameters, prefetch off" if mode == "parameters-noprefetch" else mode
            hcol = (f"{label} | {h['rate']:,.1f} | {h['rate'] / base['rate']:.2f}× | {s[3]} ({s[0]} + {s[1]} + {s[2]}) | "
                    f"{h['rss']:,.0f}" if base and base["rate"] else f"{label} | {h['rate']:,.1f} | | | ")
        else:
            hcol = f"{mode} | failed | | | "
        if p and "samples_per_sec" in p:
            rel = f"{p['samples_per_sec'] / pbase['samples_per_sec']:.2f}×" if pbase and "samples_per_sec" in pbase else ""
            pcol = f"{NAME[peer]} | {p['samples_per_sec']:,.1f} | {rel} | {max(p['peak_rss_mb']):,.0f}"
        elif p:
            pcol = f"{NAME[peer]} | failed: {' '.join(p.get('failed', []))[:80]} | | "
        else:
            pcol = " | | | "
        L.append(f"| {hcol} | {pcol} |")
        rows[f"{n}-{mode}"] = {"hvtrain": h, "torch": p}
    L.append("")
    for mode in ["parameters", "parameters-noprefetch"]:
        h = hv(n, mode)
        if h and h["gathers"]:
            L.append(f"- {mode}, rank 0's layer gathers: {h['gathers']}")
    L.append("")
torch_v = next((r["torch"]["torch"] for r in rows.values() if r["torch"] and "torch" in r["torch"]), "not run")
L += [f"PyTorch {torch_v} (gloo). Raw lines: `bench/results/shard-{day}.log`.", ""]
open(f"bench/results/shard-{day}.md", "w").write("\n".join(L))
json.dump(rows, open(f"bench/results/shard-{day}.json", "w"), indent=1)
print("\n".join(L))
PY
