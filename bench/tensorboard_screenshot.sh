#!/usr/bin/env bash
# TensorBoard on hvtrain's own event files, as a user sees it (issue #51): a Fashion-MNIST run
# (3 epochs, 2 ranks, weight histograms every epoch) and a 6-trial sweep of it (ASHA), then
# `tensorboard --logdir` from the test venv (make onnx-venv) and Debian's headless Chromium
# taking a screenshot of its Scalars, Histograms and HParams tabs.
#
#   bash bench/tensorboard_screenshot.sh [OUT]   (OUT: bench/results/tensorboard-DATE)
#
# Needs: make data onnx-venv; apt-get install chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-bench/results/tensorboard-$(date +%F)}
PY=target/onnx-venv/bin/python
BIN=target/release/hvtrain
command -v chromium >/dev/null || { echo "needs Debian's chromium (apt-get install chromium)"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
LOG=runs/tb-shot
rm -rf "$LOG" && mkdir -p "$LOG" "$OUT"
MPIRUN="mpirun --oversubscribe --bind-to none -n 2"
$MPIRUN $BIN train jobs/fashion-mnist.toml --set training.epochs=3 --set output.histogram_freq=1 \
  --set 'output.dir="'$LOG'/fashion-mnist"' 2>&1 | grep -E "epoch [0-9]+/3:|done:"
cat > "$LOG/sweep.toml" <<TOML
$(sed -n '/^\[sweep\]/q;p' jobs/fashion-mnist.toml)
[sweep]
trials = 6
scheduler = "asha"
eta = 2
sampler = "sobol"
metric = "test_accuracy"
[sweep.space]
"optimizer.lr" = { log_uniform = [0.003, 0.3] }
"model.width" = [128, 512]
TOML
$MPIRUN $BIN sweep "$LOG/sweep.toml" --set training.epochs=3 --set 'output.dir="'$LOG'/sweep"' 2>&1 \
  | grep -E "sweep done|^[0-9]+ +[0-9]+ " || true
$PY -m tensorboard.main --logdir "$LOG" --port 6123 --host localhost >"$OUT/tensorboard.log" 2>&1 &
TB=$!
trap 'kill $TB 2>/dev/null || true' EXIT
for _ in $(seq 60); do curl -s -o /dev/null http://localhost:6123/ && break; sleep 1; done
shot() {  # shot NAME URL-FRAGMENT
  chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run --disable-background-networking \
    --disable-component-update --disable-sync --user-data-dir="$(mktemp -d)" --hide-scrollbars --enable-unsafe-swiftshader \
    --window-size=1600,1000 --virtual-time-budget=20000 --screenshot="$OUT/$1.png" \
    "http://localhost:6123/$2" >/dev/null 2>&1
  echo "wrote $OUT/$1.png"
}
shot scalars '#timeseries'
shot histograms '#histograms'
shot hparams '#hparams'
{
  echo "# TensorBoard on hvtrain's event files ($(date +%F))"
  echo
  echo "\`bash bench/tensorboard_screenshot.sh\` at commit $(git rev-parse --short HEAD), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs),"
  echo "TensorBoard $($PY -c 'import tensorboard; print(tensorboard.__version__)'), $(chromium --version 2>/dev/null | head -1) headless."
  echo "Logdir: a 3-epoch Fashion-MNIST run on 2 ranks (histograms every epoch) and a 6-trial ASHA sweep"
  echo "over the learning rate and the hidden width, ranked by test accuracy."
  echo
  echo "- [scalars.png](scalars.png): the Time Series tab (epoch_loss, epoch_accuracy, ... of every run)"
  echo "- [histograms.png](histograms.png): the Histograms tab (dense0/weight, ...)"
  echo "- [hparams.png](hparams.png): the HParams tab, the sweep's trials with their values and metrics"
} > "$OUT/README.md"
