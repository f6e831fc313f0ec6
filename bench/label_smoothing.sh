#!/usr/bin/env bash
# Label smoothing (model.label_smoothing) beside Keras' CategoricalCrossentropy(label_smoothing)
# in the same run: Fashion-MNIST, the 784-256-10 ReLU MLP, SGD lr 0.05 momentum 0.9, global batch
# 128, 8 epochs, eps 0 and 0.1, on the training labels as they are and with 20 % of them
# replaced by another class drawn at random (seed 7: the same noisy file for both systems).
# Figures on the clean test set from each system's predicted probabilities, by the same code
# (bench/calibration.py): accuracy, NLL (the plain cross-entropy) and ECE (15 confidence bins).
#   bash bench/label_smoothing.sh [OUT.md]   (needs: make build, bash bench/setup_peer.sh)
# SEEDS ("1 2"): each seed changes initialization and order; the spread is the noise.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
OUT=${1:-bench/results/label-smoothing-$(date +%F).md}
PY=bench/.venv/bin/python
SEEDS=${SEEDS:-1 2}
EPS=${EPS:-0 0.1}
MPI="mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -n 2"
[ -x "$PY" ] && "$PY" -c 'import tensorflow, h5py' 2>/dev/null || { echo "label_smoothing.sh: run bash bench/setup_peer.sh first" >&2; exit 1; }
"$PY" - "$work/noisy.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File("data/fashion-mnist-train.h5", "r") as f:
    x, y = f["x"][...], f["y"][...]
rng = np.random.default_rng(7)
flip = rng.random(len(y)) < 0.2
y2 = y.copy()
y2[flip] = (y[flip] + rng.integers(1, 10, flip.sum())) % 10   # another class, uniformly
with h5py.File(sys.argv[1], "w") as g:
    g["x"], g["y"] = x, y2
print(f"noisy labels: {np.mean(y2 != y):.4f} of {len(y)} rows changed", file=sys.stderr)
PY
rows=()
hv() { # DATA(clean|noisy) EPS SEED
  local data=$1 eps=$2 seed=$3 dir="$work/hv-$1-$2-$3" train=data/fashion-mnist-train.h5 r t0 t1
  [ "$data" = noisy ] && train="$work/noisy.h5"
  t0=$(date +%s.%N)
  $MPI "$BIN" train jobs/fashion-mnist.toml --set "data.train=\"$train\"" --set 'model.layers=[784, 256, 10]' \
    --set training.batch_size=64 --set training.epochs=8 --set optimizer.lr=0.05 --set optimizer.momentum=0.9 \
    --set model.label_smoothing="$eps" --set training.seed="$seed" --set data.shuffle_window=60000 \
    --set output.tensorboard=false --set "output.dir=\"$dir\"" > "$dir.log" 2>&1
  t1=$(date +%s.%N)
  "$BIN" predict jobs/fashion-mnist.toml --set 'model.layers=[784, 256, 10]' --weights "$dir/weights.h5" \
    --input data/fashion-mnist-test.h5 --output "$dir/pred.h5" >> "$dir.log" 2>&1
  r=$("$PY" bench/calibration.py "$dir/pred.h5" data/fashion-mnist-test.h5)
  rows+=("$(printf '| hvtrain 2 ranks | %s | %s | %s | %s | %s | %s | %s | %.0f |' "$data" "$eps" "$seed" "$(jq -r .test_accuracy <<< "$r")" \
    "$(jq -r .test_nll <<< "$r")" "$(jq -r .ece <<< "$r")" "$(jq -r .mean_confidence <<< "$r")" "$(echo "$t1 - $t0" | bc)")")
}
keras() { # DATA EPS SEED
  local data=$1 eps=$2 seed=$3 train=data/fashion-mnist-train.h5 r
  [ "$data" = noisy ] && train="$work/noisy.h5"
  r=$("$PY" bench/peer_keras_label_smoothing.py "$train" data/fashion-mnist-test.h5 --hidden 256 --epochs 8 \
      --batch 128 --lr 0.05 --eps "$eps" --seed "$seed" 2> "$work/keras-$data-$eps-$seed.log" | sed -n 's/^PEER_RESULT //p')
  rows+=("$(printf '| Keras 1 process | %s | %s | %s | %s | %s | %s | %s | %.0f |' "$data" "$eps" "$seed" "$(jq -r .test_accuracy <<< "$r")" \
    "$(jq -r .test_nll <<< "$r")" "$(jq -r .ece <<< "$r")" "$(jq -r .mean_confidence <<< "$r")" "$(jq -r .train_seconds <<< "$r")")")
  peer=$(jq -r .peer <<< "$r")
}
for data in clean noisy; do
  for seed in $SEEDS; do
    for eps in $EPS; do
      echo "$data seed $seed eps $eps" >&2
      hv "$data" "$eps" "$seed"; keras "$data" "$eps" "$seed"
    done
  done
done
{
  echo "# Label smoothing on Fashion-MNIST: hvtrain beside Keras' label_smoothing"
  echo
  echo "- command: \`bash bench/label_smoothing.sh\` (SEEDS=\"$SEEDS\", EPS=\"$EPS\"), $(date -u +%FT%TZ)"
  echo "- machine: $(nproc) vCPU, $(lscpu | sed -n 's/^Model name: *//p'), $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "- hvtrain $(git rev-parse --short HEAD) (2 ranks, Open MPI, CPU backend, one shuffle window over all rows); ${peer:-Keras: not run} (one process, default threading, \`CategoricalCrossentropy(from_logits=True, label_smoothing=eps)\` on one-hot labels)"
  echo "- data: Fashion-MNIST's 60,000 training rows, \"clean\" as they are, \"noisy\" with 20 % of the labels (seed 7) replaced by another class drawn uniformly; the 10,000 clean test rows; x float32 as stored"
  echo "- model 784-256-10 ReLU, SGD lr 0.05 momentum 0.9, global batch 128, 8 epochs"
  echo "- figures from each system's test probabilities by the same code (\`bench/calibration.py\`): accuracy, NLL (mean −log p of the true class: the unsmoothed cross-entropy), ECE (15 equal-width confidence bins, Guo et al. 2017), mean confidence (mean of the largest probability); seconds: hvtrain the whole mpirun (start-up, 8 epochs, its per-epoch test evaluation), Keras \`fit\` alone. One run per seed and row; the spread between seeds is the noise"
  echo
  echo "| system | labels | eps | seed | test accuracy | test NLL | ECE | mean confidence | seconds |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
  printf '%s\n' "${rows[@]}"
} > "$OUT"
cat "$OUT"
