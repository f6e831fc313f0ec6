#!/usr/bin/env bash
# Each hidden activation on this CPU, hvtrain against PyTorch side by side in one run: the
# Fashion-MNIST job (784-512-512-10, SGD lr 0.05 momentum 0.9, global batch 256, float32),
# hvtrain as 1 rank × 2 threads, PyTorch as 1 process × 2 threads (bench/torch_cpu_peer.py
# --activation: nn.GELU(approximate="tanh"), nn.SiLU, nn.ELU, ...), for ROUNDS rounds with the
# systems interleaved in each round. samples/s is the median over the epochs after the first.
# The activations' element-wise passes are what differs between the rows: ReLU's is a select,
# the others' transcendental functions (hvtrain: src/device/cpu/vmath.rs).
#   bash bench/activations.sh                  # ROUNDS=2 EPOCHS=4 ACTS="relu tanh gelu silu sigmoid softplus elu"
# Prints a markdown report and saves it as bench/results/activations-DATE.md (raw: .json).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
ROUNDS=${ROUNDS:-2}
EPOCHS=${EPOCHS:-4}
ACTS=${ACTS:-relu tanh gelu silu sigmoid softplus elu}
PY=bench/.venv-torch/bin/python
[ -x "$PY" ] || bash bench/setup_torch.sh
COMMIT=$(git rev-parse --short HEAD)
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
for r in $(seq 1 "$ROUNDS"); do
  for a in $ACTS; do
    dir=runs/bench-act-$a
    $BIN train jobs/fashion-mnist.toml --set training.epochs="$EPOCHS" --set "model.activation=\"$a\"" \
      --set training.batch_size=256 --set training.threads=2 --set training.device=\"cpu\" \
      --set checkpoint.every_minutes=0 --set output.dir="\"$dir\"" 2> "$work/r$r-hv-$a.log"
    cp "$dir/metrics.jsonl" "$work/r$r-hv-$a.jsonl"
    "$PY" bench/torch_cpu_peer.py --epochs "$EPOCHS" --threads 2 --activation "$a" > "$work/r$r-pt-$a.peer" 2>&1
  done
done
python3 - "$work" "$ROUNDS" "$EPOCHS" "$ACTS" "$COMMIT" "$LOAD" <<'PY'
import datetime, json, os, platform, statistics, subprocess, sys
work, rounds, epochs, acts, commit, load = sys.argv[1:]
rounds, acts = int(rounds), acts.split()
def hv(tag):
    m = [json.loads(l) for l in open(os.path.join(work, f"{tag}.jsonl"))]
    return statistics.median(e["samples_per_sec"] for e in m[1:]), m[-1]["test_accuracy"]
def pt(tag):
    for line in open(os.path.join(work, f"{tag}.peer")):
        if line.startswith("PEER_RESULT "):
            p = json.loads(line[len("PEER_RESULT "):])
            return p["samples_per_sec"], p["test_accuracy"], p["peer"]
    raise SystemExit(f"{tag}: the peer printed no result:\n" + open(os.path.join(work, f"{tag}.peer")).read())
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
flags = open("/proc/cpuinfo").read()
feat = " ".join(f for f in ("avx512f", "avx512_bf16", "amx_bf16") if f" {f}" in flags)
date = datetime.date.today().isoformat()
raw, peer = {}, "?"
lines = [f"# Hidden activations on the CPU: hvtrain against PyTorch ({date})", "",
         f"- machine: {cpu} ({feat or 'no AVX-512'}), {os.cpu_count()} vCPUs, load before {load}; hvtrain {commit}",
         f"- command: `ROUNDS={rounds} EPOCHS={epochs} bash bench/activations.sh`",
         f"- job: Fashion-MNIST 784-512-512-10, SGD lr 0.05 momentum 0.9, global batch 256, float32, {epochs} epochs;"
         " hvtrain 1 rank × 2 threads, PyTorch 1 process × 2 threads; samples/s the median of epochs 2..N,"
         f" each round's figure listed (rounds interleaved: hvtrain then PyTorch per activation)", "",
         "| activation | hvtrain samples/s | PyTorch samples/s | hvtrain / PyTorch | vs hvtrain's ReLU | test accuracy hvtrain / PyTorch |",
         "|---|---:|---:|---:|---:|---:|"]
relu = None
for a in acts:
    h = [hv(f"r{r}-hv-{a}") for r in range(1, rounds + 1)]
    p = [pt(f"r{r}-pt-{a}") for r in range(1, rounds + 1)]
    peer = p[0][2]
    hm, pm = statistics.median(x[0] for x in h), statistics.median(x[0] for x in p)
    if a == "relu":
        relu = hm
    raw[a] = {"hvtrain": [x[0] for x in h], "pytorch": [x[0] for x in p],
              "hvtrain_accuracy": [x[1] for x in h], "pytorch_accuracy": [x[1] for x in p]}
    fmt = lambda v: " / ".join(f"{x:,.0f}" for x in v)
    vs = f"{hm / relu:.2f}×" if relu else "–"
    lines.append(f"| {a} | {fmt(x[0] for x in h)} | {fmt(x[0] for x in p)} | {hm / pm:.2f}× | {vs} | "
                 f"{h[-1][1]:.4f} / {p[-1][1]:.4f} |")
lines += ["", f"Peer: {peer}. Ratios from the medians over the rounds. The spread between rounds is the noise "
          "of a shared 2-vCPU machine; read differences under about 10 % as noise."]
report = "\n".join(lines) + "\n"
print(report)
os.makedirs("bench/results", exist_ok=True)
open(f"bench/results/activations-{date}.md", "w").write(report)
json.dump({"date": date, "cpu": cpu, "commit": commit, "epochs": int(epochs), "rows": raw},
          open(f"bench/results/activations-{date}.json", "w"), indent=1)
PY
