#!/usr/bin/env python3
"""KerasTuner peer of `hvtrain sweep` (bench/sweep.sh): the space of bench/sweep-fashion.toml
searched by keras_tuner.Hyperband (max_epochs, factor eta, one iteration: its own trial count),
the batch size tuned through HyperModel.fit. Validation rows: the last 10 % of the training
file. One process, TensorFlow on the CPU (intra-op threads --threads).

Prints PEER_RESULT {json} as bench/sweep_optuna.py does.
"""
import argparse
import json
import os
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import h5py  # noqa: E402
import keras  # noqa: E402
import keras_tuner  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("--data-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data"))
ap.add_argument("--max-epochs", type=int, default=9)
ap.add_argument("--eta", type=int, default=3)
ap.add_argument("--seed", type=int, default=1)
ap.add_argument("--threads", type=int, default=2)
args = ap.parse_args()
tf.config.threading.set_intra_op_parallelism_threads(args.threads)
tf.config.threading.set_inter_op_parallelism_threads(1)

with h5py.File(os.path.join(args.data_dir, "fashion-mnist-train.h5")) as f:
    x, y = f["x"][:], f["y"][:].astype(np.int64)
with h5py.File(os.path.join(args.data_dir, "fashion-mnist-test.h5")) as f:
    xt, yt = f["x"][:], f["y"][:].astype(np.int64)
n_val = int(round(len(x) * 0.1))
xtr, ytr, xv, yv = x[:-n_val], y[:-n_val], x[-n_val:], y[-n_val:]

t0 = time.time()
log = []  # (time, trial id, val_loss)


class Model(keras_tuner.HyperModel):
    def build(self, hp):
        width = hp.Int("model.width", 32, 256, sampling="log")
        depth = hp.Int("model.depth", 1, 3)
        lr = hp.Float("optimizer.lr", 1e-4, 1e-2, sampling="log")
        m = keras.Sequential([keras.Input((784,))] + [keras.layers.Dense(width, activation="relu") for _ in range(depth)] + [keras.layers.Dense(10)])
        m.compile(optimizer=keras.optimizers.Adam(lr), loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), metrics=["accuracy"])
        return m

    def fit(self, hp, model, *a, **kw):
        return model.fit(*a, batch_size=hp.Choice("training.batch_size", [64, 128, 256]), **kw)


class Clock(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
        log.append((time.time() - t0, id(self.model), logs["val_loss"]))


tuner = keras_tuner.Hyperband(
    Model(), objective="val_loss", max_epochs=args.max_epochs, factor=args.eta, hyperband_iterations=1,
    seed=args.seed, directory=tempfile.mkdtemp(), project_name="sweep", overwrite=True,
)
tuner.search(xtr, ytr, validation_data=(xv, yv), callbacks=[Clock()], verbose=0)
wall = time.time() - t0
best_trial = tuner.oracle.get_best_trials(1)[0]
best_val = best_trial.score
t_best = min(t for t, _, v in log if v <= best_val + 1e-12)
model = tuner.get_best_models(1)[0]
acc = model.evaluate(xt, yt, verbose=0)[1]
trials = tuner.oracle.trials.values()
print("PEER_RESULT " + json.dumps({
    "tool": f"keras-tuner {keras_tuner.__version__} Hyperband + keras {keras.__version__} (tensorflow {tf.__version__})",
    "wall_s": wall, "time_to_best_s": t_best, "best_val_loss": best_val, "best_test_accuracy": acc,
    "best_params": best_trial.hyperparameters.values, "trials": len(trials), "epochs_trained": len(log),
}))
