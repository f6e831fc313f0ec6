#!/usr/bin/env bash
# hvtrain under MPICH beside Open MPI, same job, same machine, one run of this script:
# builds target-mpich/ with MPICH's compiler wrapper, then for each library trains the
# Fashion-MNIST job on 2 ranks REPEATS times (interleaved) and SIGKILLs rank 1 at step 50 of one
# more run (HVTRAIN_INJECT_FAULT=1:50:kill) to see how the launcher ends the job.
# Prints a markdown report and saves it as bench/results/mpich-DATE.md.
#   bash bench/mpich.sh          # EPOCHS=4 REPEATS=2
set -euo pipefail
source "$(dirname "$0")/lib.sh"
EPOCHS=${EPOCHS:-4}
REPEATS=${REPEATS:-2}
MBIN=target-mpich/release/hvtrain
MPICC=mpicc.mpich cargo build --release --target-dir target-mpich 2> "$work/build.log" \
  || { tail -30 "$work/build.log" >&2; exit 1; }
ldd "$MBIN" | grep libmpich > /dev/null || { echo "mpich.sh: $MBIN does not link libmpich" >&2; exit 1; }
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

# Launchers: Open MPI as bench/run.sh runs it; MPICH's hydra with its defaults (it passes the
# environment to the ranks, Open MPI needs -x).
OMPI="mpirun --bind-to none --mca mpi_yield_when_idle 1 -n 2 $BIN"
OMPI_KILL="mpirun --bind-to none --mca mpi_yield_when_idle 1 -x HVTRAIN_INJECT_FAULT -n 2 $BIN"
unset HVTRAIN_INJECT_FAULT
MPICH="mpirun.mpich -n 2 $MBIN"
JOB="train jobs/fashion-mnist.toml --set training.epochs=$EPOCHS"

for r in $(seq "$REPEATS"); do
  for lib in ompi mpich; do
    launch=$([ $lib = ompi ] && echo "$OMPI" || echo "$MPICH")
    dir="$work/$lib-$r"
    timeout 300 $launch $JOB --set output.dir="\"$dir\"" 2> "$dir.log" \
      || { tail -20 "$dir.log" >&2; exit 1; }
  done
done
# The kill: rank 1 SIGKILLs itself at global step 50; the launcher's exit code, the time from
# launch until it returned, and its last words.
for lib in ompi mpich; do
  launch=$([ $lib = ompi ] && echo "$OMPI_KILL" || echo "$MPICH")
  t0=$(date +%s%N)
  rc=0
  HVTRAIN_INJECT_FAULT=1:50:kill timeout 120 $launch $JOB --set output.dir="\"$work/kill-$lib\"" \
    > "$work/kill-$lib.out" 2> "$work/kill-$lib.log" || rc=$?
  echo "$rc $(( ($(date +%s%N) - t0) / 1000000 ))" > "$work/kill-$lib.rc"
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$work" "$EPOCHS" "$REPEATS" "$(git rev-parse --short HEAD)" \
  "$(lscpu | sed -n 's/^Model name: *//p'), $(nproc) vCPUs" "$(mpirun --version | head -1 | grep -o "[0-9.]*$")" \
  "$(mpirun.mpich --version | sed -n 's/^ *Version: *//p' | head -1)" "$load_before" "$load_after" \
  "$(ldd "$MBIN" | grep -o 'libmpich[^ ]*' | head -1)" <<'PY'
import json, re, statistics as st, sys, datetime
work, E, R, commit, machine, ompi_v, mpich_v, lb, la, libname = sys.argv[1:]
R = int(R)
libs = {"ompi": f"Open MPI {ompi_v}", "mpich": f"MPICH {mpich_v}"}
def metrics(lib):
    return [[json.loads(l) for l in open(f"{work}/{lib}-{r}/metrics.jsonl")] for r in range(1, R + 1)]
def log(lib, r): return open(f"{work}/{lib}-{r}.log").read()
L = [f"# hvtrain against MPICH, {datetime.date.today()}", "",
     f"- command: `bash bench/mpich.sh` (EPOCHS={E}, REPEATS={R}), hvtrain commit {commit}: builds "
     "`MPICC=mpicc.mpich cargo build --release --target-dir target-mpich`, then runs "
     "`mpirun.mpich -n 2 target-mpich/release/hvtrain train jobs/fashion-mnist.toml` and "
     "`mpirun --bind-to none --mca mpi_yield_when_idle 1 -n 2 target/release/hvtrain train jobs/fashion-mnist.toml` "
     f"{R} times each, interleaved, then one run of each with `HVTRAIN_INJECT_FAULT=1:50:kill`",
     f"- machine: {machine}; {libs['ompi']} is the default `mpicc`/`mpirun`, Debian's `mpich` package beside it; "
     f"the MPICH binary links `{libname}` (ldd)",
     f"- load average (1/5/15 min) before: {lb}; after: {la}. The 2 vCPUs were shared with other work, so "
     "samples/s and start-up times are noisy: see the min..max; losses and accuracies are exact", "",
     "| | " + " | ".join(libs.values()) + " |", "|---|---|---|"]
M = {lib: metrics(lib) for lib in libs}
for ep in range(min(2, int(E))):
    cells = []
    for lib in libs:
        vals = {(round(m[ep]["train_loss"], 4), round(m[ep].get("test_accuracy") or 0, 4)) for m in M[lib]}
        cells.append(" or ".join(f"{a:.4f} / {b:.4f}" for a, b in sorted(vals)))
    L.append(f"| epoch {ep+1} train_loss / test_accuracy (all {R} runs) | " + " | ".join(cells) + " |")
cells = []
for lib in libs:
    sps = [e["samples_per_sec"] for m in M[lib] for e in m[1:]]
    cells.append(f"{st.median(sps):,.0f} ({min(sps):,.0f}..{max(sps):,.0f})")
L.append(f"| samples/s, 2 ranks: median (min..max) over epochs 2..{E} of {R} runs | " + " | ".join(cells) + " |")
cells = []
for lib in libs:
    fs = [float(re.search(r"first step done ([0-9.]+) s after process start", log(lib, r)).group(1)) for r in range(1, R + 1)]
    cells.append(", ".join(f"{x:.2f} s" for x in fs))
L.append("| first step after process start (each run) | " + " | ".join(cells) + " |")
cells = []
for lib in libs:
    t = re.search(r"MPI thread level (\w+)", log(lib, 1))
    cells.append(t.group(1) if t else "?")
L.append("| MPI thread level granted | " + " | ".join(cells) + " |")
cells = []
for lib in libs:
    rc, ms = open(f"{work}/kill-{lib}.rc").read().split()
    text = open(f"{work}/kill-{lib}.log").read() + open(f"{work}/kill-{lib}.out").read()
    hint = re.search(r"(Killed \(signal 9\)|exited on signal 9 \(Killed\)|signal 9)", text)
    ended = "job ended" if rc != "124" else "still running after 120 s (timeout)"
    said = f' ("{hint.group(1)}")' if hint else ""
    cells.append(f"launcher exits {rc} after {int(ms)/1000:.1f} s from launch{said}; {ended}")
L.append("| rank 1 SIGKILLed at step 50 | " + " | ".join(cells) + " |")
same = all(round(M["ompi"][0][ep]["train_loss"], 6) == round(M["mpich"][0][ep]["train_loss"], 6) for ep in range(int(E)))
L += ["", ("The same seed gives the same losses and accuracies under both libraries, every epoch."
           if same else "The losses differ between the libraries (see the rows above).")]
text = "\n".join(L) + "\n"
print(text)
out = f"bench/results/mpich-{datetime.date.today()}.md"
open(out, "w").write(text)
print(f"saved {out}")
PY
