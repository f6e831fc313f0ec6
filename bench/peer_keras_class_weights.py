#!/usr/bin/env python3
"""Keras peer of bench/class_weights.sh: the same MLP trained on the same imbalanced training
file, with `model.fit(class_weight=...)` None or scikit-learn's "balanced" weights, evaluated on
the (balanced) test file. Prints one line: PEER_RESULT {json} with test accuracy, balanced
accuracy (mean recall), macro F1, the rare classes' mean recall and the weights used.

  peer_keras_class_weights.py TRAIN.h5 TEST.h5 --hidden 256 --epochs 8 --batch 128 --lr 0.05
      [--balanced] [--rare 5,6,7,8,9] [--seed 0]
"""
import argparse, json, os, time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import h5py  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("train")
ap.add_argument("test")
ap.add_argument("--hidden", type=int, default=256)
ap.add_argument("--epochs", type=int, default=8)
ap.add_argument("--batch", type=int, default=128)
ap.add_argument("--lr", type=float, default=0.05)
ap.add_argument("--balanced", action="store_true")
ap.add_argument("--rare", default="5,6,7,8,9")
ap.add_argument("--seed", type=int, default=0)
args = ap.parse_args()


def load(path):
    with h5py.File(path, "r") as f:
        return f["x"][...].astype(np.float32).reshape(len(f["y"]), -1), f["y"][...].astype(np.int32)


x, y = load(args.train)
xt, yt = load(args.test)
k = int(max(y.max(), yt.max())) + 1
counts = np.bincount(y, minlength=k)
weights = None
if args.balanced:  # scikit-learn's compute_class_weight("balanced")
    weights = {c: float(len(y) / (k * counts[c])) for c in range(k) if counts[c] > 0}

keras.utils.set_random_seed(args.seed)
model = keras.Sequential([
    keras.Input(shape=(x.shape[1],)),
    keras.layers.Dense(args.hidden, activation="relu"),
    keras.layers.Dense(k),
])
model.compile(optimizer=keras.optimizers.SGD(learning_rate=args.lr, momentum=0.9),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
t0 = time.perf_counter()
model.fit(x, y, batch_size=args.batch, epochs=args.epochs, class_weight=weights, shuffle=True, verbose=0)
secs = time.perf_counter() - t0

pred = np.argmax(model.predict(xt, batch_size=1024, verbose=0), axis=1)
recall = [float(np.mean(pred[yt == c] == c)) for c in range(k) if np.any(yt == c)]
f1 = []
for c in range(k):
    right, rows, predicted = np.sum((pred == c) & (yt == c)), np.sum(yt == c), np.sum(pred == c)
    if rows + predicted > 0:
        f1.append(2.0 * right / (rows + predicted))
rare = [int(c) for c in args.rare.split(",")]
result = {
    "peer": f"tensorflow-{tf.__version__}/keras-{keras.__version__}",
    "class_weight": "balanced" if args.balanced else None,
    "weights": [round(weights[c], 4) for c in sorted(weights)] if weights else None,
    "test_accuracy": round(float(np.mean(pred == yt)), 4),
    "balanced_accuracy": round(float(np.mean(recall)), 4),
    "macro_f1": round(float(np.mean(f1)), 4),
    "rare_recall": round(float(np.mean([np.mean(pred[yt == c] == c) for c in rare])), 4),
    "train_seconds": round(secs, 2),
}
print("PEER_RESULT " + json.dumps(result), flush=True)
