#!/usr/bin/env bash
# model.loss = "quantile" (the pinball loss) and "log_cosh" beside Keras in the same run, on a
# problem whose noise grows with one input: the regression example's data (bench/make_surrogate.py,
# Friedman #1 in raw units, 20,000 training and 5,000 test rows) with each target, training and
# test alike, given extra Gaussian noise of sigma = 0.5 + 3·u, u the second feature brought back
# to [0, 1] (seed 7), so the true 5 % to 95 % interval is narrow for some rows and wide for
# others. The same 10-64-64-1 ReLU MLP, Adam 1e-3, global batch 64, 30 epochs, x and y
# standardized from the training rows, no validation; trained at tau 0.05, 0.5 and 0.95 (and with
# log_cosh and mse). Figures from each system's test predictions by the same code: the share of
# test targets below each quantile's output (tau is the aim), the share inside [q0.05, q0.95]
# (0.90 the aim), its mean width against the true interval's (3.29·sigma), the pinball loss;
# log_cosh and mse: test RMSE against the noisy and the noise-free targets.
#   bash bench/quantile.sh [OUT.md]   (needs: make build, bash bench/setup_peer.sh,
#                                      bench/.venv/bin/pip install scikit-learn)
# SEEDS ("1 2 3"): each seed changes initialization and order; the spread is the noise.
set -euo pipefail
source "$(dirname "$0")/lib.sh"
OUT=${1:-bench/results/quantile-$(date +%F).md}
PY=bench/.venv/bin/python
SEEDS=${SEEDS:-1 2 3}
EPOCHS=${EPOCHS:-30}
LOSSES=${LOSSES:-q0.05 q0.5 q0.95 log_cosh mse}
MPI="mpirun --oversubscribe --bind-to none --mca mpi_yield_when_idle 1 -n 2"
[ -x "$PY" ] && "$PY" -c 'import sklearn, tensorflow' 2>/dev/null ||
  { echo "quantile.sh: run bash bench/setup_peer.sh and bench/.venv/bin/pip install scikit-learn" >&2; exit 1; }
"$PY" bench/make_surrogate.py "$work" > /dev/null
"$PY" - "$work" <<'PY'
import sys, h5py, numpy as np
SCALE1, OFFSET1 = 1e-3, 0.0  # bench/make_surrogate.py's raw units of feature 2 (x[:, 1])
d = sys.argv[1]
rng = np.random.default_rng(7)
for name in ["train", "test"]:
    with h5py.File(f"{d}/surrogate-{name}.h5", "r") as f:
        x, y = f["x"][...], f["y"][...]
    u = (x[:, 1] - OFFSET1) / SCALE1
    sigma = (0.5 + 3.0 * u).astype(np.float32)
    with h5py.File(f"{d}/hetero-{name}.h5", "w") as g:
        g["x"] = x
        g["y"] = (y + sigma[:, None] * rng.standard_normal(y.shape)).astype(np.float32)
        g["clean"] = y
        g["sigma"] = sigma
PY
printf '%s\n' "[data]" "train = \"$work/hetero-train.h5\"" "test = \"$work/hetero-test.h5\"" 'normalize = "standard"' \
  'normalize_y = "standard"' "" "[model]" "layers = [10, 64, 64, 1]" 'activation = "relu"' "" "[training]" \
  "epochs = $EPOCHS" "batch_size = 32" "" "[optimizer]" 'kind = "adam"' "lr = 0.001" > "$work/job.toml"
runs=() # "system loss seed predictions.h5 seconds"
loss_sets() { # LOSS: hvtrain's --set arguments for it
  case $1 in
    q*) echo "--set model.loss=\"quantile\" --set model.quantile=${1#q}" ;;
    *) echo "--set model.loss=\"$1\"" ;;
  esac
}
hv() { # LOSS(q0.05|q0.5|q0.95|log_cosh|mse) SEED
  local loss=$1 seed=$2 dir="$work/hv-$1-$2" t0 t1
  t0=$(date +%s.%N)
  # shellcheck disable=SC2046
  $MPI "$BIN" train "$work/job.toml" $(loss_sets "$loss") --set training.seed="$seed" --set output.tensorboard=false \
    --set "output.dir=\"$dir\"" > "$dir.log" 2>&1
  t1=$(date +%s.%N)
  # shellcheck disable=SC2046
  "$BIN" predict "$work/job.toml" $(loss_sets "$loss") --weights "$dir/weights.h5" --input "$work/hetero-test.h5" \
    --output "$dir/pred.h5" >> "$dir.log" 2>&1
  runs+=("hvtrain $loss $seed $dir/pred.h5 $(awk "BEGIN {print $t1 - $t0}")")
}
keras() { # LOSS SEED
  local loss=$1 seed=$2 args=() r
  case $loss in
    q*) args=(--loss quantile --tau "${loss#q}") ;;
    *) args=(--loss "$loss") ;;
  esac
  r=$("$PY" bench/peer_keras_quantile.py "$work/hetero-train.h5" "$work/hetero-test.h5" --out "$work/keras-$loss-$seed.h5" \
      --epochs "$EPOCHS" --batch 64 --seed "$seed" "${args[@]}" 2> "$work/keras-$loss-$seed.log" | sed -n 's/^PEER_RESULT //p')
  runs+=("Keras $loss $seed $work/keras-$loss-$seed.h5 $(jq -r .total_seconds <<< "$r")")
  peer=$(jq -r .peer <<< "$r")
}
for seed in $SEEDS; do
  for loss in $LOSSES; do
    echo "seed $seed $loss" >&2
    hv "$loss" "$seed"; keras "$loss" "$seed"
  done
done
{
  echo "# Quantile regression (the pinball loss) and log-cosh: hvtrain beside Keras on noise that grows with an input"
  echo
  echo "- command: \`bash bench/quantile.sh\` (SEEDS=\"$SEEDS\", EPOCHS=$EPOCHS, LOSSES=\"$LOSSES\"), $(date -u +%FT%TZ)"
  echo "- machine: $(nproc) vCPU, $(lscpu | sed -n 's/^Model name: *//p') ($(grep -qw amx_bf16 /proc/cpuinfo && echo "AMX-BF16, " || true)$(grep -qw avx512f /proc/cpuinfo && echo AVX-512 || echo "AVX2, no AVX-512")), $(free -g | awk '/Mem:/{print $2}') GiB"
  echo "- hvtrain $(git rev-parse --short HEAD) (2 ranks, Open MPI, CPU backend, float32, \`model.loss = \"quantile\"\` with \`model.quantile\`); ${peer:-Keras: not run} (one process, default threading, the pinball loss written out as TensorFlow Addons' \`PinballLoss\` computes it; \`loss=\"log_cosh\"\`, \`\"mse\"\`)"
  echo "- data: bench/make_surrogate.py (Friedman #1 in raw units: 20,000 training rows, 5,000 test rows); every target, training and test, plus Gaussian noise of sigma = 0.5 + 3·u (u: feature 2 on [0, 1], seed 7): sigma from 0.5 to 3.5"
  echo "- model 10-64-64-1 ReLU, Adam 1e-3, global batch 64, $EPOCHS epochs, x and y standardized from the training rows (hvtrain: data.normalize and normalize_y = \"standard\"; Keras: Normalization adapted on x, y standardized by hand), no validation"
  echo "- figures from each system's test predictions by the same code: below = the share of test targets below the output (the aim: tau); pinball = the mean pinball loss at tau; for the interval [q0.05, q0.95] of a seed's two runs: the share of test targets inside (the aim: 0.90), its mean width beside the true interval's (3.29·sigma), and the correlation of its width with sigma; log_cosh, mse: test RMSE against the noisy targets and the noise-free ones. Seconds: the whole command. One run per seed and row; the spread between seeds is the noise"
  echo
  "$PY" - "$work" "${runs[@]}" <<'PY'
import sys, h5py, numpy as np
d, runs = sys.argv[1], [r.split() for r in sys.argv[2:]]
with h5py.File(f"{d}/hetero-test.h5", "r") as f:
    y, clean, sigma = f["y"][...].ravel(), f["clean"][...].ravel(), f["sigma"][...].ravel()
print("| system | loss | seed | below | pinball | test RMSE, noisy / noise-free | seconds |")
print("|---|---|---:|---:|---:|---:|---:|")
by = {}
for system, loss, seed, path, secs in runs:
    p = h5py.File(path, "r")["outputs"][...].ravel().astype(np.float64)
    by[(system, loss, seed)] = p
    if loss.startswith("q"):
        tau, u = float(loss[1:]), y - p
        cells, name = f"{(y < p).mean():.3f} | {np.maximum(tau * u, (tau - 1) * u).mean():.4f} | ", f"quantile {tau}"
    else:
        rmse = lambda t: np.sqrt(((p - t) ** 2).mean())
        cells, name = f" |  | {rmse(y):.3f} / {rmse(clean):.3f}", loss
    print(f"| {system} | {name} | {seed} | {cells} | {float(secs):.1f} |")
print()
print("| system | seed | inside [q0.05, q0.95] | mean width | true mean width | correlation of width and sigma |")
print("|---|---:|---:|---:|---:|---:|")
for (system, loss, seed), lo in sorted(by.items()):
    if loss != "q0.05" or (system, "q0.95", seed) not in by:
        continue
    w = by[(system, "q0.95", seed)] - lo
    inside = ((y >= lo) & (y <= lo + w)).mean()
    print(f"| {system} | {seed} | {inside:.3f} | {w.mean():.3f} | {(3.29 * sigma).mean():.3f} | {np.corrcoef(w, sigma)[0, 1]:.3f} |")
PY
} > "$OUT"
cat "$OUT"
