#!/usr/bin/env python3
"""TensorFlow/Keras peer for the hvtrain throughput benchmark (job and method: /work/shared/PEERS.md).

784-512-512-10 MLP, ReLU, softmax cross-entropy, SGD lr 0.05 momentum 0.9, glorot-uniform, zero bias.
  --mode single                                  one process, default TF threading
  --mode mwms --worker-index I --ports P0,P1     MultiWorkerMirroredStrategy, 2 workers on 127.0.0.1
Prints one line: PEER_RESULT {json}.
"""
import argparse, json, os, resource, statistics, time


from peer_clock import process_start_time  # noqa: E402 (bench/, the script's own folder)

T0 = process_start_time()

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("--mode", choices=["single", "mwms"], default="single")
ap.add_argument("--worker-index", type=int, default=0)
ap.add_argument("--ports", default="12345,12346", help="comma-separated worker ports (mwms)")
ap.add_argument("--epochs", type=int, default=6)
ap.add_argument("--global-batch", type=int, default=256)
ap.add_argument("--data-dir", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data"))
ap.add_argument("--legacy-keras", action="store_true", help="use tf_keras in single mode too (always on for mwms)")
ap.add_argument("--seed", type=int, default=0)
args = ap.parse_args()
if args.epochs < 2:
    ap.error("--epochs must be >= 2 (the first epoch is excluded from throughput)")

# Environment must be set before TensorFlow is imported.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
workers = 1
if args.mode == "mwms":
    ports = args.ports.split(",")
    workers = len(ports)
    os.environ["TF_USE_LEGACY_KERAS"] = "1"  # Keras 3 fit fails under MWMS (keras-team/keras#20585)
    os.environ["TF_CONFIG"] = json.dumps({
        "cluster": {"worker": [f"127.0.0.1:{p}" for p in ports]},
        "task": {"type": "worker", "index": args.worker_index}})
    args.legacy_keras = True
elif args.legacy_keras:
    os.environ["TF_USE_LEGACY_KERAS"] = "1"

import h5py  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

if args.legacy_keras:
    import tf_keras as keras
else:
    import keras

strategy = tf.distribute.MultiWorkerMirroredStrategy() if args.mode == "mwms" else tf.distribute.get_strategy()


def load(split):
    with h5py.File(os.path.join(args.data_dir, f"fashion-mnist-{split}.h5"), "r") as f:
        return f["x"][...].astype(np.float32, copy=False), f["y"][...].astype(np.int32, copy=False)


x_train, y_train = load("train")
x_test, y_test = load("test")
n = len(x_train)
steps = n // args.global_batch  # whole global batches only, so every epoch does the same work
samples_per_epoch = steps * args.global_batch

# Shuffle indices (same seed on every worker), gather whole batches; MWMS splits each global
# batch between the workers (DATA auto-sharding after the rebatch).
xt, yt = tf.constant(x_train), tf.constant(y_train)
ds = (tf.data.Dataset.range(n).shuffle(n, seed=args.seed, reshuffle_each_iteration=True)
      .batch(args.global_batch, drop_remainder=True)
      .map(lambda i: (tf.gather(xt, i), tf.gather(yt, i)), num_parallel_calls=tf.data.AUTOTUNE)
      .prefetch(tf.data.AUTOTUNE))
opts = tf.data.Options()
opts.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
ds = ds.with_options(opts)

keras.utils.set_random_seed(args.seed)
with strategy.scope():
    model = keras.Sequential([
        keras.Input(shape=(784,)),
        keras.layers.Dense(512, activation="relu"),  # glorot_uniform kernel, zero bias: Keras defaults
        keras.layers.Dense(512, activation="relu"),
        keras.layers.Dense(10),
    ])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=0.05, momentum=0.9),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))


class Timing(keras.callbacks.Callback):
    """Epoch wall times; time to first step via a hook on batch 0 only."""

    def __init__(self):
        super().__init__()
        self.epoch_s, self.first_step_s = [], None
        self._supports_tf_logs = True  # tf_keras: do not convert logs to numpy on every batch

    def on_epoch_begin(self, epoch, logs=None):
        self.t = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.epoch_s.append(time.perf_counter() - self.t)

    def on_train_batch_end(self, batch, logs=None):
        if self.first_step_s is None:
            float(logs["loss"])  # wait for the step to finish
            self.first_step_s = time.time() - T0


timing = Timing()
model.fit(ds, epochs=args.epochs, steps_per_epoch=steps, callbacks=[timing], shuffle=False, verbose=0)

# Test accuracy computed locally in numpy from the trained weights (no collectives needed).
w = model.get_weights()
h = x_test
for i in range(0, len(w) - 2, 2):
    h = np.maximum(h @ w[i] + w[i + 1], 0)
test_accuracy = float(np.mean(np.argmax(h @ w[-2] + w[-1], axis=1) == y_test))

rates = [samples_per_epoch / s for s in timing.epoch_s[1:]]
result = {
    "peer": f"tensorflow-{tf.__version__}/{'tf_keras' if args.legacy_keras else 'keras'}-{keras.__version__}",
    "mode": args.mode, "workers": workers,
    "samples_per_sec": round(statistics.median(rates), 1),
    "samples_per_sec_min": round(min(rates), 1), "samples_per_sec_max": round(max(rates), 1),
    "time_to_first_step_s": round(timing.first_step_s, 3),
    "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    "test_accuracy": round(test_accuracy, 4), "epochs": args.epochs,
    "worker_index": args.worker_index, "samples_per_epoch": samples_per_epoch,
    "epoch_s": [round(s, 3) for s in timing.epoch_s],
}
print("PEER_RESULT " + json.dumps(result), flush=True)
