#!/usr/bin/env bash
# Checkpoint averaging (`hvtrain checkpoint average`) on Fashion-MNIST: the job's 784-512-512-10
# ReLU MLP, SGD lr 0.05 momentum 0.9 (constant), global batch 128 on 2 ranks, EPOCHS epochs with
# a checkpoint at the end of every epoch (checkpoint.every_steps = 469). The last weights beside
# the averages of the newest 3 and 5 checkpoints (epochs 10-12 and 8-12), and, as the peer, the
# same average computed by numpy from the checkpoint files (h5py), evaluated by hvtrain eval:
# the two agree when the command averages what it says. Test accuracy and loss on the 10,000
# test rows.
#   bash bench/average.sh [OUT.md]   (needs: make build; the test venv: make onnx-venv)
# SEEDS ("1 2"): each seed changes initialization and order; the spread is the noise.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
OUT=${1:-bench/results/average-$(date +%F).md}
PY=${PY:-target/onnx-venv/bin/python}
SEEDS=${SEEDS:-1 2}
EPOCHS=${EPOCHS:-12}
MPI="mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -n 2"
"$PY" -c 'import h5py, numpy' 2>/dev/null || { echo "average.sh: no h5py in $PY (make onnx-venv, or PY=...)" >&2; exit 1; }
rows=()
ev() { # WEIGHTS -> "accuracy loss"
  "$BIN" eval jobs/fashion-mnist.toml --weights "$1" 2>> "$work/eval.log" | grep '^{' | jq -r '"\(.test_accuracy) \(.test_loss)"'
}
for seed in $SEEDS; do
  dir="$work/run-$seed"
  echo "seed $seed: training $EPOCHS epochs" >&2
  t0=$(date +%s.%N)
  $MPI "$BIN" train jobs/fashion-mnist.toml --set training.batch_size=64 --set training.epochs="$EPOCHS" \
    --set training.seed="$seed" --set checkpoint.every_steps=469 --set checkpoint.keep=5 \
    --set output.tensorboard=false --set "output.dir=\"$dir\"" > "$dir.log" 2>&1
  t1=$(date +%s.%N)
  read -r acc loss <<< "$(ev "$dir/weights.h5")"
  rows+=("$(printf '| %s | last weights (epoch %s) | %s | %.4f | %.1f |' "$seed" "$EPOCHS" "$acc" "$loss" "$(echo "$t1 - $t0" | bc)")")
  for n in 3 5; do
    t0=$(date +%s.%N)
    "$BIN" checkpoint average "$dir" --last "$n" --output "$dir/avg$n.h5" 2>> "$dir.log"
    t1=$(date +%s.%N)
    read -r acc loss <<< "$(ev "$dir/avg$n.h5")"
    rows+=("$(printf '| %s | hvtrain checkpoint average --last %s | %s | %.4f | %.2f |' "$seed" "$n" "$acc" "$loss" "$(echo "$t1 - $t0" | bc)")")
    # The peer: numpy's mean of the same checkpoints' dense{l}/weight and bias, into a copy of
    # the average's file (so its attributes and normalization are the command's).
    "$PY" - "$dir" "$n" <<'PY'
import sys, glob, shutil, h5py, numpy as np
d, n = sys.argv[1], int(sys.argv[2])
files = sorted(glob.glob(f"{d}/ckpt-step*.h5"))[-n:]
shutil.copy(f"{d}/avg{n}.h5", f"{d}/np{n}.h5")
with h5py.File(f"{d}/np{n}.h5", "r+") as out:
    for name in [k + "/" + t for k in out if k.startswith("dense") for t in ("weight", "bias")]:
        out[name][...] = np.mean([h5py.File(f, "r")[name][...].astype(np.float64) for f in files], axis=0).astype(np.float32)
        diff = np.abs(out[name][...] - h5py.File(f"{d}/avg{n}.h5", "r")[name][...]).max()
        assert diff <= 1e-6, f"{name}: numpy's mean differs from hvtrain's by {diff}"
PY
    read -r acc loss <<< "$(ev "$dir/np$n.h5")"
    rows+=("$(printf '| %s | numpy mean of the same %s (h5py) | %s | %.4f | |' "$seed" "$n" "$acc" "$loss")")
  done
done
{
  echo "# Checkpoint averaging on Fashion-MNIST"
  echo
  echo "- command: \`bash bench/average.sh\` (SEEDS=\"$SEEDS\", EPOCHS=$EPOCHS), $(date -u +%FT%TZ)"
  echo "- machine: $(nproc) vCPU, $(lscpu | sed -n 's/^Model name: *//p'), $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "- hvtrain $(git rev-parse --short HEAD): 2 ranks (Open MPI, CPU backend), jobs/fashion-mnist.toml (784-512-512-10 ReLU, SGD lr 0.05 momentum 0.9, constant rate), global batch 128, a checkpoint every 469 steps (an epoch)"
  echo "- the peer: numpy $("$PY" -c 'import numpy; print(numpy.__version__)') averaging the same checkpoint files read with h5py (float64 mean, as fairseq's average_checkpoints.py does in float); it must agree with hvtrain's file within 1e-6 (the script stops otherwise)"
  echo "- figures: \`hvtrain eval\` on the 10,000 test rows; seconds: training (the whole mpirun) or the average command. One run per seed and row; the spread between seeds is the noise"
  echo
  echo "| seed | weights | test accuracy | test loss | seconds |"
  echo "|---:|---|---:|---:|---:|"
  printf '%s\n' "${rows[@]}"
} > "$OUT"
cat "$OUT"
