#!/usr/bin/env bash
# The Fashion-MNIST benchmark (784-512-512-10, SGD lr 0.05 momentum 0.9, global batch 256):
# hvtrain on 1 and 2 ranks, this machine's SGEMM rate with hvtrain's matrix crate (one
# process, and two at once), and the Keras peer when bench/setup_peer.sh has installed it,
# all in one run. Prints a markdown report and saves it under bench/results/.
#   bash bench/run.sh            # EPOCHS=6 by default; PEER=0 skips the peer
set -euo pipefail
source "$(dirname "$0")/lib.sh"
EPOCHS=${EPOCHS:-6}
PEER=${PEER:-1}
MPIRUN="mpirun --bind-to none --mca mpi_yield_when_idle 1"
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)

# --- SGEMM ceiling: the step's exact GEMM shapes, one process, then two at once.
$BIN bench gemm --batch 128 --seconds 3 > "$work/gemm1.json"
$BIN bench gemm --batch 128 --seconds 3 > "$work/gemm2a.json" & $BIN bench gemm --batch 128 --seconds 3 > "$work/gemm2b.json"; wait

# --- hvtrain: 1 rank (batch 256) and 2 ranks (128 each).
for ranks in 1 2; do
  batch=$((256 / ranks))
  dir=runs/bench-$ranks
  $MPIRUN -n $ranks $BIN train jobs/fashion-mnist.toml --set training.epochs=$EPOCHS \
    --set training.batch_size=$batch --set output.dir="\"$dir\"" 2> "$work/hv$ranks.log"
  cp "$dir/metrics.jsonl" "$work/hv$ranks.jsonl"
done

# --- The peer, same job, same data, same run.
if [ "$PEER" = 1 ] && [ -x bench/.venv/bin/python ]; then
  bash bench/run_peer.sh "$EPOCHS" > "$work/peer.log" 2>&1 || echo "peer run failed; see below" >&2
fi

python3 - "$work" "$EPOCHS" "$LOAD" <<'PY'
import json, re, statistics, subprocess, sys, os, datetime, platform
work, epochs, load = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def j(p): return json.load(open(os.path.join(work, p)))
g1 = j("gemm1.json"); g2 = [j("gemm2a.json"), j("gemm2b.json")]
params = 784*512 + 512 + 512*512 + 512 + 512*10 + 10
model_flop = 6 * params            # per sample, the usual 6 x parameters
step_flop = g1["flop_per_sample"]  # what the step's GEMMs really do (no input gradient for layer 0)
rows = []
for ranks in (1, 2):
    m = [json.loads(l) for l in open(os.path.join(work, f"hv{ranks}.jsonl"))]
    sps = [e["samples_per_sec"] for e in m[1:]] or [m[0]["samples_per_sec"]]
    log = open(os.path.join(work, f"hv{ranks}.log")).read()
    first = float(re.search(r"first step done ([0-9.]+) s after process start", log).group(1))
    rss = max(float(x) for x in re.findall(r"peak RSS ([0-9.]+) MiB", log))
    ceiling = g1["gflops"] if ranks == 1 else sum(g["gflops"] for g in g2)
    med = statistics.median(sps)
    rows.append(("hvtrain", f"{ranks} rank(s), batch {256//ranks}/rank", med, min(sps), max(sps), first, rss,
                 m[-1].get("test_accuracy"), f"{med*step_flop/1e9:.0f} GFLOP/s = {100*med*step_flop/1e9/ceiling:.0f}% of SGEMM {ceiling:.0f}"))
peer_log = os.path.join(work, "peer.log")
if os.path.exists(peer_log):
    for line in open(peer_log):
        if line.startswith("PEER_RESULT "):
            p = json.loads(line[len("PEER_RESULT "):])
            rows.append((p["peer"], f'{p["mode"]}, {p["workers"]} process(es)', p["samples_per_sec"], p["samples_per_sec_min"],
                         p["samples_per_sec_max"], p["time_to_first_step_s"], p["peak_rss_mb"], p["test_accuracy"], ""))
cpu = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True, text=True).stdout.strip()
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
out = [f"# Fashion-MNIST benchmark, {datetime.date.today()}", "",
       f"- command: `bash bench/run.sh` (EPOCHS={epochs}), hvtrain commit {commit}",
       f"- machine: {cpu}, {os.cpu_count()} vCPUs, {platform.platform()}",
       f"- job: 784-512-512-10 ReLU, softmax cross-entropy, SGD lr 0.05 momentum 0.9, global batch 256, {epochs} epochs",
       "- samples/s: global, median over epochs after the first (min..max); first step: seconds from process start",
       f"- SGEMM (matrixmultiply, the step's 8 GEMM shapes, batch 128): one process {g1['gflops']:.1f} GFLOP/s; "
       f"two at once {g2[0]['gflops']:.1f} + {g2[1]['gflops']:.1f} GFLOP/s",
       f"- FLOP rate: samples/s x {step_flop/1e6:.2f} MFLOP per sample, the FLOPs the step's GEMMs multiply, the same count "
       f"`hvtrain bench gemm` reports its GFLOP/s in, so the two divide; the SGEMM rate is one process's for 1 rank and the "
       f"sum of two processes at once for 2 ranks. (6 x parameters would count {model_flop/1e6:.2f} MFLOP per sample: it "
       f"includes layer 0's input gradient, which the step does not compute; it is not used here.)",
       f"- load average (1/5/15 min) before the run: {load}; the 2 vCPUs may have been shared with other work: "
       "compare only rows of one run, and read the min..max column", "",
       "| system | setup | samples/s | min..max | first step (s) | peak RSS/rank (MiB) | test acc | FLOP rate |",
       "|---|---|---|---|---|---|---|---|"]
for r in rows:
    acc = f"{r[7]:.4f}" if isinstance(r[7], (int, float)) else "-"
    out.append(f"| {r[0]} | {r[1]} | {r[2]:,.0f} | {r[3]:,.0f}..{r[4]:,.0f} | {r[5]:.2f} | {r[6]:.0f} | {acc} | {r[8]} |")
if not os.path.exists(peer_log):
    out += ["", "Peer not run: install it with `bash bench/setup_peer.sh` (TensorFlow CPU, about 2.6 GB)."]
text = "\n".join(out) + "\n"
print(text)
path = f"bench/results/fashion-mnist-{datetime.date.today()}.md"
open(path, "w").write(text)
print(f"saved {path}")
PY
