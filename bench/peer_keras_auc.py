"""The Keras peer of hvtrain's ROC AUC and average precision (bench/auc.sh): the same MLP with
hvtrain's weights (weights.h5) evaluated on the test file by Keras' `model.evaluate` with
`keras.metrics.AUC()` (ROC, 200 thresholds, the default) and `AUC(curve="PR")` (both one vs
rest, `multi_label=True`, averaged over the classes), and scikit-learn's exact
`roc_auc_score(multi_class="ovr")` and `average_precision_score` on Keras' own probabilities and
on hvtrain predict's (P.h5). Prints one JSON line.

    python peer_keras_auc.py WEIGHTS.h5 TEST.h5 P.h5
"""
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import h5py  # noqa: E402
import numpy as np  # noqa: E402
import keras  # noqa: E402
from sklearn.metrics import average_precision_score, roc_auc_score  # noqa: E402

weights, test, pred = sys.argv[1:4]
with h5py.File(weights) as f:
    sizes = [int(v) for v in f["layers"][...]]
    params = [(f[f"dense{l}/weight"][...], f[f"dense{l}/bias"][...]) for l in range(len(sizes) - 1)]
with h5py.File(test) as f:
    x = f["x"][...].reshape(len(f["y"]), -1).astype(np.float32)
    y = f["y"][...].astype(np.int64).ravel()
k = sizes[-1]
onehot = np.eye(k, dtype=np.float32)[y]
model = keras.Sequential([keras.Input((sizes[0],))] + [
    keras.layers.Dense(n, activation="relu" if l < len(sizes) - 2 else "softmax") for l, n in enumerate(sizes[1:])
])
for layer, (w, b) in zip(model.layers, params):
    layer.set_weights([w, b])
out = {}
for name, metrics in [("plain", []), ("auc", [
        keras.metrics.AUC(name="auc", multi_label=True, num_labels=k),
        keras.metrics.AUC(name="pr_auc", curve="PR", multi_label=True, num_labels=k)])]:
    model.compile(loss="categorical_crossentropy", metrics=metrics)
    model.evaluate(x[:512], onehot[:512], batch_size=512, verbose=0)  # warm-up (tracing)
    t = time.perf_counter()
    r = model.evaluate(x, onehot, batch_size=512, verbose=0, return_dict=True)
    out[f"evaluate_seconds_{name}"] = time.perf_counter() - t
    if name == "auc":
        out["keras_auc"], out["keras_pr_auc"] = float(r["auc"]), float(r["pr_auc"])
p = model.predict(x, batch_size=4096, verbose=0).astype(np.float64)
out["sklearn_auc_keras_probs"] = roc_auc_score(y, p, multi_class="ovr")
out["sklearn_ap_keras_probs"] = average_precision_score(onehot, p)
with h5py.File(pred) as f:
    q = f["probabilities"][...].astype(np.float64)
out["sklearn_auc"] = roc_auc_score(y, q, multi_class="ovr")
out["sklearn_ap"] = average_precision_score(onehot, q)
out["max_prob_diff"] = float(np.abs(p - q).max())
out["versions"] = f"keras {keras.__version__}, scikit-learn {__import__('sklearn').__version__}"
print(json.dumps(out))
