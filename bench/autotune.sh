#!/usr/bin/env bash
# Autotune (#30 item 6) across two emulated nodes (bench/netns.sh: network namespaces, the link
# rate shaped by tc tbf), 2 x 2 ranks, Fashion-MNIST's job (784-512-512-10):
#  - a run with distribution.autotune = true: its log lists every candidate fusion setting's
#    median step time on this network (the grid sweep, in the same run) and the one it kept;
#  - a run with the job's fixed setting (64 MiB buckets, no first bucket) and one with the
#    grid's best setting fixed, each for the same epochs: the last epoch's samples/s of the
#    three side by side (the tuning is over by then).
#
#   [AUTOTUNE_STEPS=10] bash bench/autotune.sh [OUT.md]       (root: namespaces; tc)
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
OUT=${1:-bench/results/autotune-$(date +%F).md}
source bench/netns.sh
K=2
STEPS=${AUTOTUNE_STEPS:-10}
# 118 steps per epoch: the tuning (3 + 8 x STEPS steps) ends inside the first epochs; the last
# epoch, measured, comes after it.
EPOCHS=$(( (3 + 8 * STEPS) / 118 + 2 ))
JOBSET=(--set training.epochs=$EPOCHS --set training.batch_size=128 --set distribution.autotune_steps=$STEPS)
last_epoch() { python3 -c "import json,sys; print(round([json.loads(l) for l in open(sys.argv[1])][-1]['samples_per_sec']))" "$1/metrics.jsonl"; }
{
    echo "# Autotune across 2 emulated nodes, 2 x $K ranks ($(date +%F))"
    echo
    echo "Machine: $(hostname), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs; Open MPI $(mpirun --version | head -1 | awk '{print $NF}')."
    echo "Command: \`AUTOTUNE_STEPS=$STEPS bash bench/autotune.sh\` ($STEPS steps timed per candidate); jobs/fashion-mnist.toml (784-512-512-10, 2.7 MB of gradients per step), batch 128 per rank."
    echo "Nodes: network namespaces (tests/multihost/setup.sh), link rate by tc tbf, no added delay (no netem in this kernel)."
    echo "$EPOCHS epochs; the last epoch's samples/s of one run each (4 ranks on 2 cores: noisy, see the note below)."
    echo
    echo "| link | job's setting (64 MiB) | autotuned (its choice) | grid's best, fixed | autotune's candidates: median ms/step of the slowest rank |"
    echo "|---|---:|---:|---:|---|"
} >"$OUT"
for link in "${LINKS[@]}"; do
    name=${link%%|*}
    shape "${link#*|}"
    echo "== $name" >&2
    d=$work/$name
    mkdir -p "$d"
    on_nodes $K train jobs/fashion-mnist.toml "${JOBSET[@]}" --set "output.dir=\"$d/fixed\"" >/dev/null 2>&1
    on_nodes $K train jobs/fashion-mnist.toml "${JOBSET[@]}" --set "output.dir=\"$d/tuned\"" \
        --set distribution.autotune=true 2>"$d/tuned.log" >/dev/null
    read -r thr first < <(python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['chosen']; print(c['fusion_threshold_mb'], c['first_bucket_mb'])" "$d/tuned/autotune.json")
    read -r bthr bfirst < <(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); b=min(r['candidates'], key=lambda c: c[1])[0]; print(b['fusion_threshold_mb'], b['first_bucket_mb'])" "$d/tuned/autotune.json")
    on_nodes $K train jobs/fashion-mnist.toml "${JOBSET[@]}" --set "output.dir=\"$d/best\"" \
        --set "distribution.fusion_threshold_mb=$bthr" --set "distribution.first_bucket_mb=$bfirst" >/dev/null 2>&1
    cands=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('; '.join(f\"{c[0]['fusion_threshold_mb']:g}/{c[0]['first_bucket_mb']:g} MiB {c[1]*1e3:.2f}\" for c in r['candidates']))" "$d/tuned/autotune.json")
    echo "| $name | $(last_epoch "$d/fixed") | $(last_epoch "$d/tuned") ($thr / $first MiB) | $(last_epoch "$d/best") ($bthr / $bfirst MiB) | $cands |" >>"$OUT"
done
echo >>"$OUT"
echo "Candidates are written threshold/first bucket. The grid's best and the autotuned choice are the same setting by construction (the autotune is the grid sweep); the fixed run measures it again without the tuning steps." >>"$OUT"
echo "wrote $OUT" >&2
