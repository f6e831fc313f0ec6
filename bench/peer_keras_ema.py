#!/usr/bin/env python3
"""Keras peer of bench/ema.sh: the same MLP trained on the same training file with SGD
(momentum 0.9), with `use_ema=True, ema_momentum=BETA` when --ema BETA > 0 (fit overwrites the
weights with the average at its end), evaluated on the test file. Prints one line:
PEER_RESULT {json} with test accuracy and test NLL (bench/calibration.py).

  peer_keras_ema.py TRAIN.h5 TEST.h5 --hidden 256 --epochs 8 --batch 128 --lr 0.05 [--ema 0.999] [--seed 0]
"""
import argparse, json, os, sys, time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import h5py  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
import keras  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from calibration import scores  # noqa: E402

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("train")
ap.add_argument("test")
ap.add_argument("--hidden", type=int, default=256)
ap.add_argument("--epochs", type=int, default=8)
ap.add_argument("--batch", type=int, default=128)
ap.add_argument("--lr", type=float, default=0.05)
ap.add_argument("--ema", type=float, default=0.0)
ap.add_argument("--seed", type=int, default=0)
args = ap.parse_args()


def load(path):
    with h5py.File(path, "r") as f:
        return f["x"][...].astype(np.float32).reshape(len(f["y"]), -1), f["y"][...].astype(np.int32)


x, y = load(args.train)
xt, yt = load(args.test)
k = int(max(y.max(), yt.max())) + 1
keras.utils.set_random_seed(args.seed)
model = keras.Sequential([
    keras.Input(shape=(x.shape[1],)),
    keras.layers.Dense(args.hidden, activation="relu"),
    keras.layers.Dense(k),
])
ema = {"use_ema": True, "ema_momentum": args.ema} if args.ema > 0 else {}
model.compile(optimizer=keras.optimizers.SGD(learning_rate=args.lr, momentum=0.9, **ema),
              loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
t0 = time.perf_counter()
model.fit(x, y, batch_size=args.batch, epochs=args.epochs, shuffle=True, verbose=0)
secs = time.perf_counter() - t0
logits = model.predict(xt, batch_size=1024, verbose=0)
p = np.exp(logits - logits.max(axis=1, keepdims=True))
p /= p.sum(axis=1, keepdims=True)
result = {"peer": f"tensorflow-{tf.__version__}/keras-{keras.__version__}", "ema": args.ema, **scores(p, yt),
          "train_seconds": round(secs, 2)}
print("PEER_RESULT " + json.dumps(result), flush=True)
