#!/usr/bin/env bash
# Run the TensorFlow/Keras peer: one process, then MultiWorkerMirroredStrategy with 2 workers.
# Usage: bench/run_peer.sh [epochs]   (env: MWMS_EPOCHS, PEER_TIMEOUT seconds per run)
set -euo pipefail
cd "$(dirname "$0")/.."
EPOCHS=${1:-6}
MWMS_EPOCHS=${MWMS_EPOCHS:-$EPOCHS}
LIMIT=${PEER_TIMEOUT:-900}
PY=bench/.venv/bin/python
if [ ! -x "$PY" ] || ! "$PY" -c 'import tensorflow, tf_keras, h5py' 2>/dev/null; then
  echo "run_peer: bench/.venv is missing or incomplete; run bench/setup_peer.sh first" >&2
  exit 2
fi
for f in data/fashion-mnist-train.h5 data/fashion-mnist-test.h5; do
  [ -f "$f" ] || { echo "run_peer: $f not found (run hvtrain's converter)" >&2; exit 2; }
done
LOG=$(mktemp -d)
echo "run_peer: logs in $LOG; load average before run: $(cut -d" " -f1-3 /proc/loadavg) (other work on the CPUs skews results)"

echo "run_peer: single process, $EPOCHS epochs"
timeout "$LIMIT" "$PY" bench/peer_keras.py --mode single --epochs "$EPOCHS" >"$LOG/single.log" 2>&1 \
  || { echo "run_peer: single mode failed:" >&2; tail -20 "$LOG/single.log" >&2; exit 1; }

PORTS=$("$PY" -c 'import socket
s=[socket.socket() for _ in range(2)]
[x.bind(("127.0.0.1", 0)) for x in s]
print(",".join(str(x.getsockname()[1]) for x in s))')
echo "run_peer: MultiWorkerMirroredStrategy, 2 workers on ports $PORTS, $MWMS_EPOCHS epochs"
PIDS=()
for i in 0 1; do
  timeout "$LIMIT" "$PY" bench/peer_keras.py --mode mwms --worker-index "$i" --ports "$PORTS" \
    --epochs "$MWMS_EPOCHS" >"$LOG/mwms$i.log" 2>&1 &
  PIDS+=($!)
done
RC=0
for p in "${PIDS[@]}"; do wait "$p" || RC=$?; done
[ "$RC" -eq 0 ] || { echo "run_peer: mwms failed (rc $RC):" >&2; tail -20 "$LOG"/mwms*.log >&2; exit 1; }

grep -h '^PEER_RESULT ' "$LOG/single.log" "$LOG/mwms0.log"
