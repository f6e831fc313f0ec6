#!/usr/bin/env bash
# Class weights on imbalanced data, hvtrain beside Keras' model.fit(class_weight=...) in the
# same run: Fashion-MNIST with classes 5-9 cut to 5 % of their training rows (every 20th;
# 6000 rows of each of classes 0-4, about 300 of each of 5-9), the same 784-256-10 ReLU MLP, SGD lr
# 0.05 momentum 0.9, global batch 128, 8 epochs, once without weights and once with
# scikit-learn's "balanced" weights (hvtrain: model.class_weights = "balanced"; Keras: the
# same numbers as a dict). Figures on the whole, balanced test set (1000 rows a class): test
# accuracy, balanced accuracy (mean recall), macro F1, and the rare classes' mean recall
# (hvtrain: metrics.jsonl and its per-class report; Keras: numpy on model.predict).
#   bash bench/class_weights.sh [OUT.md]    (needs: make build, bash bench/setup_peer.sh)
# hvtrain runs with its default shuffle window (4096 rows shuffled together, in blocks of 256)
# and, weighted, with one window over the whole file (32768), as Keras shuffles every row.
# SEEDS ("1 2 3") runs every row once per seed; the table gives each seed's figures.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
OUT=${1:-bench/results/class-weights-$(date +%F).md}
PY=bench/.venv/bin/python
SEEDS=${SEEDS:-1 2 3}
MPI="mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -n 2"
[ -x "$PY" ] && "$PY" -c 'import tensorflow' 2>/dev/null || { echo "class_weights.sh: run bash bench/setup_peer.sh first" >&2; exit 1; }
"$PY" - "$work/imbalanced.h5" <<'PY'
import sys, h5py, numpy as np
with h5py.File("data/fashion-mnist-train.h5", "r") as f:
    x, y = f["x"][...], f["y"][...]
keep = (y < 5) | (np.arange(len(y)) % 20 == 0)
with h5py.File(sys.argv[1], "w") as g:
    g["x"], g["y"] = x[keep], y[keep]
print("imbalanced training rows:", np.bincount(y[keep]).tolist(), file=sys.stderr)
PY
rows=()
COMMON=(--set "data.train=\"$work/imbalanced.h5\"" --set 'model.layers=[784, 256, 10]' --set training.batch_size=64
        --set training.epochs=8 --set optimizer.lr=0.05 --set optimizer.momentum=0.9)
hv() { # SEED WEIGHTS(none|balanced) WINDOW(rows shuffled together)
  local seed=$1 w=$2 win=$3 dir="$work/hv-$1-$2-$3" extra=() m rare
  [ "$w" = balanced ] && extra=(--set 'model.class_weights="balanced"')
  $MPI "$BIN" train jobs/fashion-mnist.toml "${COMMON[@]}" "${extra[@]}" --set training.seed="$seed" \
    --set data.shuffle_window="$win" --set "output.dir=\"$dir\"" > "$dir.log" 2>&1
  m=$(tail -1 "$dir/metrics.jsonl")
  # The rare classes' recall from the per-class report (columns: class, recall, ...).
  rare=$(grep 'per class on the test data:' "$dir.log" | awk '$NF ~ /^[0-9]+$/ && $(NF-5) ~ /^[5-9]$/ {s += $(NF-4); n++} END {printf "%.4f", s / n}')
  rows+=("$(printf '| hvtrain 2 ranks, window %s | %s | %s | %s | %s | %s | %s |' "$win" "$w" "$seed" \
    "$(jq -r '.test_accuracy | .*10000 | round / 10000' <<< "$m")" "$(jq -r '.test_balanced_accuracy | .*10000 | round / 10000' <<< "$m")" \
    "$(jq -r '.test_macro_f1 | .*10000 | round / 10000' <<< "$m")" "$rare")")
  grep -o 'class weights: .*' "$dir.log" | cut -c1-300 > "$work/weights-line" || true
}
keras() { # SEED WEIGHTS
  local seed=$1 w=$2 extra=() r
  [ "$w" = balanced ] && extra=(--balanced)
  r=$("$PY" bench/peer_keras_class_weights.py "$work/imbalanced.h5" data/fashion-mnist-test.h5 --hidden 256 \
      --epochs 8 --batch 128 --lr 0.05 --seed "$seed" "${extra[@]}" 2> "$work/keras-$seed-$w.log" | sed -n 's/^PEER_RESULT //p')
  rows+=("$(printf '| Keras 1 process, full shuffle | %s | %s | %s | %s | %s | %s |' "$w" "$seed" "$(jq -r .test_accuracy <<< "$r")" \
    "$(jq -r .balanced_accuracy <<< "$r")" "$(jq -r .macro_f1 <<< "$r")" "$(jq -r .rare_recall <<< "$r")")")
  peer=$(jq -r .peer <<< "$r")
}
for seed in $SEEDS; do
  echo "seed $seed" >&2
  hv "$seed" none 4096; hv "$seed" balanced 4096; hv "$seed" balanced 32768
  keras "$seed" none; keras "$seed" balanced
done
{
  echo "# Class weights on imbalanced Fashion-MNIST: hvtrain beside Keras' class_weight"
  echo
  echo "- command: \`bash bench/class_weights.sh\` (SEEDS=\"$SEEDS\"), $(date -u +%FT%TZ)"
  echo "- machine: $(nproc) vCPU, $(lscpu | sed -n 's/^Model name: *//p'), $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "- hvtrain $(git rev-parse --short HEAD) (2 ranks, Open MPI, CPU backend); ${peer:-Keras: not run} (one process, default threading)"
  echo "- data: Fashion-MNIST training rows of classes 5-9 cut to every 20th (6000 rows of each of classes 0-4, 288 to 308 of each of 5-9; 31,500 rows), the whole test set (1000 rows a class); x float32 as stored"
  echo "- model 784-256-10 ReLU, softmax cross-entropy, SGD lr 0.05 momentum 0.9, global batch 128, 8 epochs; \"balanced\" = scikit-learn's rows / (classes × the class's rows): 0.525 for classes 0-4, 10.2 to 10.9 for 5-9 ($(cat "$work/weights-line" 2>/dev/null | cut -c1-120)...)"
  echo "- figures on the test set: accuracy, balanced accuracy (mean recall over the 10 classes; equal to accuracy here, the test set being balanced), macro F1, and the mean recall of the rare classes 5-9 (hvtrain: metrics.jsonl and the per-class report at the end; Keras: numpy on model.predict). One run per seed and row; seeds change initialization and order, so the spread between seeds is the noise"
  echo
  echo "Window: hvtrain's \`data.shuffle_window\` (rows shuffled together each epoch; 4096 is the default, 32768 covers the whole file as Keras' \`shuffle=True\` does)."
  echo
  echo "| system | class weights | seed | test accuracy | balanced accuracy | macro F1 | rare classes' recall |"
  echo "|---|---|---:|---:|---:|---:|---:|"
  printf '%s\n' "${rows[@]}"
} > "$OUT"
cat "$OUT"
