#!/usr/bin/env python3
"""The regression example's data: scikit-learn's Friedman #1 generator (`make_friedman1`: 10
features uniform on [0, 1], 5 of them informative, y = 10 sin(pi x0 x1) + 20 (x2 - 0.5)^2 +
10 x3 + 5 x4 + noise), with the features put into raw simulation units as a surrogate-model
user's files hold them: scales from 1e-3 to 1e5 and offsets up to 3e5. No network needed.

  python3 bench/make_surrogate.py OUT_DIR [--rows 20000] [--test-rows 5000] [--seed 0]

Writes OUT_DIR/surrogate-train.h5 and OUT_DIR/surrogate-test.h5: x float32 [N, 10], y float32 [N, 1].
"""
import argparse, os
import numpy as np, h5py
from sklearn.datasets import make_friedman1

SCALE = np.array([1e5, 1e-3, 3e2, 1.0, 5e4, 1e-2, 7e3, 0.5, 2e4, 1e3])
OFFSET = np.array([3e5, 0.0, -1e4, 1e2, 0.0, 5e-2, 2e5, -3.0, 1e5, 0.0])

ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
ap.add_argument("out")
ap.add_argument("--rows", type=int, default=20000)
ap.add_argument("--test-rows", type=int, default=5000)
ap.add_argument("--seed", type=int, default=0)
a = ap.parse_args()
os.makedirs(a.out, exist_ok=True)
x, y = make_friedman1(n_samples=a.rows + a.test_rows, n_features=10, noise=0.5, random_state=a.seed)
x = x * SCALE + OFFSET
for name, sl in [("train", slice(0, a.rows)), ("test", slice(a.rows, None))]:
    with h5py.File(os.path.join(a.out, f"surrogate-{name}.h5"), "w") as f:
        f["x"] = x[sl].astype(np.float32)
        f["y"] = y[sl].reshape(-1, 1).astype(np.float32)
print(f"make_surrogate: {a.rows} + {a.test_rows} rows, 10 features in raw units, into {a.out}")
