#!/usr/bin/env bash
# Create bench/.venv with the TensorFlow/Keras peer (see /work/shared/PEERS.md). Idempotent.
set -euo pipefail
cd "$(dirname "$0")"
VENV=.venv
PY=${PYTHON:-python3}

if [ ! -x "$VENV/bin/python" ]; then
  echo "setup_peer: creating venv $PWD/$VENV with $($PY --version)"
  "$PY" -m venv "$VENV"
else
  echo "setup_peer: venv $PWD/$VENV exists, reusing it"
fi
PIP=("$VENV/bin/python" -m pip install --disable-pip-version-check -q)

if "$VENV/bin/python" -c 'import tensorflow, tf_keras, h5py' 2>/dev/null; then
  echo "setup_peer: tensorflow, tf_keras, h5py already installed"
elif "${PIP[@]}" tensorflow-cpu==2.21.0 tf-keras==2.21.0 h5py; then
  echo "setup_peer: installed tensorflow-cpu==2.21.0 tf-keras==2.21.0 h5py"
else
  # Pinned versions unavailable (e.g. no wheel for this Python): take the newest matching pair.
  echo "setup_peer: WARNING: pinned 2.21.0 install failed; falling back to latest tensorflow-cpu + matching tf-keras" >&2
  "${PIP[@]}" tensorflow-cpu h5py
  TFV=$("$VENV/bin/python" -c 'import tensorflow as tf; print(".".join(tf.__version__.split(".")[:2]))')
  "${PIP[@]}" "tf-keras~=$TFV.0"
  echo "setup_peer: installed fallback versions"
fi

# pandas: the peer of `hvtrain predict` on tables reads and writes CSV with it (bench/predict_table.sh).
"$VENV/bin/python" -c 'import pandas' 2>/dev/null || "${PIP[@]}" pandas

TF_CPP_MIN_LOG_LEVEL=2 "$VENV/bin/python" - <<'PY'
import tensorflow as tf, tf_keras, h5py
print(f"setup_peer: versions: tensorflow {tf.__version__}, tf_keras {tf_keras.__version__}, h5py {h5py.__version__}")
PY
