#!/usr/bin/env bash
# hvtrain against PyTorch on this CPU node, side by side in one run (issue #19): the
# Fashion-MNIST job (784-512-512-10, SGD lr 0.05 momentum 0.9, global batch 256) and its wide
# variant (784-2048-2048-10), in float32 and in bf16 mixed precision, hvtrain in both layouts
# of a 2-core node (2 ranks × 1 thread, 1 rank × 2 threads), for ROUNDS rounds with the
# systems interleaved in each round; and the GEMM rate of hvtrain's CPU backend on the
# step's shapes (fp32 and bf16: one thread at batch 128, two processes at once, and one
# process of two threads at batch 256). fp32 runs hvtrain's AVX-512 kernel where the CPU has
# AVX-512; "fp32-mm" is the same with matrixmultiply's (HVTRAIN_CPU_GEMM=matrixmultiply, the
# product before it), in the GEMM table and in the 1 rank × 2 threads layout.
#   bash bench/cpu.sh                 # ROUNDS=2 EPOCHS=8 WIDE_EPOCHS=3
#   KEEP_WORK=1 bash bench/cpu.sh     # keeps the raw files (their folder is printed), so that
#   REPORT=DIR ROUNDS=N bash bench/cpu.sh   # writes the report again from them, measuring nothing
# The PyTorch peer is set up by bench/setup_torch.sh (run here when missing). Prints a
# markdown report and saves it as bench/results/cpu-DATE.md (raw numbers: cpu-DATE.json).
set -euo pipefail
source "$(dirname "$0")/lib.sh"
ROUNDS=${ROUNDS:-2}
EPOCHS=${EPOCHS:-8}
WIDE_EPOCHS=${WIDE_EPOCHS:-3}
PY=bench/.venv-torch/bin/python
[ -x "$PY" ] || bash bench/setup_torch.sh
MPIRUN="mpirun --bind-to none --mca mpi_yield_when_idle 1"
LOAD=$(cut -d' ' -f1-3 /proc/loadavg)
BF16=1
$BIN bench gemm --seconds 0.1 --precision bf16 > /dev/null 2>&1 || BF16=0
if [ -n "${REPORT:-}" ]; then
  rm -rf "$work"; trap - EXIT
  work=$REPORT LOAD=$(cat "$REPORT/load.txt") COMMIT=$(cat "$REPORT/commit.txt")
  BF16=$([ -f "$work/g-std-bf16-1.json" ] && echo 1 || echo 0)
else
  COMMIT=$(git rev-parse --short HEAD)
  echo "$LOAD" > "$work/load.txt"
  echo "$COMMIT" > "$work/commit.txt"
fi
WIDE="784,2048,2048,10"
if [ -z "${REPORT:-}" ]; then
# The float32 FMA peak of this CPU (bench/fma_peak.c): the ceiling the GEMM rates are read against.
cc -O2 -mavx512f -mfma -pthread bench/fma_peak.c -o "$work/fma_peak" 2>/dev/null && "$work/fma_peak" 2 > "$work/peak.jsonl" || : > "$work/peak.jsonl"

gemm() { # name layers precision (fp32-mm: fp32 with matrixmultiply's product)
  local p=${3%-mm} k=$([ "$3" = fp32-mm ] && echo matrixmultiply || echo auto)
  export HVTRAIN_CPU_GEMM=$k
  $BIN bench gemm --layers "$2" --batch 128 --seconds 3 --precision "$p" > "$work/g-$1-1.json"
  $BIN bench gemm --layers "$2" --batch 128 --seconds 3 --precision "$p" > "$work/g-$1-2a.json" &
  $BIN bench gemm --layers "$2" --batch 128 --seconds 3 --precision "$p" > "$work/g-$1-2b.json"
  wait
  $BIN bench gemm --layers "$2" --batch 256 --seconds 3 --precision "$p" --threads 2 > "$work/g-$1-t2.json"
}
hv() { # tag ranks threads layers epochs precision (fp32-mm: fp32 with matrixmultiply's product)
  local dir=runs/bench-cpu-$1 p=${6%-mm}
  export HVTRAIN_CPU_GEMM=$([ "$6" = fp32-mm ] && echo matrixmultiply || echo auto)
  $MPIRUN -x HVTRAIN_CPU_GEMM -n "$2" $BIN train jobs/fashion-mnist.toml --set training.epochs="$5" --set "model.layers=[$4]" \
    --set training.batch_size=$((256 / $2)) --set training.threads="$3" --set training.precision=\""$p"\" \
    --set training.device=\"cpu\" --set checkpoint.every_minutes=0 --set output.dir="\"$dir\"" 2> "$work/$1.log"
  cp "$dir/metrics.jsonl" "$work/$1.jsonl"
}
pt() { # tag layers epochs precision
  "$PY" bench/torch_cpu_peer.py --layers "$2" --epochs "$3" --threads 2 --precision "$4" > "$work/$1.peer" 2>&1
}

for p in fp32 fp32-mm $([ $BF16 = 1 ] && echo bf16); do
  gemm std-$p 784,512,512,10 $p
  gemm wide-$p $WIDE $p
done
for r in $(seq 1 "$ROUNDS"); do
  for p in fp32 $([ $BF16 = 1 ] && echo bf16); do
    hv "r$r-std-2-$p" 2 1 784,512,512,10 "$EPOCHS" $p
    hv "r$r-std-t2-$p" 1 2 784,512,512,10 "$EPOCHS" $p
    [ $p = fp32 ] && hv "r$r-std-t2-fp32-mm" 1 2 784,512,512,10 "$EPOCHS" fp32-mm
    pt "r$r-std-pt-$p" 784,512,512,10 "$EPOCHS" $p
    hv "r$r-wide-2-$p" 2 1 $WIDE "$WIDE_EPOCHS" $p
    hv "r$r-wide-t2-$p" 1 2 $WIDE "$WIDE_EPOCHS" $p
    [ $p = fp32 ] && hv "r$r-wide-t2-fp32-mm" 1 2 $WIDE "$WIDE_EPOCHS" fp32-mm
    pt "r$r-wide-pt-$p" $WIDE "$WIDE_EPOCHS" $p
  done
  hv "r$r-std-1-fp32" 1 1 784,512,512,10 "$EPOCHS" fp32
done
fi

python3 - "$work" "$ROUNDS" "$EPOCHS" "$WIDE_EPOCHS" "$LOAD" "$BF16" "$PY" "$COMMIT" <<'PY'
import datetime, glob, json, os, platform, re, statistics, subprocess, sys
work, rounds, epochs, wide_epochs, load, bf16, py, commit = sys.argv[1:]
rounds = int(rounds)
precs = ["fp32", "bf16"] if bf16 == "1" else ["fp32"]
def j(p): return json.load(open(os.path.join(work, p)))
flop = {m: j(f"g-{m}-fp32-1.json")["flop_per_sample"] for m in ("std", "wide")}
gem = {}
for m in ("std", "wide"):
    for p in precs[:1] + ["fp32-mm"] + precs[1:]:
        one = j(f"g-{m}-{p}-1.json")["gflops"]
        two = j(f"g-{m}-{p}-2a.json")["gflops"] + j(f"g-{m}-{p}-2b.json")["gflops"]
        gem[m, p] = (one, two, j(f"g-{m}-{p}-t2.json")["gflops"])

def hv(tag):
    m = [json.loads(l) for l in open(os.path.join(work, f"{tag}.jsonl"))]
    sps = [e["samples_per_sec"] for e in m[1:]]
    log = open(os.path.join(work, f"{tag}.log")).read()
    first = float(re.search(r"first step done ([0-9.]+) s after process start", log).group(1))
    rss = max(float(x) for x in re.findall(r"peak RSS ([0-9.]+) MiB", log))
    return dict(med=statistics.median(sps), lo=min(sps), hi=max(sps), first=first, rss=rss, acc=m[-1].get("test_accuracy"))

def pt(tag):
    for line in open(os.path.join(work, f"{tag}.peer")):
        if line.startswith("PEER_RESULT "):
            p = json.loads(line[len("PEER_RESULT "):])
            r = p["epoch_rates"][1:]
            return dict(med=p["samples_per_sec"], lo=min(r), hi=max(r), first=p["time_to_first_step_s"],
                        rss=p["peak_rss_mb"], acc=p["test_accuracy"], ver=p["peer"])
    raise SystemExit(f"{tag}: the peer printed no result:\n" + open(os.path.join(work, f"{tag}.peer")).read())

rows, raw = [], {}
for m, name in (("std", "784-512-512-10"), ("wide", "784-2048-2048-10")):
    systems = []
    for p in precs:
        systems.append(("hvtrain, 2 ranks × 1 thread, batch 128/rank", p, f"{m}-2-{p}", hv))
        systems.append(("hvtrain, 1 rank × 2 threads (training.threads = 2), batch 256", p, f"{m}-t2-{p}", hv))
        if p == "fp32":
            systems.append(("hvtrain, 1 rank × 2 threads, matrixmultiply's GEMM (before)", "fp32", f"{m}-t2-fp32-mm", hv))
        systems.append(("PyTorch, 1 process × 2 threads" + (", autocast bf16" if p == "bf16" else ""), p, f"{m}-pt-{p}", pt))
    if m == "std":
        systems.append(("hvtrain, 1 rank × 1 thread, batch 256 (one core idle)", "fp32", "std-1-fp32", hv))
    for label, p, tag, f in systems:
        runs = [f(f"r{r}-{tag}") for r in range(1, rounds + 1)]
        raw[tag] = runs
        meds = [x["med"] for x in runs]
        rows.append(dict(model=name, m=m, label=label, p=p, tag=tag, meds=meds, med=statistics.median(meds),
                         lo=min(x["lo"] for x in runs), hi=max(x["hi"] for x in runs),
                         first=[x["first"] for x in runs], rss=max(x["rss"] for x in runs),
                         acc=[x["acc"] for x in runs], ver=runs[0].get("ver")))

def find(m, tag):
    return next(r for r in rows if r["m"] == m and r["tag"] == tag)
cpu = subprocess.run("lscpu | sed -n 's/^Model name: *//p'", shell=True, capture_output=True, text=True).stdout.strip()
flags = open("/proc/cpuinfo").read()
tv = next((r["ver"] for r in rows if r["ver"]), "?")
today = datetime.date.today()
out = [f"# hvtrain vs PyTorch on the CPU, fp32 and bf16, {today}", "",
       f"- command: `bash bench/cpu.sh` (ROUNDS={rounds}, EPOCHS={epochs}, WIDE_EPOCHS={wide_epochs}), hvtrain commit {commit}",
       f"- machine: {cpu}, {os.cpu_count()} vCPUs, " + ", ".join(f"{n} {'yes' if f in flags.split() else 'no'}" for n, f in
       (("AVX-512F", "avx512f"), ("AVX512-BF16", "avx512_bf16"), ("AMX-BF16", "amx_bf16"))) + f", {platform.platform()}",
       f"- peer: {tv} (PyPI wheel, `bench/setup_torch.sh`), `bench/torch_cpu_peer.py`: eager, `torch.set_num_threads(2)`, "
       "bf16 as `torch.autocast(\"cpu\", dtype=torch.bfloat16)`",
       "- job: jobs/fashion-mnist.toml (ReLU, softmax cross-entropy, SGD lr 0.05 momentum 0.9, global batch 256) with "
       f"{epochs} epochs; wide: layers 784-2048-2048-10, {wide_epochs} epochs",
       f"- samples/s: each run's median over its epochs after the first; the cell is the median of the {rounds} rounds' "
       "medians, min..max over every steady epoch of every round (the noise); first step from process start, per round",
       f"- load average (1/5/15 min) before the run: {load}; the 2 vCPUs may be shared: compare rows of one run only", ""]
peak, peak16 = {}, {}
for line in open(os.path.join(work, "peak.jsonl")):
    d = json.loads(line)
    into = peak16 if d.get("kind") == "bf16" else peak
    into[d["threads"]] = max(into.get(d["threads"], 0), d["gflops"])
if peak:
    out += [f"- float32 FMA peak (`bench/fma_peak.c`, registers only, best of 256- and 512-bit): "
            f"{peak[1]:.1f} GFLOP/s on one core, {peak.get(2, 0):.1f} on two"
            + (f"; bf16 `vdpbf16ps` peak (float32 lanes' flops): {peak16[1]:.1f} on one core, "
               f"{peak16.get(2, 0):.1f} on two" if peak16 else ""), ""]
pct = lambda g, t: f" ({100 * g / peak[t]:.0f} %)" if t in peak else ""
pct16 = lambda g, t: f" ({100 * g / peak16[t]:.0f} % of bf16's)" if t in peak16 else ""
out += ["## GEMM rate of hvtrain's CPU backend on the step's shapes, GFLOP/s (% of the FMA peak)", "",
        f"fp32: {j('g-std-fp32-1.json').get('crate', '?')}; fp32-mm: matrixmultiply's (`HVTRAIN_CPU_GEMM=matrixmultiply`: "
        "the same as fp32 on a CPU without AVX-512F)"
        + (f"; bf16: {j('g-std-bf16-1.json').get('crate', '?')}" if "bf16" in precs else "") + ".", "",
        "| model | precision | one thread, batch 128 | two processes at once, batch 128 (sum) | one process × 2 threads, batch 256 |",
        "|---|---|---|---|---|"]
for (m, p), (one, two, t2) in gem.items():
    q = pct if p.startswith("fp32") else pct16
    out.append(f"| {m} | {p} | {one:.1f}{q(one, 1)} | {two:.1f}{q(two, 2)} | {t2:.1f}{q(t2, 2)} |")
out += ["", "## Training", "",
        "| model | system | precision | samples/s | × PyTorch (same precision; per round) | min..max | rounds | first step (s) | peak RSS/process (MiB) | test acc | GEMM FLOP rate |",
        "|---|---|---|---|---|---|---|---|---|---|---|"]
for r in rows:
    peer = find(r["m"], f"{r['m']}-pt-{r['p']}")
    # The median's ratio, then each round's against the peer's run of the same round (the
    # runs nearest in time: the VM's speed drifts between rounds).
    ratio = f"{r['med'] / peer['med']:.2f}× (" + " / ".join(f"{a / b:.2f}" for a, b in zip(r["meds"], peer["meds"])) + ")"
    fr = ""
    if r["label"].startswith("hvtrain"):
        one, two, t2 = gem[r["m"], r["p"]]
        one, two, t2 = gem[r["m"], "fp32-mm"] if "matrixmultiply" in r["label"] else (one, two, t2)
        ceil = t2 if "2 threads" in r["label"] else one if "1 rank" in r["label"] else two
        g = r["med"] * flop[r["m"]] / 1e9
        fr = f"{g:.0f} GFLOP/s = {100 * g / ceil:.0f}% of the {r['p']} GEMM rate {ceil:.0f}"
    acc = " / ".join(f"{a:.4f}" for a in r["acc"] if a is not None)
    out.append(f"| {r['model']} | {r['label']} | {r['p']} | {r['med']:,.0f} | {ratio} | {r['lo']:,.0f}..{r['hi']:,.0f} | "
               + " / ".join(f"{x:,.0f}" for x in r["meds"]) + f" | " + " / ".join(f"{x:.2f}" for x in r["first"])
               + f" | {r['rss']:.0f} | {acc} | {fr} |")
if "bf16" in precs:
    out += ["", "bf16 over fp32, same system: " + "; ".join(
        f"{m} {s}: {find(m, f'{m}-{s}-bf16')['med'] / find(m, f'{m}-{s}-fp32')['med']:.2f}×"
        for m in ("std", "wide") for s in ("2", "t2", "pt"))]
text = "\n".join(out) + "\n"
print(text)
# A second run on the same day gets its own name (-run2, -run3, ...), never overwriting one.
stem, n = f"bench/results/cpu-{today}", 1
while os.path.exists(stem + ".md"):
    n += 1
    stem = f"bench/results/cpu-{today}-run{n}"
path = stem + ".md"
open(path, "w").write(text)
json.dump(dict(gemm={f"{m}-{p}": dict(zip(("one_thread_b128", "two_processes_b128", "two_threads_b256"), v)) for (m, p), v in gem.items()}, runs=raw), open(stem + ".json", "w"), indent=1)
print(f"saved {path}")
PY
