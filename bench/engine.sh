#!/usr/bin/env bash
# The communication engine, measured (2 ranks unless RANKS is set):
#  1. all-reduce bandwidth: raw MPI_Allreduce vs the engine's fused path, 4 KiB..256 MiB,
#     REPEATS runs; the hand-off to the communication thread (thread_us - fused_us) per size;
#  2. a model of many small layers (784-[64 x 32]-10): fusion on (one bucket) vs off (one
#     all-reduce per tensor), with overlap on and off: samples/s, steps/s, exposed comm;
#  3. the Fashion-MNIST job: overlap on/off with 1 bucket (64 MiB), 5 buckets (1 MiB) and one
#     bucket per tensor (fusion off); a small first bucket; fp16/bf16 compression.
# Every training configuration runs REPEATS times (interleaved); figures are medians over all
# epochs after the first of every repeat, with min..max beside them.
# Prints a markdown report and saves it as bench/results/engine-DATE.md.
#   bash bench/engine.sh          # RANKS=2 EPOCHS=4 REPEATS=2
set -euo pipefail
source "$(dirname "$0")/lib.sh"
RANKS=${RANKS:-2}
EPOCHS=${EPOCHS:-3}
REPEATS=${REPEATS:-2}
AR_REPEATS=${AR_REPEATS:-3}
AR_MAX=${AR_MAX:-268435456}
# Same launcher flags as bench/run.sh and bench/scaling.sh, so their figures compare.
MPIRUN="mpirun --bind-to none --mca mpi_yield_when_idle 1 -n $RANKS"
out=bench/results/engine-$(date +%F).md
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# --- 1. all-reduce, REPEATS runs.
for r in $(seq "$AR_REPEATS"); do
  $MPIRUN $BIN bench allreduce --max-bytes "$AR_MAX" 2>/dev/null > "$work/ar$r.txt"
done

# --- 2 and 3. Training configurations: id|label|--set args.
SMALL="model.layers=[784,$(printf '64,%.0s' $(seq 32))10]"
SMALLOPT="--set optimizer.kind=adam --set optimizer.lr=0.001 --set optimizer.momentum=0"
cfgs=(
  "s64on|on, 64 MiB|--set $SMALL $SMALLOPT --set distribution.fusion_threshold_mb=64 --set distribution.overlap=true"
  "s64off|on, 64 MiB|--set $SMALL $SMALLOPT --set distribution.fusion_threshold_mb=64 --set distribution.overlap=false"
  "s0on|off|--set $SMALL $SMALLOPT --set distribution.fusion_threshold_mb=0 --set distribution.overlap=true"
  "s0off|off|--set $SMALL $SMALLOPT --set distribution.fusion_threshold_mb=0 --set distribution.overlap=false"
  "f64on|64 MiB threshold, overlap on (default)|--set distribution.fusion_threshold_mb=64 --set distribution.overlap=true"
  "f64off|64 MiB threshold, overlap off|--set distribution.fusion_threshold_mb=64 --set distribution.overlap=false"
  "f1on|1 MiB threshold, overlap on|--set distribution.fusion_threshold_mb=1 --set distribution.overlap=true"
  "f1off|1 MiB threshold, overlap off|--set distribution.fusion_threshold_mb=1 --set distribution.overlap=false"
  "f0on|fusion off, overlap on|--set distribution.fusion_threshold_mb=0 --set distribution.overlap=true"
  "f0off|fusion off, overlap off|--set distribution.fusion_threshold_mb=0 --set distribution.overlap=false"
  "ffirst|64 MiB threshold, 1 MiB first bucket, overlap on|--set distribution.first_bucket_mb=1"
  "ffp16|64 MiB threshold, overlap on, fp16 compression|--set distribution.compression=fp16"
  "fbf16|64 MiB threshold, overlap on, bf16 compression|--set distribution.compression=bf16"
)
for r in $(seq "$REPEATS"); do
  for c in "${cfgs[@]}"; do
    IFS='|' read -r id label args <<< "$c"
    dir="$work/run-$id-$r"
    # shellcheck disable=SC2086
    $MPIRUN $BIN train jobs/fashion-mnist.toml --set training.epochs=$EPOCHS --set output.dir="\"$dir\"" $args \
      2> "$dir.log" || { cat "$dir.log" >&2; exit 1; }
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

printf '%s\n' "${cfgs[@]}" > "$work/cfgs.txt"
python3 - "$work" "$REPEATS" "$AR_REPEATS" "$RANKS" "$EPOCHS" "$(git rev-parse --short HEAD)" \
  "$(lscpu | sed -n 's/^Model name: *//p'), $(nproc) vCPUs; $(mpirun --version | head -1)" \
  "$load_before" "$load_after" "$out" <<'PY'
import json, re, statistics as st, sys, datetime
work, R, AR, ranks, epochs, commit, machine, lb, la, out = sys.argv[1:]
R, AR = int(R), int(AR)
cfgs = [l.rstrip("\n").split("|", 2) for l in open(f"{work}/cfgs.txt")]
L = [f"# Communication engine benchmark, {datetime.date.today()}", "",
     f"- command: `bash bench/engine.sh` (RANKS={ranks}, EPOCHS={epochs}, REPEATS={R}, AR_REPEATS={AR}), hvtrain commit {commit}",
     f"- machine: {machine}; launcher `mpirun --bind-to none --mca mpi_yield_when_idle 1 -n {ranks}`",
     f"- load average (1/5/15 min) before: {lb}; after: {la}. The 2 vCPUs were shared with other work "
     "while this ran, so single figures are noisy: read the min..max columns, and compare only rows of this run.",
     "- all figures from one run of this script; training figures are medians over every epoch after the first "
     f"of {R} interleaved repeats (min..max over those epochs)", ""]

# --- 1. all-reduce
runs = []
for r in range(1, AR + 1):
    rows = {}
    for line in open(f"{work}/ar{r}.txt"):
        f = line.split()
        if f and f[0].isdigit():
            rows[int(f[0])] = dict(raw=float(f[1]), fused=float(f[3]), thread=float(f[6]), ratio=float(f[5]),
                                   tensors=int(f[9]), buckets=int(f[10]))
    runs.append(rows)
sizes = sorted(runs[0])
def rng(xs, fmt="{:.1f}"):
    return f"{fmt.format(min(xs))} ({fmt.format(max(xs))})"
L += [f"## 1. All-reduce ({ranks} ranks, `hvtrain bench allreduce`, {AR} runs)", "",
      f"Time per all-reduce in µs: the best of the {AR} runs (the worst in brackets; each run's figure is already a "
      "mean over many calls, and other work on the vCPUs only ever adds time, so the best run is the estimate and the "
      "worst shows the noise). raw = MPI_Allreduce; fused = the engine's path with overlap off (reduced on the "
      "calling thread); threaded = overlap on (handed to the communication thread and back). "
      "hand-off = best threaded − best fused. raw/fused above 1: the engine was faster than raw MPI.", "",
      "| bytes | tensors | buckets | raw (µs) | fused (µs) | threaded (µs) | hand-off (µs) | raw/fused |",
      "|---|---|---|---|---|---|---|---|"]
ratios, hand = {}, {}
for n in sizes:
    g = lambda k: [run[n][k] for run in runs if n in run]
    hand[n] = min(g("thread")) - min(g("fused"))
    ratios[n] = min(g("raw")) / min(g("fused"))
    L.append(f"| {n:,} | {runs[0][n]['tensors']} | {runs[0][n]['buckets']} | {rng(g('raw'))} | {rng(g('fused'))} | "
             f"{rng(g('thread'))} | {hand[n]:.1f} | {ratios[n]:.2f} |")
small = [n for n in sizes if n <= 262144]
hs = [hand[n] for n in small]
# Run-to-run spread of the fused time at the same sizes: a hand-off smaller than it is noise.
spreads = {n: max(run[n]["fused"] for run in runs) - min(run[n]["fused"] for run in runs) for n in small}
spread = max(spreads.values())
L += ["", f"- fused path vs raw MPI_Allreduce (best runs), all sizes: {min(ratios.values())*100:.0f}–"
      f"{max(ratios.values())*100:.0f} % of raw speed (median {st.median(ratios.values())*100:.0f} %)"]
if all(hand[n] > spreads[n] for n in small):
    L.append(f"- hand-off to the communication thread (best threaded − best fused), 4 KiB..256 KiB: "
             f"{min(hs):.1f} to {max(hs):.1f} µs (median {st.median(hs):.1f} µs), each above the run-to-run spread "
             f"of the fused time at its size (at most {spread:.1f} µs)")
else:
    L.append(f"- hand-off to the communication thread: not resolved in this run. Best threaded − best fused, "
             f"4 KiB..256 KiB, is {min(hs):.1f} to {max(hs):.1f} µs, while the fused time alone moved by up to "
             f"{spread:.1f} µs between runs at those sizes")
L.append("")
L += ["<details><summary>raw output of each run</summary>", ""]
for r in range(1, AR + 1):
    L += ["```", open(f"{work}/ar{r}.txt").read().rstrip(), "```"]
L += ["</details>", ""]

# --- training
def verdict(what, a_label, a, b_label, b, fmt):
    """Say which of two sets of per-epoch figures is lower, or that their ranges overlap."""
    ma, mb = fmt.format(st.median(a)), fmt.format(st.median(b))
    if max(a) < min(b):
        return f"- {what}: lower with {a_label} in every epoch (median {ma} vs {mb} with {b_label})"
    if max(b) < min(a):
        return f"- {what}: lower with {b_label} in every epoch (median {mb} vs {ma} with {a_label})"
    return (f"- {what}: not resolved in this run; the min..max ranges overlap "
            f"(median {ma} with {a_label}, {mb} with {b_label})")

def raw(cid):
    sps, steps, exp = [], [], []
    for r in range(1, R + 1):
        for e in [json.loads(l) for l in open(f"{work}/run-{cid}-{r}/metrics.jsonl")][1:]:
            sps.append(e["samples_per_sec"]); steps.append(e["steps"] / e["epoch_seconds"])
            exp.append(e["exposed_comm_ms_per_step"])
    return {"sps": sps, "steps": steps, "exp": exp, "step_ms": [1e3 / x for x in steps]}

def stats(cid):
    sps, steps, exp, acc, buckets = [], [], [], [], None
    for r in range(1, R + 1):
        m = [json.loads(l) for l in open(f"{work}/run-{cid}-{r}/metrics.jsonl")]
        acc.append(m[-1].get("test_accuracy") or 0)
        for e in m[1:]:
            sps.append(e["samples_per_sec"]); steps.append(e["steps"] / e["epoch_seconds"])
            exp.append(e["exposed_comm_ms_per_step"])
        b = re.search(r"(\d+) fusion bucket\(s\)", open(f"{work}/run-{cid}-{r}.log").read())
        buckets = int(b.group(1)) if b else "?"
    return (f"{st.median(sps):,.0f} ({min(sps):,.0f}..{max(sps):,.0f}) | {st.median(steps):,.0f} | "
            f"{st.median(exp):.3f} ({min(exp):.3f}..{max(exp):.3f}) | {acc[-1]:.4f}"), buckets
L += [f"## 2. Many small layers: 784-[64 x 32]-10 ({ranks} ranks, batch 128 per rank, Adam)", "",
      "| fusion | buckets | overlap | samples/s (min..max) | steps/s | exposed comm ms/step (min..max) | test acc |",
      "|---|---|---|---|---|---|---|"]
for cid, label, _ in cfgs:
    if cid.startswith("s"):
        s, b = stats(cid)
        L.append(f"| {label} | {b} | {'on' if cid.endswith('on') else 'off'} | {s} |")
L += ["", verdict("step time, fusion on (1 bucket) vs off (66), overlap on", "fusion", raw("s64on")["step_ms"],
                  "no fusion", raw("s0on")["step_ms"], "{:.2f} ms"),
      verdict("step time, fusion on (1 bucket) vs off (66), overlap off", "fusion", raw("s64off")["step_ms"],
              "no fusion", raw("s0off")["step_ms"], "{:.2f} ms")]
L += ["", f"## 3. Fashion-MNIST job, 784-512-512-10 ({ranks} ranks, batch 128 per rank)", "",
      "Exposed comm = time the main thread waits for reduced buckets (overlap on) or spends in the "
      "all-reduce itself (overlap off), per step; it includes waiting for the slower rank.", "",
      "| engine setting | buckets | samples/s (min..max) | steps/s | exposed comm ms/step (min..max) | test acc |",
      "|---|---|---|---|---|---|"]
for cid, label, _ in cfgs:
    if cid.startswith("f"):
        s, b = stats(cid)
        L.append(f"| {label} | {b} | {s} |")
L.append("")
for cid, n in (("f64", "1 bucket"), ("f1", "5 buckets"), ("f0", "6 buckets, fusion off")):
    on, off = raw(cid + "on"), raw(cid + "off")
    L.append(verdict(f"exposed comm, {n}", "overlap on", on["exp"], "overlap off", off["exp"], "{:.3f} ms/step"))
    L.append(verdict(f"step time, {n}", "overlap on", on["step_ms"], "overlap off", off["step_ms"], "{:.2f} ms"))
text = "\n".join(L) + "\n"
print(text)
open(out, "w").write(text)
print(f"saved {out}")
PY
