#!/usr/bin/env python3
"""Keras peer of bench/rmsprop.sh and bench/schedules.sh: the same MLP trained on the same
training file with one of Keras' optimizers (--optimizer rmsprop: RMSprop(rho, momentum,
epsilon), not centered; adam: Adam(beta_1 0.9, beta_2 0.999, epsilon); sgd: SGD(momentum)) and
a learning-rate schedule (--schedule constant; multistep: PiecewiseConstantDecay dropping by
--factor after each epoch in --milestones; cosine_restarts: CosineDecayRestarts(--decay-steps,
--t-mul, --m-mul, alpha = --min-lr / --lr); one_cycle: PyTorch's OneCycleLR written out), evaluated
on the test file. Prints one line:
PEER_RESULT {json} with test accuracy and test NLL (bench/calibration.py) and the rate after
each epoch (the next step's, as hvtrain's metrics.jsonl `lr`).

  peer_keras_optimizer.py TRAIN.h5 TEST.h5 --optimizer rmsprop --hidden 256 --epochs 8 --batch 128
      --lr 0.001 [--rho 0.9] [--momentum 0] [--eps 1e-7] [--seed 0] [--schedule constant]
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
ap.add_argument("--optimizer", choices=["rmsprop", "adam", "sgd"], default="rmsprop")
ap.add_argument("--hidden", type=int, default=256)
ap.add_argument("--epochs", type=int, default=8)
ap.add_argument("--batch", type=int, default=128)
ap.add_argument("--lr", type=float, default=0.001)
ap.add_argument("--rho", type=float, default=0.9)
ap.add_argument("--eps", type=float, default=1e-7)
ap.add_argument("--momentum", type=float, default=0.0)
ap.add_argument("--seed", type=int, default=0)
ap.add_argument("--schedule", choices=["constant", "multistep", "cosine_restarts", "one_cycle"], default="constant")
ap.add_argument("--milestones", default="", help="multistep: epochs, comma-separated")
ap.add_argument("--factor", type=float, default=0.1)
ap.add_argument("--decay-steps", type=int, default=0)
ap.add_argument("--t-mul", type=float, default=2.0)
ap.add_argument("--m-mul", type=float, default=1.0)
ap.add_argument("--min-lr", type=float, default=0.0)
args = ap.parse_args()

with h5py.File(args.train, "r") as f:
    x, y = f["x"][...].astype(np.float32).reshape(len(f["y"]), -1), f["y"][...].astype(np.int32)
with h5py.File(args.test, "r") as f:
    xt, yt = f["x"][...].astype(np.float32).reshape(len(f["y"]), -1), f["y"][...].astype(np.int32)
k = int(max(y.max(), yt.max())) + 1
keras.utils.set_random_seed(args.seed)
model = keras.Sequential([
    keras.Input(shape=(x.shape[1],)),
    keras.layers.Dense(args.hidden, activation="relu"),
    keras.layers.Dense(k),
])
steps_per_epoch = -(-len(y) // args.batch)
lr = args.lr
if args.schedule == "multistep":
    ms = [int(m) for m in args.milestones.split(",")]
    # PiecewiseConstantDecay keeps values[i] while step <= boundaries[i]: a boundary one step
    # before each milestone epoch's first step drops the rate there, as MultiStepLR does.
    lr = keras.optimizers.schedules.PiecewiseConstantDecay(
        [m * steps_per_epoch - 1 for m in ms], [args.lr * args.factor**i for i in range(len(ms) + 1)])
elif args.schedule == "one_cycle":

    class OneCycle(keras.optimizers.schedules.LearningRateSchedule):
        """PyTorch's OneCycleLR (pct_start 0.3, div_factor 25, final_div_factor 1e4, cosine,
        no momentum cycling), written out: Keras has none."""

        def __init__(self, peak, total):
            self.peak, self.total = peak, total

        def __call__(self, step):
            s = keras.ops.cast(step, "float32")
            start = self.peak / 25.0
            floor = start / 1e4
            end1 = 0.3 * self.total - 1.0
            cos = lambda a, b, p: b + (a - b) / 2.0 * (keras.ops.cos(np.pi * p) + 1.0)
            up = cos(start, self.peak, s / end1)
            down = cos(self.peak, floor, keras.ops.minimum((s - end1) / (self.total - 1.0 - end1), 1.0))
            return keras.ops.where(s <= end1, up, down)

    lr = OneCycle(args.lr, steps_per_epoch * args.epochs)
elif args.schedule == "cosine_restarts":
    lr = keras.optimizers.schedules.CosineDecayRestarts(
        args.lr, args.decay_steps, t_mul=args.t_mul, m_mul=args.m_mul, alpha=args.min_lr / args.lr)
if args.optimizer == "sgd":
    opt = keras.optimizers.SGD(learning_rate=lr, momentum=args.momentum)
elif args.optimizer == "rmsprop":
    opt = keras.optimizers.RMSprop(learning_rate=lr, rho=args.rho, momentum=args.momentum, epsilon=args.eps)
else:
    opt = keras.optimizers.Adam(learning_rate=lr, epsilon=args.eps)
model.compile(optimizer=opt, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
t0 = time.perf_counter()
lrs = []


class EpochLr(keras.callbacks.Callback):
    """The rate of the next step after each epoch (hvtrain's metrics.jsonl `lr`)."""

    def on_epoch_end(self, epoch, logs=None):
        step = int(self.model.optimizer.iterations.numpy())
        lrs.append(float(lr(step)) if callable(lr) else float(lr))


model.fit(x, y, batch_size=args.batch, epochs=args.epochs, shuffle=True, verbose=0, callbacks=[EpochLr()])
secs = time.perf_counter() - t0
logits = model.predict(xt, batch_size=1024, verbose=0)
p = np.exp(logits - logits.max(axis=1, keepdims=True))
p /= p.sum(axis=1, keepdims=True)
result = {"peer": f"tensorflow-{tf.__version__}/keras-{keras.__version__}", "optimizer": args.optimizer,
          **scores(p, yt), "train_seconds": round(secs, 2), "lrs": lrs}
print("PEER_RESULT " + json.dumps(result), flush=True)
