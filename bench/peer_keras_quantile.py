#!/usr/bin/env python3
"""Keras peer for bench/quantile.sh: the same MLP as the hvtrain rows (10-64-64-1, ReLU, Adam
1e-3, batch 64, a fixed number of epochs, no validation), a `keras.layers.Normalization`
adapted on the training rows, the targets standardized with the training rows' mean and std
(hvtrain's `data.normalize_y = "standard"`) and the predictions mapped back, trained with the
pinball loss of quantile --tau (TensorFlow Addons' `PinballLoss`, written out: TFA is no
longer maintained) or with --loss log_cosh / mse (Keras' own). One process, default TF
threading. Writes the test predictions to --out (HDF5 `outputs` [N, 1], as `hvtrain predict`)
and prints one line: PEER_RESULT {json} with seconds and versions.
"""
import argparse, json, os, time
T0 = time.time()
ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("train")
ap.add_argument("test")
ap.add_argument("--out", required=True)
ap.add_argument("--loss", choices=["quantile", "log_cosh", "mse"], default="quantile")
ap.add_argument("--tau", type=float, default=0.5)
ap.add_argument("--epochs", type=int, default=30)
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--seed", type=int, default=1)
a = ap.parse_args()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np, h5py, tensorflow as tf, keras
keras.utils.set_random_seed(a.seed)
with h5py.File(a.train, "r") as f:
    x, y = f["x"][...], f["y"][...]
with h5py.File(a.test, "r") as f:
    tx = f["x"][...]
mu, sd = y.mean(axis=0), y.std(axis=0)
norm = keras.layers.Normalization()
norm.adapt(x)
model = keras.Sequential([keras.Input((x.shape[1],)), norm, keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(64, activation="relu"), keras.layers.Dense(y.shape[1])])


def pinball(y_true, y_pred):
    u = y_true - y_pred
    return keras.ops.mean(keras.ops.maximum(a.tau * u, (a.tau - 1.0) * u), axis=-1)


loss = pinball if a.loss == "quantile" else a.loss
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss=loss)
t = time.time()
model.fit(x, (y - mu) / sd, batch_size=a.batch, epochs=a.epochs, shuffle=True, verbose=0)
fit_s = time.time() - t
p = model.predict(tx, batch_size=4096, verbose=0) * sd + mu
with h5py.File(a.out, "w") as f:
    f["outputs"] = p.astype(np.float32)
print("PEER_RESULT " + json.dumps({"fit_seconds": fit_s, "total_seconds": time.time() - T0,
                                   "peer": f"TensorFlow {tf.__version__}, Keras {keras.__version__}"}))
