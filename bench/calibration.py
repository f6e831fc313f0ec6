#!/usr/bin/env python3
"""Accuracy, NLL and expected calibration error of class probabilities, the same code for
hvtrain's `predict` output and a peer's (bench/label_smoothing.sh).

  calibration.py PREDICTIONS.h5 TEST.h5     (hvtrain predict's `probabilities` against y)
"""
import json, sys

import numpy as np


def scores(p, y, bins=15):
    """Test accuracy, NLL (mean −log p of the true class) and ECE over `bins` equal-width
    confidence bins (Guo et al. 2017: Σ_bins rows/N · |accuracy − mean confidence|)."""
    conf, pred = p.max(axis=1), p.argmax(axis=1)
    right = pred == y
    edges = np.linspace(0.0, 1.0, bins + 1)
    ece = 0.0
    for lo, hi in zip(edges[:-1], edges[1:]):
        m = (conf > lo) & (conf <= hi)
        if m.any():
            ece += m.mean() * abs(right[m].mean() - conf[m].mean())
    nll = -np.mean(np.log(np.clip(p[np.arange(len(y)), y], 1e-12, 1.0)))
    return {"test_accuracy": round(float(right.mean()), 4), "test_nll": round(float(nll), 4),
            "ece": round(float(ece), 4), "mean_confidence": round(float(conf.mean()), 4)}


if __name__ == "__main__":
    import h5py
    with h5py.File(sys.argv[1], "r") as f:
        p = f["probabilities"][...].astype(np.float64)
    with h5py.File(sys.argv[2], "r") as f:
        y = f["y"][...].astype(np.int64)
    print(json.dumps(scores(p, y)))
