#!/usr/bin/env python3
"""Keras peer for bench/sample_weights.sh: the same MLP as the hvtrain rows (10-64-64-1, ReLU,
MSE, Adam 1e-3, batch 64, a fixed number of epochs, no validation), a `keras.layers.Normalization`
adapted on the training rows, the targets standardized with the training rows' mean and std
(hvtrain's `data.normalize_y = "standard"`) and the predictions mapped back, trained with
`model.fit(..., sample_weight=w)` when --weights names the weight dataset. One process,
default TF threading. Prints one line: PEER_RESULT {json} with test RMSE, MAE and R²
(scikit-learn, against the test file's targets), seconds, versions.
"""
import argparse, json, os, time
T0 = time.time()
ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("train")
ap.add_argument("test")
ap.add_argument("--weights", default=None, help="dataset of one weight per training row (none: unweighted)")
ap.add_argument("--epochs", type=int, default=30)
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--seed", type=int, default=1)
a = ap.parse_args()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np, h5py, tensorflow as tf, keras
from sklearn.metrics import r2_score, mean_absolute_error, root_mean_squared_error
keras.utils.set_random_seed(a.seed)
with h5py.File(a.train, "r") as f:
    x, y = f["x"][...], f["y"][...]
    w = f[a.weights][...].reshape(-1) if a.weights else None
with h5py.File(a.test, "r") as f:
    tx, ty = f["x"][...], f["y"][...]
mu, sd = y.mean(axis=0), y.std(axis=0)
norm = keras.layers.Normalization()
norm.adapt(x)
model = keras.Sequential([keras.Input((x.shape[1],)), norm, keras.layers.Dense(64, activation="relu"),
                          keras.layers.Dense(64, activation="relu"), keras.layers.Dense(y.shape[1])])
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
t = time.time()
model.fit(x, (y - mu) / sd, sample_weight=w, batch_size=a.batch, epochs=a.epochs, shuffle=True, verbose=0)
fit_s = time.time() - t
p = model.predict(tx, batch_size=4096, verbose=0) * sd + mu
res = {"rmse": float(root_mean_squared_error(ty, p)), "mae": float(mean_absolute_error(ty, p)),
       "r2": float(r2_score(ty, p)), "fit_seconds": fit_s, "total_seconds": time.time() - T0,
       "peer": f"TensorFlow {tf.__version__}, Keras {keras.__version__}"}
print("PEER_RESULT " + json.dumps(res))
