#!/usr/bin/env bash
# optimizer.kind = "rmsprop" beside Keras' RMSprop in the same run (and Adam in both, the usual
# alternative): Fashion-MNIST, the 784-256-10 ReLU MLP, lr 0.001, global batch 128, 8 epochs
# (3,752 steps); test accuracy and NLL of the weights each system ends with (hvtrain's
# weights.h5, Keras' model after fit), by the same code (bench/calibration.py). KINDS may also
# name rmsprop-momentum: RMSprop with momentum 0.9 at lr 0.0001 in both (PyTorch's form in
# hvtrain, lr outside the buffer; Keras' inside: the same at a constant rate).
#   bash bench/rmsprop.sh [OUT.md]   (needs: make build, bash bench/setup_peer.sh)
# SEEDS ("1 2 3"): each seed changes initialization and order; the spread is the noise.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
OUT=${1:-bench/results/rmsprop-$(date +%F).md}
PY=bench/.venv/bin/python
SEEDS=${SEEDS:-1 2 3}
KINDS=${KINDS:-rmsprop adam}
MPI="mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -n 2"
[ -x "$PY" ] && "$PY" -c 'import tensorflow, h5py' 2>/dev/null || { echo "rmsprop.sh: run bash bench/setup_peer.sh first" >&2; exit 1; }
rows=()
lr_of() { [ "$1" = rmsprop-momentum ] && echo 0.0001 || echo 0.001; }
hv() { # KIND SEED
  local kind=$1 seed=$2 dir="$work/hv-$1-$2" r t0 t1 mom=0
  [ "$kind" = rmsprop-momentum ] && mom=0.9
  t0=$(date +%s.%N)
  $MPI "$BIN" train jobs/fashion-mnist.toml --set 'model.layers=[784, 256, 10]' \
    --set training.batch_size=64 --set training.epochs=8 --set "optimizer.kind=\"${kind%-momentum}\"" \
    --set optimizer.lr="$(lr_of "$kind")" --set optimizer.momentum=$mom --set optimizer.eps=1e-7 --set training.seed="$seed" --set data.shuffle_window=60000 \
    --set output.tensorboard=false --set "output.dir=\"$dir\"" > "$dir.log" 2>&1
  t1=$(date +%s.%N)
  "$BIN" predict jobs/fashion-mnist.toml --set 'model.layers=[784, 256, 10]' --weights "$dir/weights.h5" \
    --input data/fashion-mnist-test.h5 --output "$dir/pred.h5" >> "$dir.log" 2>&1
  r=$("$PY" bench/calibration.py "$dir/pred.h5" data/fashion-mnist-test.h5)
  rows+=("$(printf '| hvtrain 2 ranks | %s | %s | %s | %s | %.0f |' "$kind" "$seed" "$(jq -r .test_accuracy <<< "$r")" \
    "$(jq -r .test_nll <<< "$r")" "$(echo "$t1 - $t0" | bc)")")
}
keras() { # KIND SEED
  local kind=$1 seed=$2 r
  local mom=0; [ "$kind" = rmsprop-momentum ] && mom=0.9
  r=$("$PY" bench/peer_keras_optimizer.py data/fashion-mnist-train.h5 data/fashion-mnist-test.h5 \
      --optimizer "${kind%-momentum}" --momentum $mom --hidden 256 --epochs 8 --batch 128 --lr "$(lr_of "$kind")" \
      --eps 1e-7 --seed "$seed" 2> "$work/keras-$kind-$seed.log" \
      | sed -n 's/^PEER_RESULT //p')
  rows+=("$(printf '| Keras 1 process | %s | %s | %s | %s | %.0f |' "$kind" "$seed" "$(jq -r .test_accuracy <<< "$r")" \
    "$(jq -r .test_nll <<< "$r")" "$(jq -r .train_seconds <<< "$r")")")
  peer=$(jq -r .peer <<< "$r")
}
for seed in $SEEDS; do
  for kind in $KINDS; do
    echo "seed $seed $kind" >&2
    hv "$kind" "$seed"; keras "$kind" "$seed"
  done
done
{
  echo "# RMSprop on Fashion-MNIST: hvtrain's optimizer.kind = \"rmsprop\" beside Keras' RMSprop (and Adam in both)"
  echo
  echo "- command: \`bash bench/rmsprop.sh\` (SEEDS=\"$SEEDS\", KINDS=\"$KINDS\"), $(date -u +%FT%TZ)"
  echo "- machine: $(nproc) vCPU, $(lscpu | sed -n 's/^Model name: *//p'), $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "- hvtrain $(git rev-parse --short HEAD) (2 ranks, Open MPI, CPU backend, one shuffle window over all rows; rho 0.9, eps 1e-7 outside the root as PyTorch's); ${peer:-Keras: not run} (one process, default threading, \`RMSprop(rho=0.9, epsilon=1e-7)\`, eps inside the root; \`Adam(epsilon=1e-7)\`)"
  echo "- data: Fashion-MNIST's 60,000 training rows, the 10,000 test rows; x float32 as stored"
  echo "- model 784-256-10 ReLU, lr 0.001 (rmsprop-momentum: lr 0.0001, momentum 0.9), global batch 128, 8 epochs (3,752 steps), no weight decay"
  echo "- figures from each system's test probabilities of its final weights by the same code (\`bench/calibration.py\`): accuracy, NLL (mean −log p of the true class); seconds: hvtrain the whole mpirun (start-up, 8 epochs, its per-epoch test evaluation), Keras \`fit\` alone. One run per seed and row; the spread between seeds is the noise"
  echo
  echo "| system | optimizer | seed | test accuracy | test NLL | seconds |"
  echo "|---|---|---:|---:|---:|---:|"
  printf '%s\n' "${rows[@]}"
} > "$OUT"
cat "$OUT"
