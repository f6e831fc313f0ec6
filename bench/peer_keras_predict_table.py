"""The Keras peer of `hvtrain predict --input new.csv --output p.csv --keep id` (bench/predict_table.sh):
pandas reads the CSV, Keras (the same MLP, its weights loaded from hvtrain's weights.h5) predicts,
pandas writes id, class and the class probabilities. Prints each phase's seconds.

    python peer_keras_predict_table.py WEIGHTS.h5 NEW.csv OUT.csv
"""
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
t0 = time.perf_counter()
import h5py  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import keras  # noqa: E402

weights, new, out = sys.argv[1:4]
t_import = time.perf_counter() - t0
with h5py.File(weights) as f:
    sizes = [int(v) for v in f["layers"][...]]
    params = [(f[f"dense{l}/weight"][...], f[f"dense{l}/bias"][...]) for l in range(len(sizes) - 1)]
    features = [s.decode() if isinstance(s, bytes) else s for s in f.attrs["x_columns"]]
model = keras.Sequential([keras.Input((sizes[0],))] + [
    keras.layers.Dense(n, activation="relu" if l < len(sizes) - 2 else "softmax") for l, n in enumerate(sizes[1:])
])
for layer, (w, b) in zip(model.layers, params):
    layer.set_weights([w, b])
t = time.perf_counter()
df = pd.read_csv(new)
t_read = time.perf_counter() - t
t = time.perf_counter()
p = model.predict(df[features].to_numpy(np.float32), batch_size=4096, verbose=0)
t_predict = time.perf_counter() - t
t = time.perf_counter()
res = pd.DataFrame({"id": df["id"], "class": p.argmax(1)})
for j in range(p.shape[1]):
    res[f"p_{j}"] = p[:, j]
res.to_csv(out, index=False)
t_write = time.perf_counter() - t
print(f"phases: import {t_import:.2f} s, read_csv {t_read:.2f} s, predict {t_predict:.2f} s, to_csv {t_write:.2f} s")
