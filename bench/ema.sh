#!/usr/bin/env bash
# The moving average of the weights (optimizer.ema) beside Keras' use_ema in the same run:
# Fashion-MNIST, the 784-256-10 ReLU MLP, SGD lr 0.05 momentum 0.9, global batch 128, 8 epochs
# (3,752 steps), without an average and with β = BETAS; test accuracy and NLL of the weights
# each system ends with (hvtrain's weights.h5, Keras' model after fit: both the average when on),
# by the same code (bench/calibration.py).
#   bash bench/ema.sh [OUT.md]   (needs: make build, bash bench/setup_peer.sh)
# SEEDS ("1 2"): each seed changes initialization and order; the spread is the noise.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
OUT=${1:-bench/results/ema-$(date +%F).md}
PY=bench/.venv/bin/python
SEEDS=${SEEDS:-1 2}
BETAS=${BETAS:-0 0.999}
MPI="mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -n 2"
[ -x "$PY" ] && "$PY" -c 'import tensorflow, h5py' 2>/dev/null || { echo "ema.sh: run bash bench/setup_peer.sh first" >&2; exit 1; }
rows=()
hv() { # BETA SEED
  local beta=$1 seed=$2 dir="$work/hv-$1-$2" ema=() r t0 t1
  [ "$beta" != 0 ] && ema=(--set "optimizer.ema=$beta")
  t0=$(date +%s.%N)
  $MPI "$BIN" train jobs/fashion-mnist.toml --set 'model.layers=[784, 256, 10]' \
    --set training.batch_size=64 --set training.epochs=8 --set optimizer.lr=0.05 --set optimizer.momentum=0.9 \
    "${ema[@]}" --set training.seed="$seed" --set data.shuffle_window=60000 \
    --set output.tensorboard=false --set "output.dir=\"$dir\"" > "$dir.log" 2>&1
  t1=$(date +%s.%N)
  "$BIN" predict jobs/fashion-mnist.toml --set 'model.layers=[784, 256, 10]' --weights "$dir/weights.h5" \
    --input data/fashion-mnist-test.h5 --output "$dir/pred.h5" >> "$dir.log" 2>&1
  r=$("$PY" bench/calibration.py "$dir/pred.h5" data/fashion-mnist-test.h5)
  rows+=("$(printf '| hvtrain 2 ranks | %s | %s | %s | %s | %.0f |' "$beta" "$seed" "$(jq -r .test_accuracy <<< "$r")" \
    "$(jq -r .test_nll <<< "$r")" "$(echo "$t1 - $t0" | bc)")")
}
keras() { # BETA SEED
  local beta=$1 seed=$2 r
  r=$("$PY" bench/peer_keras_ema.py data/fashion-mnist-train.h5 data/fashion-mnist-test.h5 --hidden 256 --epochs 8 \
      --batch 128 --lr 0.05 --ema "$beta" --seed "$seed" 2> "$work/keras-$beta-$seed.log" | sed -n 's/^PEER_RESULT //p')
  rows+=("$(printf '| Keras 1 process | %s | %s | %s | %s | %.0f |' "$beta" "$seed" "$(jq -r .test_accuracy <<< "$r")" \
    "$(jq -r .test_nll <<< "$r")" "$(jq -r .train_seconds <<< "$r")")")
  peer=$(jq -r .peer <<< "$r")
}
for seed in $SEEDS; do
  for beta in $BETAS; do
    echo "seed $seed beta $beta" >&2
    hv "$beta" "$seed"; keras "$beta" "$seed"
  done
done
{
  echo "# A moving average of the weights on Fashion-MNIST: hvtrain's optimizer.ema beside Keras' use_ema"
  echo
  echo "- command: \`bash bench/ema.sh\` (SEEDS=\"$SEEDS\", BETAS=\"$BETAS\"), $(date -u +%FT%TZ)"
  echo "- machine: $(nproc) vCPU, $(lscpu | sed -n 's/^Model name: *//p'), $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "- hvtrain $(git rev-parse --short HEAD) (2 ranks, Open MPI, CPU backend, one shuffle window over all rows; \`optimizer.ema = β\`, β 0: not set); ${peer:-Keras: not run} (one process, default threading, \`SGD(use_ema=True, ema_momentum=β)\`, whose \`fit\` ends by overwriting the weights with the average)"
  echo "- data: Fashion-MNIST's 60,000 training rows, the 10,000 test rows; x float32 as stored"
  echo "- model 784-256-10 ReLU, SGD lr 0.05 momentum 0.9, global batch 128, 8 epochs (3,752 steps)"
  echo "- figures from each system's test probabilities of its final weights by the same code (\`bench/calibration.py\`): accuracy, NLL (mean −log p of the true class); seconds: hvtrain the whole mpirun (start-up, 8 epochs, its per-epoch test evaluation), Keras \`fit\` alone. One run per seed and row; the spread between seeds is the noise"
  echo
  echo "| system | β | seed | test accuracy | test NLL | seconds |"
  echo "|---|---:|---:|---:|---:|---:|"
  printf '%s\n' "${rows[@]}"
} > "$OUT"
cat "$OUT"
