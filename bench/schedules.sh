#!/usr/bin/env bash
# optimizer.schedule = "multistep" and "cosine_restarts" beside Keras' PiecewiseConstantDecay
# and CosineDecayRestarts in the same run (and the constant rate in both): Fashion-MNIST, the
# 784-256-10 ReLU MLP, SGD lr 0.05 momentum 0.9, global batch 128, 12 epochs (469 steps an
# epoch, 5,628 steps); multistep: × 0.1 after epochs 6 and 9; cosine_restarts: periods of 804,
# 1,608 and 3,216 steps (t_mul 2), ending at min_lr 0 with the run. Test accuracy and NLL of the
# weights each system ends with, by the same code (bench/calibration.py), and each system's rate
# (SCHEDULES may also name one_cycle: PyTorch's OneCycleLR peaking at 0.05, written out for Keras)
# after every epoch (hvtrain's metrics.jsonl `lr`, Keras' schedule at the optimizer's step).
#   bash bench/schedules.sh [OUT.md]   (needs: make build, bash bench/setup_peer.sh)
# SEEDS ("1 2 3"): each seed changes initialization and order; the spread is the noise.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
OUT=${1:-bench/results/schedules-$(date +%F).md}
PY=bench/.venv/bin/python
SEEDS=${SEEDS:-1 2 3}
SCHEDULES=${SCHEDULES:-constant multistep cosine_restarts}
EPOCHS=12
MPI="mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -n 2"
[ -x "$PY" ] && "$PY" -c 'import tensorflow, h5py' 2>/dev/null || { echo "schedules.sh: run bash bench/setup_peer.sh first" >&2; exit 1; }
rows=()
curves=()
hv_sets() { # SCHEDULE: the job's keys for it
  case $1 in
    multistep) echo "--set optimizer.schedule=\"multistep\" --set optimizer.milestones=[6,9] --set optimizer.factor=0.1" ;;
    cosine_restarts) echo "--set optimizer.schedule=\"cosine_restarts\" --set optimizer.decay_steps=804 --set optimizer.t_mul=2.0" ;;
    one_cycle) echo "--set optimizer.schedule=\"one_cycle\"" ;;
    *) echo "--set optimizer.schedule=\"constant\"" ;;
  esac
}
keras_args() { # SCHEDULE: the peer's arguments for it
  case $1 in
    multistep) echo "--schedule multistep --milestones 6,9 --factor 0.1" ;;
    cosine_restarts) echo "--schedule cosine_restarts --decay-steps 804 --t-mul 2.0" ;;
    one_cycle) echo "--schedule one_cycle" ;;
    *) echo "--schedule constant" ;;
  esac
}
hv() { # SCHEDULE SEED
  local sch=$1 seed=$2 dir="$work/hv-$1-$2" r t0 t1
  t0=$(date +%s.%N)
  # shellcheck disable=SC2046
  $MPI "$BIN" train jobs/fashion-mnist.toml --set 'model.layers=[784, 256, 10]' \
    --set training.batch_size=64 --set training.epochs=$EPOCHS --set 'optimizer.kind="sgd"' \
    --set optimizer.lr=0.05 --set optimizer.momentum=0.9 $(hv_sets "$sch") --set training.seed="$seed" \
    --set data.shuffle_window=60000 --set output.tensorboard=false --set "output.dir=\"$dir\"" > "$dir.log" 2>&1
  t1=$(date +%s.%N)
  "$BIN" predict jobs/fashion-mnist.toml --set 'model.layers=[784, 256, 10]' --weights "$dir/weights.h5" \
    --input data/fashion-mnist-test.h5 --output "$dir/pred.h5" >> "$dir.log" 2>&1
  r=$("$PY" bench/calibration.py "$dir/pred.h5" data/fashion-mnist-test.h5)
  rows+=("$(printf '| hvtrain 2 ranks | %s | %s | %s | %s | %.0f |' "$sch" "$seed" "$(jq -r .test_accuracy <<< "$r")" \
    "$(jq -r .test_nll <<< "$r")" "$(echo "$t1 - $t0" | bc)")")
  hv_lrs=$(jq -s -c '[.[].lr]' "$dir/metrics.jsonl")
}
keras() { # SCHEDULE SEED
  local sch=$1 seed=$2 r
  # shellcheck disable=SC2046
  r=$("$PY" bench/peer_keras_optimizer.py data/fashion-mnist-train.h5 data/fashion-mnist-test.h5 \
      --optimizer sgd --momentum 0.9 --hidden 256 --epochs $EPOCHS --batch 128 --lr 0.05 $(keras_args "$sch") \
      --seed "$seed" 2> "$work/keras-$sch-$seed.log" | sed -n 's/^PEER_RESULT //p')
  rows+=("$(printf '| Keras 1 process | %s | %s | %s | %s | %.0f |' "$sch" "$seed" "$(jq -r .test_accuracy <<< "$r")" \
    "$(jq -r .test_nll <<< "$r")" "$(jq -r .train_seconds <<< "$r")")")
  peer=$(jq -r .peer <<< "$r")
  keras_lrs=$(jq -c .lrs <<< "$r")
}
for seed in $SEEDS; do
  for sch in $SCHEDULES; do
    echo "seed $seed $sch" >&2
    hv "$sch" "$seed"; keras "$sch" "$seed"
    if [ "$seed" = "$(echo $SEEDS | cut -d' ' -f1)" ]; then
      curves+=("$("$PY" - "$sch" "$hv_lrs" "$keras_lrs" <<'PY'
import json, sys
sch, hv, ke = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
worst = max(abs(a - b) / b for a, b in zip(hv, ke))
cells = " | ".join(f"{a:.4g} / {b:.4g}" for a, b in zip(hv, ke))
print(f"| {sch} | {cells} | {worst:.1e} |")
PY
)")
    fi
  done
done
{
  echo "# Learning-rate schedules on Fashion-MNIST: hvtrain's multistep and cosine_restarts beside Keras' PiecewiseConstantDecay and CosineDecayRestarts"
  echo
  echo "- command: \`bash bench/schedules.sh\` (SEEDS=\"$SEEDS\", SCHEDULES=\"$SCHEDULES\"), $(date -u +%FT%TZ)"
  echo "- machine: $(nproc) vCPU, $(lscpu | sed -n 's/^Model name: *//p'), $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "- hvtrain $(git rev-parse --short HEAD) (2 ranks, Open MPI, CPU backend, one shuffle window over all rows; SGD as PyTorch's, lr outside the momentum buffer); ${peer:-Keras: not run} (one process, default threading, \`SGD(momentum=0.9)\`, lr inside the buffer: the same at a constant rate, smoother where the rate drops)"
  echo "- data: Fashion-MNIST's 60,000 training rows, the 10,000 test rows; x float32 as stored"
  echo "- model 784-256-10 ReLU, SGD lr 0.05 momentum 0.9, global batch 128, $EPOCHS epochs (469 steps an epoch, 5,628 steps); multistep: \`milestones = [6, 9]\`, \`factor = 0.1\` (Keras: \`PiecewiseConstantDecay\` with boundaries at steps 2,813 and 4,220, the last steps at each rate, values 0.05, 0.005, 0.0005); cosine_restarts: \`decay_steps = 804\`, \`t_mul = 2\`, \`m_mul = 1\`, \`min_lr = 0\` (periods end at steps 804, 2,412 and 5,628); one_cycle: \`schedule = \"one_cycle\"\` (0.002 up to 0.05 over steps 0 to 1,687, then down to 2e-7 at step 5,627; Keras: PyTorch's formula as a \`LearningRateSchedule\`)"
  echo "- figures from each system's test probabilities of its final weights by the same code (\`bench/calibration.py\`): accuracy, NLL (mean −log p of the true class); seconds: hvtrain the whole mpirun (start-up, $EPOCHS epochs, its per-epoch test evaluation), Keras \`fit\` alone. One run per seed and row; the spread between seeds is the noise"
  echo
  echo "| system | schedule | seed | test accuracy | test NLL | seconds |"
  echo "|---|---|---:|---:|---:|---:|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "The rate after each epoch (the next step's), hvtrain / Keras, first seed, and the largest relative difference:"
  echo
  printf '| schedule |'; for e in $(seq 1 $EPOCHS); do printf ' %s |' "$e"; done; echo ' max diff |'
  printf '|---|'; for _ in $(seq 1 $EPOCHS); do printf -- '---:|'; done; printf -- '---:|\n'
  printf '%s\n' "${curves[@]}"
} > "$OUT"
cat "$OUT"
