#!/usr/bin/env bash
# Sample weights (data.sample_weight) beside Keras' model.fit(sample_weight=...) in the same run,
# on a weighted least-squares problem: the regression example's data (bench/make_surrogate.py,
# Friedman #1 in raw units, 20,000 training rows) with each training row's target given extra
# noise of its own known size sigma (log-uniform from 0.1 to 10, seed 5), as measurements of
# different precision are. Weights 1/sigma², scaled to mean 1, make the fit trust the precise
# rows; the test rows keep the generator's targets. The same 10-64-64-1 ReLU MLP, MSE, Adam 1e-3,
# global batch 64, 30 epochs, x and y standardized from the training rows, no validation, once
# unweighted and once weighted. Figures: test RMSE, MAE, R² (hvtrain: metrics.jsonl of the last
# epoch; Keras: scikit-learn on model.predict).
#   bash bench/sample_weights.sh [OUT.md]   (needs: make build, bash bench/setup_peer.sh,
#                                            bench/.venv/bin/pip install scikit-learn)
# SEEDS ("1 2 3"): each seed changes initialization and order; the spread is the noise.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
OUT=${1:-bench/results/sample-weights-$(date +%F).md}
PY=bench/.venv/bin/python
SEEDS=${SEEDS:-1 2 3}
EPOCHS=${EPOCHS:-30}
MPI="mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -n 2"
[ -x "$PY" ] && "$PY" -c 'import sklearn, tensorflow' 2>/dev/null ||
  { echo "sample_weights.sh: run bash bench/setup_peer.sh and bench/.venv/bin/pip install scikit-learn" >&2; exit 1; }
"$PY" bench/make_surrogate.py "$work" > /dev/null
"$PY" - "$work" <<'PY'
import sys, h5py, numpy as np
d = sys.argv[1]
with h5py.File(f"{d}/surrogate-train.h5", "r") as f:
    x, y = f["x"][...], f["y"][...]
rng = np.random.default_rng(5)
sigma = np.exp(rng.uniform(np.log(0.1), np.log(10.0), len(y))).astype(np.float32)
w = 1.0 / sigma**2
w /= w.mean()
with h5py.File(f"{d}/noisy-train.h5", "w") as g:
    g["x"] = x
    g["y"] = (y + sigma[:, None] * rng.standard_normal(y.shape)).astype(np.float32)
    g["w"] = w.astype(np.float32)
print(f"noisy targets: sigma {sigma.min():.3g} to {sigma.max():.3g}, weights {w.min():.3g} to {w.max():.3g} (mean 1)", file=sys.stderr)
PY
cat > "$work/job.toml" <<EOF
[data]
train = "$work/noisy-train.h5"
test = "$work/surrogate-test.h5"
normalize = "standard"
normalize_y = "standard"

[model]
layers = [10, 64, 64, 1]
activation = "relu"
loss = "mse"

[training]
epochs = $EPOCHS
batch_size = 32

[optimizer]
kind = "adam"
lr = 0.001

[output]
dir = "$work/out"
EOF
rows=()
hv() { # SEED WEIGHTS(none|w)
  local seed=$1 w=$2 dir="$work/hv-$1-$2" extra=() m t0 t1
  [ "$w" = w ] && extra=(--set 'data.sample_weight="w"')
  t0=$(date +%s.%N)
  $MPI "$BIN" train "$work/job.toml" "${extra[@]}" --set training.seed="$seed" --set "output.dir=\"$dir\"" > "$dir.log" 2>&1
  t1=$(date +%s.%N)
  m=$(tail -1 "$dir/metrics.jsonl")
  rows+=("$(printf '| hvtrain 2 ranks | %s | %s | %s | %s | %s | %.1f |' "$w" "$seed" \
    "$(jq -r '.test_rmse | .*1000 | round / 1000' <<< "$m")" "$(jq -r '.test_mae | .*1000 | round / 1000' <<< "$m")" \
    "$(jq -r '.test_r2 | .*10000 | round / 10000' <<< "$m")" "$(awk "BEGIN {print $t1 - $t0}")")")
  grep -o 'sample weights: .*' "$dir.log" | cut -c1-200 > "$work/weights-line" || true
}
keras() { # SEED WEIGHTS
  local seed=$1 w=$2 extra=() r
  [ "$w" = w ] && extra=(--weights w)
  r=$("$PY" bench/peer_keras_sample_weights.py "$work/noisy-train.h5" "$work/surrogate-test.h5" --epochs "$EPOCHS" \
      --batch 64 --seed "$seed" "${extra[@]}" 2> "$work/keras-$seed-$w.log" | sed -n 's/^PEER_RESULT //p')
  rows+=("$(printf '| Keras 1 process | %s | %s | %s | %s | %s | %.1f |' "$w" "$seed" "$(jq -r '.rmse | .*1000 | round / 1000' <<< "$r")" \
    "$(jq -r '.mae | .*1000 | round / 1000' <<< "$r")" "$(jq -r '.r2 | .*10000 | round / 10000' <<< "$r")" "$(jq -r .total_seconds <<< "$r")")")
  peer=$(jq -r .peer <<< "$r")
}
for seed in $SEEDS; do
  echo "seed $seed" >&2
  hv "$seed" none; hv "$seed" w
  keras "$seed" none; keras "$seed" w
done
{
  echo "# Sample weights on a weighted least-squares problem: hvtrain beside Keras' sample_weight"
  echo
  echo "- command: \`bash bench/sample_weights.sh\` (SEEDS=\"$SEEDS\", EPOCHS=$EPOCHS), $(date -u +%FT%TZ)"
  echo "- machine: $(nproc) vCPU, $(lscpu | sed -n 's/^Model name: *//p') ($(grep -qw amx_bf16 /proc/cpuinfo && echo "AMX-BF16, " || true)$(grep -qw avx512f /proc/cpuinfo && echo AVX-512 || echo "AVX2, no AVX-512")), $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "- hvtrain $(git rev-parse --short HEAD) (2 ranks, Open MPI, CPU backend, float32); ${peer:-Keras: not run} (one process, default threading)"
  echo "- data: bench/make_surrogate.py (Friedman #1 in raw units: 20,000 training rows, 5,000 test rows); each training target plus noise of its own sigma, log-uniform from 0.1 to 10 (seed 5); weights 1/sigma² scaled to mean 1 ($(cut -c1-140 "$work/weights-line" 2>/dev/null))"
  echo "- model 10-64-64-1 ReLU, MSE, Adam 1e-3, global batch 64, $EPOCHS epochs, x and y standardized from the training rows (hvtrain: data.normalize and normalize_y = \"standard\"; Keras: Normalization adapted on x, y standardized by hand), no validation"
  echo "- figures on the test rows (the generator's targets, noise 0.5): RMSE, MAE, R²; seconds: the whole command (start-up, training, evaluation). One run per seed and row"
  echo
  echo "| system | sample weights | seed | test RMSE | test MAE | test R² | seconds |"
  echo "|---|---|---:|---:|---:|---:|---:|"
  printf '%s\n' "${rows[@]}"
} > "$OUT"
cat "$OUT"
