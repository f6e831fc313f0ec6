#!/usr/bin/env python3
"""Keras peer for the regression example (bench/regression.sh): a `keras.layers.Normalization`
adapted on the training rows in front of the same MLP as jobs/surrogate.toml (10-64-64-1,
ReLU, MSE, Adam 1e-3, batch 64), `validation_split`, and optionally EarlyStopping +
ReduceLROnPlateau as the job has them. One process, default TF threading.
Prints one line: PEER_RESULT {json} with test R², MAE, RMSE (scikit-learn), times, versions.
"""
import argparse, json, os, time
T0 = time.time()
ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("--data-dir", default="data")
ap.add_argument("--epochs", type=int, default=60)
ap.add_argument("--batch", type=int, default=64)
ap.add_argument("--callbacks", action="store_true", help="EarlyStopping(15, restore_best) + ReduceLROnPlateau(0.5, 5)")
ap.add_argument("--no-normalization", action="store_true")
ap.add_argument("--seed", type=int, default=1)
a = ap.parse_args()
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import numpy as np, h5py, tensorflow as tf, keras
from sklearn.metrics import r2_score, mean_absolute_error, root_mean_squared_error
keras.utils.set_random_seed(a.seed)
load = lambda n: [h5py.File(os.path.join(a.data_dir, f"surrogate-{n}.h5"))[k][:] for k in ("x", "y")]
(x, y), (tx, ty) = load("train"), load("test")
split = int(len(x) * 0.9)  # Keras' validation_split rule: the last 10 %
layers = [keras.Input((10,))]
if not a.no_normalization:
    norm = keras.layers.Normalization()
    norm.adapt(x[:split])
    layers.append(norm)
layers += [keras.layers.Dense(64, activation="relu"), keras.layers.Dense(64, activation="relu"), keras.layers.Dense(1)]
model = keras.Sequential(layers)
model.compile(optimizer=keras.optimizers.Adam(1e-3), loss="mse")
cbs = []
if a.callbacks:
    cbs = [keras.callbacks.EarlyStopping(monitor="val_loss", patience=15, restore_best_weights=True),
           keras.callbacks.ReduceLROnPlateau(monitor="val_loss", factor=0.5, patience=5, min_lr=1e-5)]
t = time.time()
h = model.fit(x, y, batch_size=a.batch, epochs=a.epochs, validation_split=0.1, callbacks=cbs, verbose=0)
fit_s = time.time() - t
p = model.predict(tx, batch_size=4096, verbose=0)
res = {"r2": float(r2_score(ty, p)), "mae": float(mean_absolute_error(ty, p)), "rmse": float(root_mean_squared_error(ty, p)),
       "epochs_run": len(h.history["loss"]), "fit_seconds": fit_s, "total_seconds": time.time() - T0,
       "samples_per_s": split * len(h.history["loss"]) / fit_s,
       "tensorflow": tf.__version__, "keras": keras.__version__}
print("PEER_RESULT " + json.dumps(res))
