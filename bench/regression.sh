#!/usr/bin/env bash
# The regression example side by side: hvtrain (jobs/surrogate.toml, 2 ranks) against Keras
# (Normalization + the same MLP, one process), in the same run, on the surrogate data in raw
# units (bench/make_surrogate.py, scikit-learn's Friedman #1). Each row: test R², MAE, RMSE
# (hvtrain: `hvtrain eval`; Keras: scikit-learn on model.predict), epochs run, wall time of
# the whole command, training samples/s. Rows:
#   - as the job is (normalize x and y, plateau, early stopping, keep_best) / Keras with
#     EarlyStopping(restore_best_weights) + ReduceLROnPlateau;
#   - 60 plain epochs (constant lr, no early stopping) / Keras plain, as PEERS.md set it up;
#   - no normalization at all (the failure a user meets first) / Keras without Normalization.
#   bash bench/regression.sh [OUT.md]       (needs: make build, bash bench/setup_peer.sh)
# ROUNDS (1) repeats every row; the table gives each round's figures.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench/results/regression-$(date +%F).md}
PY=bench/.venv/bin/python
HV=target/release/hvtrain
ROUNDS=${ROUNDS:-1}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPI="mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -n 2"
[ -x "$PY" ] && "$PY" -c 'import sklearn, tensorflow' 2>/dev/null || { echo "regression.sh: run bash bench/setup_peer.sh and bench/.venv/bin/pip install scikit-learn" >&2; exit 1; }
[ -f data/surrogate-train.h5 ] || "$PY" bench/make_surrogate.py data
log=$(mktemp -d /tmp/hvtrain-regression.XXXXXX)
rows=()
hv() { # NAME --set...
  local name=$1; shift
  local dir="runs/bench-regression-$name" t0 t1 m
  rm -rf "$dir"
  t0=$(date +%s.%N)
  $MPI $HV train jobs/surrogate.toml --set "output.dir=\"$dir\"" "$@" > "$log/$name.log" 2>&1
  t1=$(date +%s.%N)
  m=$($HV eval jobs/surrogate.toml --weights "$dir/weights.h5" "$@" 2>/dev/null | tail -1)
  local epochs sps
  epochs=$(wc -l < "$dir/metrics.jsonl")
  sps=$("$PY" -c 'import json,sys,statistics; v=[json.loads(l)["samples_per_sec"] for l in open(sys.argv[1])]; print(round(statistics.median(v[1:] or v)))' "$dir/metrics.jsonl")
  rows+=("$(printf '| hvtrain 2 ranks | %s | %s | %s | %s | %s | %.1f | %s |' "$name" \
    "$(jq -r '.test_r2 | .*10000 | round / 10000' <<< "$m")" "$(jq -r '.test_mae | .*1000 | round / 1000' <<< "$m")" \
    "$(jq -r '.test_rmse | .*1000 | round / 1000' <<< "$m")" "$epochs" "$(echo "$t1 - $t0" | bc)" "$sps")")
}
keras() { # NAME args...
  local name=$1; shift
  local t0 t1 r
  t0=$(date +%s.%N)
  r=$("$PY" bench/peer_keras_regression.py --data-dir data "$@" 2>"$log/keras-$name.log" | sed -n 's/^PEER_RESULT //p')
  t1=$(date +%s.%N)
  rows+=("$(printf '| Keras 1 process | %s | %s | %s | %s | %s | %.1f | %s |' "$name" \
    "$(jq -r '.r2 | .*10000 | round / 10000' <<< "$r")" "$(jq -r '.mae | .*1000 | round / 1000' <<< "$r")" \
    "$(jq -r '.rmse | .*1000 | round / 1000' <<< "$r")" "$(jq -r .epochs_run <<< "$r")" "$(echo "$t1 - $t0" | bc)" \
    "$(jq -r '.samples_per_s | round' <<< "$r")")")
  versions="TensorFlow $(jq -r .tensorflow <<< "$r"), Keras $(jq -r .keras <<< "$r")"
}
PLAIN=(--set 'training.early_stopping={monitor="val_loss",patience=1000}' --set 'optimizer.schedule="constant"' --set output.keep_best=false)
RAW=(--set 'data.normalize="none"' --set 'data.normalize_y="none"')
for r in $(seq "$ROUNDS"); do
  echo "round $r/$ROUNDS"
  hv job; keras callbacks --callbacks
  hv plain "${PLAIN[@]}"; keras plain
  hv raw "${PLAIN[@]}" "${RAW[@]}"; keras raw --no-normalization
done
{
  echo "# Regression example: hvtrain against Keras on raw-unit surrogate data"
  echo
  echo "- command: \`bash bench/regression.sh\` (ROUNDS=$ROUNDS), $(date -u +%FT%TZ)"
  echo "- machine: $(nproc) vCPU, $(lscpu | sed -n 's/^Model name: *//p'), $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "- hvtrain $(git rev-parse --short HEAD) (2 ranks, Open MPI, CPU backend); ${versions:-Keras: not run}, one process, default threading"
  echo "- data: bench/make_surrogate.py (scikit-learn make_friedman1, noise 0.5, 20000 train + 5000 test rows, 10 features scaled 1e-3 to 1e5 with offsets up to 3e5); model 10-64-64-1 ReLU, MSE, Adam 1e-3, global batch 64, validation_split 0.1, at most 60 epochs"
  echo "- metrics on the 5000 test rows in y's units (hvtrain: \`hvtrain eval\`; Keras: scikit-learn on \`model.predict\`); wall = the whole command (start-up, data, training, evaluation); samples/s = median over the epochs after the first (Keras: training rows × epochs / fit time)"
  echo
  echo "| system | variant | test R² | MAE | RMSE | epochs | wall s | samples/s |"
  echo "|---|---|---:|---:|---:|---:|---:|---:|"
  printf '%s\n' "${rows[@]}"
  echo
  echo "Variants: **job** = jobs/surrogate.toml as it is (normalize x and y, plateau lr, early stopping patience 15, keep_best) against Keras with Normalization, EarlyStopping(patience=15, restore_best_weights=True) and ReduceLROnPlateau(0.5, 5); **plain** = 60 epochs at a constant lr (hvtrain still normalizes x and y; Keras x only, as its Normalization layer does); **raw** = no normalization on either side."
} > "$OUT"
cat "$OUT"
echo "logs: $log"
